/*
 * wake_file.c - release channel files: a regular file whose times a
 * release touches (futimens, one system call), and listeners that watch
 * it with inotify (IN_ATTRIB). Written once for every backend that uses
 * one: SQLite (<db>-wake beside its database, every process that opens the
 * file) and MySQL/MariaDB and MongoDB (a file in /dev/shm per server,
 * database and table: the processes of this machine only, so their
 * listeners are watch_local_only). A touch names nobody: a listener
 * reports "something was released" (key NULL) and watch.c's key-less wake
 * policy applies.
 *
 * Safe to open whatever lies at the name: never through a link, never
 * blocking (a FIFO would block a write open until a reader came), and
 * only a regular file is kept; anything else turns notifications off
 * (waiters poll). A stranger who can write the file only causes spurious
 * wake-ups, one request each.
 */
#include "ll_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* A toucher opens the file again (or tries to) at most every
 * WAKE_REOPEN_MS, so that one made by a new listener, or deleted and made
 * again, is found within that time and a missing one costs no system
 * call. */
#define WAKE_REOPEN_MS 1000

_Atomic bool ll_test_wake_silent;

int ll_wake_open (const char *path, int flags, mode_t mode)
{
   int fd = open (path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | flags, mode);
   struct stat st;
   if (fd >= 0 && (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))) {
      close (fd);
      errno = ENOTSUP;
      return -1;
   }
   return fd;
}

int ll_wake_make (const char *wake, mode_t mode, bool exact, const struct stat *owner)
{
   /* The plain open first: in a sticky directory (/dev/shm, /tmp) an
    * O_CREAT open of another user's file may be refused
    * (fs.protected_regular) where a plain one is not. */
   int fd = ll_wake_open (wake, 0, 0);
   if (fd >= 0 || errno != ENOENT)
      return fd;
   fd = ll_wake_open (wake, O_CREAT | O_EXCL, mode);
   if (fd < 0)
      return errno == EEXIST ? ll_wake_open (wake, 0, 0) : -1;
   if (exact)
      (void)fchmod (fd, mode); /* the umask took bits away */
   if (owner && geteuid () == 0)
      (void)fchown (fd, owner->st_uid, owner->st_gid);
   return fd;
}

/* t's file, opened again when WAKE_REOPEN_MS have passed; -1 for none. */
static int toucher_fd (ll_wake_toucher_t *t)
{
   if (!t->path || atomic_load (&ll_test_wake_silent))
      return -1;
   int64_t now = ll_real_now_ms ();
   if (t->opened_ms == 0 || now - t->opened_ms >= WAKE_REOPEN_MS) {
      if (t->fd >= 0)
         close (t->fd);
      t->fd = ll_wake_open (t->path, 0, 0);
      t->opened_ms = now;
   }
   return t->fd;
}

void ll_wake_touch (ll_wake_toucher_t *t)
{
   int fd = toucher_fd (t);
   if (fd >= 0)
      (void)futimens (fd, NULL);
}

void ll_wake_touch_queue (ll_wake_toucher_t *t)
{
   int fd = toucher_fd (t);
   if (fd >= 0 && pwrite (fd, "q", 1, 0) != 1) {
      /* best effort, as a touch: waiters poll */
   }
}

void ll_wake_toucher_free (ll_wake_toucher_t *t)
{
   if (t->path && t->fd >= 0) /* no path: a zeroed toucher, fd never opened */
      close (t->fd);
   free (t->path);
   t->path = NULL;
   t->fd = -1;
}

/* A listener: the inotify instance watching one channel file. */
typedef struct ll_wake_listener
{
   int fd;
   const char *backend; /* static: its messages start with it */
} ll_wake_listener_t;

void ll_wake_listener_close (void *listener)
{
   ll_wake_listener_t *l = listener;
   if (l && l->fd >= 0)
      close (l->fd);
   free (l);
}

/* BACKEND: the channel file could not be opened (errno), or is not a
 * regular file. */
static bool wake_refused (const char *backend, const char *wake, const char *detail,
                          leaselock_error_t *err)
{
   char msg[PATH_MAX + 160];
   if (errno == ENOTSUP || errno == ELOOP || errno == ENXIO)
      snprintf (msg, sizeof msg,
                "'%s' is not a regular file (a FIFO, a device or a link?): release "
                "notifications are off, waiters poll; remove it",
                wake);
   else
      snprintf (msg, sizeof msg, "'%s': %s", wake, strerror (errno));
   return ll_backend_fail (err, backend, "opening the release channel", msg, NULL, detail);
}

void *ll_wake_listen (const char *backend, const char *wake, int fd, const char *detail,
                      leaselock_error_t *err)
{
   if (fd < 0)
      return wake_refused (backend, wake, detail, err), NULL;
   close (fd);
   ll_wake_listener_t *l = malloc (sizeof *l);
   if (!l)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory"), NULL;
   l->backend = backend;
   l->fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
   /* IN_DONT_FOLLOW: a link swapped in after the open is not followed. */
   if (l->fd < 0 ||
       inotify_add_watch (
         l->fd, wake, IN_ATTRIB | IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW) < 0) {
      ll_backend_fail (err, backend, "watching the release channel", strerror (errno), NULL,
                       detail);
      ll_wake_listener_close (l);
      return NULL;
   }
   return l;
}

int ll_wake_listener_fd (void *listener)
{
   return ((ll_wake_listener_t *)listener)->fd;
}

bool ll_wake_listener_drain (void *listener, ll_watch_fn fn, void *data, leaselock_error_t *err)
{
   ll_wake_listener_t *l = listener;
   char buf[4096] __attribute__ ((aligned (__alignof__(struct inotify_event))));
   bool touched = false, left = false, broken = false;
   ssize_t n;
   while ((n = read (l->fd, buf, sizeof buf)) > 0) {
      for (char *p = buf; p < buf + n;) {
         const struct inotify_event *ev = (const struct inotify_event *)p;
         touched = touched || (ev->mask & IN_ATTRIB);
         left = left || (ev->mask & IN_MODIFY);
         broken = broken || (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED));
         p += sizeof *ev + ev->len;
      }
   }
   if (n < 0 && errno != EAGAIN && errno != EINTR)
      broken = true;
   /* Leaves first: a waiter they bring to the head is then next for the
    * release heard with them. */
   if (left)
      fn (data, LL_WATCH_QUEUE_LEFT, NULL, 0, NULL);
   if (touched)
      fn (data, LL_WATCH_RELEASE, NULL, 0, NULL);
   if (broken)
      return ll_error_set (err, LEASELOCK_BACKEND, "%s: the release channel file went away",
                           l->backend);
   return true;
}

/* ---- the same-machine channel of a server backend ----------------------- */

static void fnv64 (uint64_t *h, const char *s)
{
   /* Each part with its NUL, so that ("ab", "c") and ("a", "bc") differ. */
   for (size_t i = 0, n = strlen (s) + 1; i < n; i++)
      *h = (*h ^ (unsigned char)s[i]) * 1099511628211u;
}

/* The directory of the host channels: /dev/shm (memory: a touch never
 * reaches a disk), else /tmp. */
static const char *host_dir (void)
{
   struct stat st;
   if (stat ("/dev/shm", &st) == 0 && S_ISDIR (st.st_mode) && access ("/dev/shm", W_OK | X_OK) == 0)
      return "/dev/shm";
   return "/tmp";
}

char *ll_wake_host_path (const char *backend, const ll_uri_t *u, const char *table_option)
{
   uint64_t h = 14695981039346656037u; /* FNV-1a 64 */
   char port[16];
   fnv64 (&h, backend);
   for (int i = 0; i < u->n_hosts; i++) {
      snprintf (port, sizeof port, "%d", u->ports[i]);
      fnv64 (&h, u->hosts[i]);
      fnv64 (&h, port);
   }
   fnv64 (&h, u->path);
   const char *table = "";
   for (int i = 0; i < u->n_params; i++)
      if (!strcasecmp (u->params[i].name, table_option))
         table = u->params[i].value; /* the last one wins, as the backends read it */
   fnv64 (&h, table);
   const char *dir = host_dir ();
   size_t n = strlen (dir) + strlen (backend) + sizeof "/leaselock--0123456789abcdef.wake";
   char *path = malloc (n);
   if (path)
      snprintf (path, n, "%s/leaselock-%s-%016llx.wake", dir, backend, (unsigned long long)h);
   return path;
}

void ll_wake_host_toucher (ll_wake_toucher_t *t, const char *backend, const ll_uri_t *u,
                           const char *table_option)
{
   *t = (ll_wake_toucher_t){ .path = ll_wake_host_path (backend, u, table_option), .fd = -1 };
}

void *ll_wake_host_listen (const char *backend, const char *uri, const char *table_option,
                           leaselock_error_t *err)
{
   ll_uri_t u;
   if (!ll_uri_parse (uri, &u, err))
      return NULL;
   char *wake = ll_wake_host_path (backend, &u, table_option);
   ll_uri_cleanup (&u);
   if (!wake)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory"), NULL;
   /* 0666 whatever the umask: every local user of the table shares it. */
   void *l = ll_wake_listen (backend, wake, ll_wake_make (wake, 0666, true, NULL), NULL, err);
   free (wake);
   return l;
}
