/*
 * client.c - a client's life: the default URI, creation (its first
 * connection opened at once, so that a bad URI fails there), close (with
 * or without releasing its held leases), destroy, and its getters.
 */
#include "engine_private.h"

#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ll_client_unref (leaselock_client_t *c)
{
   if (atomic_fetch_sub (&c->refs, 1) != 1)
      return;
   pthread_mutex_destroy (&c->mu);
   pthread_cond_destroy (&c->cond);
   pthread_cond_destroy (&c->renew_cond);
   pthread_cond_destroy (&c->drained);
   pthread_cond_destroy (&c->io_cond);
   ll_obs_destroy (&c->obs);
   ll_watch_destroy (&c->watch);
   free (atomic_load (&c->spare_lease));
   free (c->uri);
   free (c->uri_shown);
   free (c->label);
   free (c);
}

/* Appends path to buf at *len, percent-encoding what a URI path cannot
 * hold literally. */
static bool append_path (char *buf, size_t size, size_t *len, const char *path)
{
   for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
      bool plain = *p > 0x20 && *p < 0x7f && !strchr ("%?#", *p);
      size_t need = plain ? 1 : 3;
      if (*len + need >= size)
         return false;
      if (plain)
         buf[(*len)++] = (char)*p;
      else
         *len += (size_t)snprintf (buf + *len, size - *len, "%%%02X", *p);
   }
   buf[*len] = '\0';
   return true;
}

/* The home directory of the effective user's account (getpwuid_r), not
 * $HOME or $XDG_STATE_HOME: cron, sudo and systemd set those differently
 * for the same user, and a job must find the same database from each. */
static bool account_home (char *home, size_t size, leaselock_error_t *error)
{
   uid_t uid = geteuid ();
   struct passwd pw, *found = NULL;
   char buf[4096];
   int e = getpwuid_r (uid, &pw, buf, sizeof buf, &found);
   if (e || !found || !pw.pw_dir || pw.pw_dir[0] != '/')
      return ll_error_set (error, LEASELOCK_INVALID,
                           "no default database: user id %lu has %s; give a URI or set "
                           "LEASELOCK_URI",
                           (unsigned long)uid,
                           e        ? strerror (e)
                           : !found ? "no entry in the password database"
                                    : "no absolute home directory there");
   if (strlen (pw.pw_dir) >= size)
      return ll_error_set (error, LEASELOCK_INVALID, "no default database: home too long");
   strcpy (home, pw.pw_dir);
   return true;
}

bool leaselock_default_uri (char *buf, size_t size, leaselock_error_t *error)
{
   if (!buf)
      return ll_error_set (error, LEASELOCK_INVALID, "buf is NULL");
   char home[PATH_MAX];
   if (!account_home (home, sizeof home, error))
      return false;
   /* "/" as a home (daemons' accounts) gives no "//" */
   const char *base = strcmp (home, "/") ? home : "";
   size_t len = sizeof "sqlite://" - 1;
   if (size <= len)
      return ll_error_set (error, LEASELOCK_INVALID, "the default URI does not fit in %zu bytes",
                           size);
   memcpy (buf, "sqlite://", len + 1);
   if (!append_path (buf, size, &len, base) ||
       !append_path (buf, size, &len, "/.local/state/leaselock/locks.db"))
      return ll_error_set (error, LEASELOCK_INVALID, "the default URI does not fit in %zu bytes",
                           size);
   return true;
}

leaselock_client_t *leaselock_client_new (const char *uri, const char *label,
                                          leaselock_error_t *error)
{
   ll_process_init ();
   ll_error_clear (error);
   char dflt[4096];
   if (!uri || !*uri) {
      uri = getenv ("LEASELOCK_URI");
      if (!uri || !*uri) {
         if (!leaselock_default_uri (dflt, sizeof dflt, error))
            return NULL;
         uri = dflt;
      }
   }
   /* A label is held to a key's rules (it may be empty): it is stored as
    * text, and PostgreSQL, for one, refuses invalid UTF-8. */
   if (label && !ll_check_key (label, strlen (label), "label", true, error))
      return NULL;
   const ll_backend_t *backend = ll_backend_for_uri (uri, error);
   if (!backend)
      return NULL;

   leaselock_client_t *c = calloc (1, sizeof *c);
   if (!c)
      return ll_error_set (error, LEASELOCK_NOMEM, "out of memory"), NULL;
   c->backend = backend;
   c->uri = strdup (uri);
   /* Each secret shown as "***" grows by at most 3 bytes per '&' or '@'. */
   size_t shown_size = 2 * strlen (uri) + 8;
   c->uri_shown = malloc (shown_size);
   c->label = strdup (label ? label : "");
   if (!c->uri || !c->uri_shown || !c->label) {
      free (c->uri);
      free (c->uri_shown);
      free (c->label);
      free (c);
      return ll_error_set (error, LEASELOCK_NOMEM, "out of memory"), NULL;
   }
   ll_uri_redact (uri, c->uri_shown, shown_size);
   if (gethostname (c->host, sizeof c->host - 1) != 0)
      snprintf (c->host, sizeof c->host, "unknown");
   atomic_init (&c->refs, 1);
   ll_obs_init (&c->obs, c);
   ll_watch_init (&c->watch, backend, c->uri, &c->obs);
   pthread_mutex_init (&c->mu, NULL);
   ll_cond_init (&c->cond);
   ll_cond_init (&c->renew_cond);
   ll_cond_init (&c->drained);
   ll_cond_init (&c->io_cond);
   c->pid = ll_getpid ();

   /* Listed first, so that a fork() while the first connection opens waits
    * for it like for any other. */
   ll_clients_add (c);

   /* Open the first connection now so a bad URI fails here. */
   leaselock_error_t local;
   void *conn = ll_pool_get (c, c->pid, &local);
   if (!conn) {
      if (error)
         *error = local;
      ll_clients_remove (c);
      ll_client_unref (c);
      return NULL;
   }
   ll_pool_put (c, conn, c->pid, false);
   return c;
}

/* The next lease close should release: held by this process, not being
 * released already, not tried yet. Returned with a reference. */
static leaselock_lease_t *next_to_release (leaselock_client_t *c, pid_t me)
{
   pthread_mutex_lock (&c->mu);
   int64_t now = ll_now_ms ();
   leaselock_lease_t *l = c->leases;
   for (; l; l = l->next_all) {
      if (l->pid != me || l->close_tried || l->releasing > 0)
         continue;
      ll_check_deadline_locked (c, l, now);
      if (l->state == LEASELOCK_STATE_HELD)
         break;
   }
   if (l) {
      l->close_tried = true;
      atomic_fetch_add (&l->refs, 1);
   }
   pthread_mutex_unlock (&c->mu);
   return l;
}

/* Releases every lease the client holds, each tried once; err gets the
 * first failure. */
static bool release_all (leaselock_client_t *c, pid_t me, leaselock_error_t *err)
{
   bool ok = true;
   leaselock_lease_t *l;
   while ((l = next_to_release (c, me))) {
      leaselock_error_t one;
      if (!ll_release_lease (l, me, true, &one) && ok) {
         ok = false;
         if (err)
            *err = one;
      }
      ll_lease_unref (l);
   }
   return ok;
}

/* The end of a close: leases still held become CLOSED (those past their
 * deadline LOST), the idle connections are closed. */
static void finish_close (leaselock_client_t *c, pid_t me)
{
   pthread_mutex_lock (&c->mu);
   int64_t now = ll_now_ms ();
   for (leaselock_lease_t *l = c->leases; l; l = l->next_all) {
      if (l->pid == me)
         ll_check_deadline_locked (c, l, now);
      if (l->state == LEASELOCK_STATE_HELD) {
         ll_lease_ended_locked (c, l, now);
         l->state = LEASELOCK_STATE_CLOSED;
      }
      l->lost_notify = false; /* closing is not a loss */
   }
   int n = c->n_idle;
   void *idle[POOL_MAX];
   memcpy (idle, c->idle, sizeof idle);
   c->n_idle = 0;
   c->closed = true;
   pthread_cond_broadcast (&c->cond); /* other closers wait for this */
   pthread_mutex_unlock (&c->mu);
   for (int i = 0; i < n; i++)
      c->backend->close (idle[i]);
}

/* Marks c closing; false when it already was (after waiting, unless on
 * the renewal thread, for the close under way to finish). */
static bool begin_close (leaselock_client_t *c, pid_t me, bool release_held)
{
   pthread_mutex_lock (&c->mu);
   ll_reset_after_fork_locked (c, me);
   bool first = !atomic_load (&c->closing);
   if (first)
      c->close_releases = release_held;
   atomic_store (&c->closing, true);
   while (!first && !c->closed && !ll_on_renewal_thread (c))
      ll_cond_wait_until (&c->cond, &c->mu, -1);
   pthread_mutex_unlock (&c->mu);
   return first;
}

bool leaselock_client_close (leaselock_client_t *c, bool release_held, leaselock_error_t *error)
{
   ll_error_clear (error);
   if (!c)
      return ll_error_set (error, LEASELOCK_INVALID, "client is NULL");
   pid_t me = ll_getpid ();
   if (!begin_close (c, me, release_held))
      return true;
   ll_wake_all_waiters ();
   ll_stop_renewal (c);
   ll_watch_stop (&c->watch);
   bool ok = !release_held || release_all (c, me, error);
   finish_close (c, me);
   ll_log_flush (&c->obs);
   return ok;
}

bool leaselock_client_closed (const leaselock_client_t *c)
{
   return !c || atomic_load (&c->closing);
}

void leaselock_client_destroy (leaselock_client_t *c)
{
   if (!c)
      return;
   ll_clients_remove (c);
   leaselock_client_close (c, false, NULL);
   ll_stop_renewal (c); /* joins a renewal thread that closed the client itself */
   ll_client_unref (c);
}

const char *leaselock_client_uri (const leaselock_client_t *c)
{
   return c ? c->uri_shown : "";
}

const char *leaselock_client_backend (const leaselock_client_t *c)
{
   return c ? c->backend->name : "";
}

void leaselock_client_set_log (leaselock_client_t *client, int min_level, leaselock_log_cb fn,
                               void *user_data)
{
   if (client)
      ll_obs_set_hook (&client->obs, min_level, fn, user_data);
}

void leaselock_client_set_log_level (leaselock_client_t *client, int min_level)
{
   if (client)
      ll_obs_set_level (&client->obs, min_level);
}

ll_obs_t *ll_client_obs (leaselock_client_t *c)
{
   return &c->obs;
}

ll_watch_t *ll_client_watch (leaselock_client_t *c)
{
   return &c->watch;
}

bool ll_client_usable (leaselock_client_t *c, leaselock_error_t *err)
{
   if (!c)
      return ll_error_set (err, LEASELOCK_INVALID, "client is NULL");
   if (atomic_load (&c->closing))
      return ll_error_set (err, LEASELOCK_INVALID, "the client is closed");
   return true;
}
