/*
 * backend_util.c - small helpers that several backends share: no driver
 * header, no connection state, only bytes, strings and file descriptors.
 * (The secrets a connection keeps and the one scrubber live in uri.c,
 * beside the reading of a URI that says what is secret.) Also the one
 * growing array of the core's lists (ll_grow).
 */
#include "ll_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool ll_backend_fail (leaselock_error_t *err, const char *backend, const char *what,
                      const char *driver_msg, const ll_secrets_t *secrets, const char *detail)
{
   char clean[LEASELOCK_ERROR_MAX];
   ll_scrub_secrets (driver_msg && *driver_msg ? driver_msg : "unknown error", secrets, clean,
                     sizeof clean);
   /* Drivers end messages with newlines or put the server's hint on a
    * second line: one line reads better in a log. */
   size_t o = 0;
   for (; clean[o]; o++)
      if (clean[o] == '\n' || clean[o] == '\r' || clean[o] == '\t')
         clean[o] = ' ';
   while (o > 0 && clean[o - 1] == ' ')
      o--;
   clean[o] = '\0';
   return ll_error_set (err, LEASELOCK_BACKEND, "%s: %s: %s%s%s%s", backend, what, clean,
                        detail && *detail ? " (" : "", detail && *detail ? detail : "",
                        detail && *detail ? ")" : "");
}

/* What the fixed words of ll_host_failures_fail leave for the hosts:
 * "postgresql: connecting: no writable server among 16 hosts: ". */
#define LL_HOST_FAILURES_ROOM (LEASELOCK_ERROR_MAX - 64)

void ll_host_failure_add (ll_host_failures_t *f, int n_hosts, const char *host, const char *why)
{
   size_t share = LL_HOST_FAILURES_ROOM / (size_t)(n_hosts > 0 ? n_hosts : 1);
   size_t room = sizeof f->text - f->len;
   if (share > room)
      share = room;
   if (share < 8)
      return;
   /* "; " before all but the first; the reason gets what the host leaves. */
   int n = snprintf (f->text + f->len, share, "%s%s: %s", f->len ? "; " : "", host,
                     why && *why ? why : "failed");
   if (n < 0)
      return;
   f->len += (size_t)n < share ? (size_t)n : share - 1;
}

bool ll_host_failures_fail (const ll_host_failures_t *f, const char *backend, int n_hosts,
                            leaselock_error_t *err)
{
   return ll_error_set (err, LEASELOCK_BACKEND,
                        "%s: connecting: no writable server among %d hosts: %s", backend, n_hosts,
                        f->text);
}

bool ll_valid_identifier (const char *s)
{
   size_t n = strlen (s);
   if (n < 1 || n > 58) /* room for "_meta" within MySQL's 64 and PostgreSQL's 63 */
      return false;
   if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
      return false;
   for (size_t i = 1; i < n; i++)
      if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
            (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
         return false;
   return true;
}

bool ll_sql_format_all (char **out, const char *const *templates, int count, const char *table,
                        leaselock_error_t *err)
{
   for (int i = 0; i < count; i++) {
      if (!templates[i]) {
         out[i] = NULL;
         continue;
      }
      int n = snprintf (NULL, 0, templates[i], table);
      if (!(out[i] = malloc ((size_t)n + 1)))
         return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
      snprintf (out[i], (size_t)n + 1, templates[i], table);
   }
   return true;
}

bool ll_fd_looks_closed (int fd)
{
   if (fd < 0)
      return true;
   struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
   int r;
   while ((r = poll (&p, 1, 0)) < 0 && errno == EINTR) {
      /* a signal came: ask again (it does not mean the peer closed) */
   }
   return r != 0;
}

bool ll_fd_point_at_devnull (int fd)
{
   if (fd < 0)
      return false;
   int null_fd = open ("/dev/null", O_RDWR | O_CLOEXEC);
   if (null_fd < 0)
      return false;
   if (dup2 (null_fd, fd) < 0) {
      close (null_fd);
      return false;
   }
   close (null_fd);
   return true;
}

size_t ll_prefix_upper (const char *prefix, size_t len, char *out)
{
   if (len)
      memcpy (out, prefix, len);
   while (len > 0 && (unsigned char)out[len - 1] == 0xff)
      len--;
   if (len > 0)
      out[len - 1] = (char)((unsigned char)out[len - 1] + 1);
   return len;
}

size_t ll_copy_clipped (char *dst, size_t size, const char *src, size_t n)
{
   if (!src)
      n = 0;
   if (n > size - 1)
      n = size - 1;
   if (n)
      memcpy (dst, src, n);
   dst[n] = '\0';
   return n;
}

int64_t ll_us_to_left_ms (int64_t us)
{
   return us > 0 ? (us + 999) / 1000 : us / 1000;
}

bool ll_record_take_one (const leaselock_record_t *rec, void *one)
{
   ll_record_one_t *o = one;
   *o->rec = *rec;
   *o->found = true;
   return false;
}

bool ll_grow (void *items, size_t *cap, size_t n, size_t size, size_t first)
{
   if (n < *cap)
      return true;
   void *old; /* items is the address of a typed pointer: read it as one */
   memcpy (&old, items, sizeof old);
   size_t grown_cap = *cap ? 2 * *cap : first;
   void *grown = realloc (old, grown_cap * size);
   if (!grown)
      return false;
   memcpy (items, &grown, sizeof grown);
   *cap = grown_cap;
   return true;
}
