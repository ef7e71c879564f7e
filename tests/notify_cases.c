/*
 * notify_cases.c - the hand-off by notification cases (see
 * notify_cases.h).
 */
#include "notify_cases.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>

static bool nt_supported (const char *uri)
{
   leaselock_error_t err;
   const ll_backend_t *b = ll_backend_for_uri (uri, &err);
   return b && b->watch_open;
}

bool nt_host_wake_path (const char *uri, const char *backend, const char *table_option, char *buf,
                        size_t size)
{
   ll_uri_t u;
   leaselock_error_t err;
   if (!ll_uri_parse (uri, &u, &err))
      return false;
   char *wake = ll_wake_host_path (backend, &u, table_option);
   ll_uri_cleanup (&u);
   if (wake)
      snprintf (buf, size, "%s", wake);
   free (wake);
   return wake != NULL;
}

bool nt_remove_wake (const char *uri)
{
   char wake[4096];
   if (!nt_wake_path (uri, wake, sizeof wake))
      return false;
   if (unlink (wake) != 0)
      fprintf (stderr, "    unlink %s: %s\n", wake, strerror (errno));
   return true;
}

/* Whether uri's listeners hear only this machine's releases. */
static bool nt_local_only (const char *uri)
{
   leaselock_error_t err;
   const ll_backend_t *b = ll_backend_for_uri (uri, &err);
   return b && b->watch_open && b->watch_local_only;
}

/* Calls of should_stop: the first tells the holder (through fd) that the
 * waiter is waiting. */
typedef struct nt_signal
{
   int fd;
   bool sent;
} nt_signal_t;

static bool nt_tell_waiting (void *data)
{
   nt_signal_t *s = data;
   if (!s->sent) {
      char b = 1;
      s->sent = write (s->fd, &b, 1) == 1;
   }
   return false;
}

/* A child that takes k (ttl 60 s), says so on to[1], waits for a byte on
 * from[0] and releases; silent: as another machine would, its touch of
 * the channel file off (ll_test_wake_silent). Exits 0 when all of it
 * worked. */
static pid_t nt_holder_of (const char *uri, const char *k, int to[2], int from[2], bool silent)
{
   pid_t pid = fork ();
   if (pid != 0)
      return pid;
   atomic_store (&ll_test_wake_silent, silent);
   close (to[0]);
   close (from[1]);
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, "holder", &err);
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *l = NULL;
   char b = 1;
   bool ok = c && leaselock_acquire (c, k, strlen (k), &o, &l, &err);
   ok = write (to[1], &b, 1) == 1 && ok;
   ok = read (from[0], &b, 1) == 1 && ok;
   ok = ok && leaselock_lease_release (l, &err);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   _exit (ok ? 0 : 1);
}

static pid_t nt_holder (const char *uri, const char *k, int to[2], int from[2])
{
   return nt_holder_of (uri, k, to, from, false);
}

/* One hand-off to c's blocking acquire of k from another process, which
 * releases once c waits. *requests: the statements c sent for it. */
static bool nt_handoff (leaselock_client_t *c, const char *uri, const char *k, uint64_t *requests)
{
   int to[2], from[2];
   if (pipe (to) != 0 || pipe (from) != 0)
      return false;
   pid_t pid = nt_holder (uri, k, to, from);
   close (to[1]);
   close (from[0]);
   char b;
   bool held = read (to[0], &b, 1) == 1;
   sleep_ms (30); /* past REJOIN_MS since c's last release of k: it claims at once */
   leaselock_stats_t before, after;
   leaselock_client_stats (c, &before, NULL);
   nt_signal_t sig = { from[1], false };
   leaselock_acquire_opts_t o = opts (60000, false);
   o.timeout_ms = 20000;
   o.should_stop = nt_tell_waiting;
   o.should_stop_data = &sig;
   leaselock_lease_t *l = NULL;
   leaselock_error_t err;
   bool ok = held && leaselock_acquire (c, k, strlen (k), &o, &l, &err);
   if (!ok && held)
      fprintf (stderr, "    acquire: %s %s\n", leaselock_code_name (err.code), err.message);
   leaselock_client_stats (c, &after, NULL);
   *requests = after.requests - before.requests;
   if (ok)
      ok = leaselock_lease_release (l, &err);
   leaselock_lease_destroy (l);
   if (!sig.sent)
      (void)!write (from[1], &b, 1);
   close (to[0]);
   close (from[1]);
   int status = 0;
   waitpid (pid, &status, 0);
   return ok && sig.sent && WIFEXITED (status) && WEXITSTATUS (status) == 0;
}

/* A release in another process wakes the waiter at once: its polls are
 * longer than its timeout, and it sends a few statements, not dozens. */
void test_notify_wakes_other_process (void)
{
   if (!nt_supported (URI))
      return;
   leaselock_client_t *c = client ("waiter");
   CHECK (c != NULL);
   atomic_store (&ll_test_wait_poll_ms, 60000);
   uint64_t requests = 0;
   bool ok = nt_handoff (c, URI, key ("notify-wake"), &requests);
   atomic_store (&ll_test_wait_poll_ms, 0);
   uint64_t opens = ll_watch_opens (ll_client_watch (c));
   leaselock_client_destroy (c);
   CHECK (ok);
   /* the first try, the try a notification woke, and at most one when
    * the listener opened and again when the reservation came */
   CHECK (requests >= 2 && requests <= 5);
   CHECK_EQ (opens, 1);
}

/* A lost notification only delays the waiter to its next poll, and the
 * listener comes back. */
void test_notify_lost_then_poll (void)
{
   if (!nt_supported (URI))
      return;
   leaselock_client_t *c = client ("waiter");
   CHECK (c != NULL);
   uint64_t requests = 0;
   atomic_store (&ll_test_wait_poll_ms, 60000);
   bool first = nt_handoff (c, URI, key ("notify-lost"), &requests);
   nt_break_listener (URI);
   /* Polls of 1 s now: the next hand-off may come by a poll or by the
    * new listener, never later than the timeout. */
   atomic_store (&ll_test_wait_poll_ms, 1000);
   bool second = first && nt_handoff (c, URI, key ("notify-lost"), &requests);
   atomic_store (&ll_test_wait_poll_ms, 0);
   int64_t until = mono_ms () + 10000;
   while (ll_watch_opens (ll_client_watch (c)) < 2 && mono_ms () < until)
      sleep_ms (20);
   uint64_t opens = ll_watch_opens (ll_client_watch (c));
   /* and notifications work again */
   atomic_store (&ll_test_wait_poll_ms, 60000);
   bool third = second && nt_handoff (c, URI, key ("notify-lost"), &requests);
   atomic_store (&ll_test_wait_poll_ms, 0);
   leaselock_client_destroy (c);
   CHECK (first);
   CHECK (second);
   CHECK_EQ (opens, 2);
   CHECK (third);
}

/* A forked child's waits are woken through a listener of its own (the
 * parent's is not used in the child). */
void test_notify_fork_child (void)
{
   if (!nt_supported (URI))
      return;
   leaselock_client_t *c = client ("waiter");
   CHECK (c != NULL);
   uint64_t requests = 0;
   atomic_store (&ll_test_wait_poll_ms, 60000);
   bool parent_ok = nt_handoff (c, URI, key ("notify-fork"), &requests);
   pid_t pid = fork ();
   if (pid == 0) {
      bool ok = nt_handoff (c, URI, key ("notify-fork"), &requests);
      ok = ok && ll_watch_opens (ll_client_watch (c)) == 1;
      leaselock_client_destroy (c);
      _exit (ok ? 0 : 1);
   }
   int status = 0;
   waitpid (pid, &status, 0);
   /* the parent's own listener still works */
   bool again = parent_ok && nt_handoff (c, URI, key ("notify-fork"), &requests);
   atomic_store (&ll_test_wait_poll_ms, 0);
   uint64_t opens = ll_watch_opens (ll_client_watch (c));
   leaselock_client_destroy (c);
   CHECK (parent_ok);
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
   CHECK (again);
   CHECK_EQ (opens, 1);
}

/* A client that never waits opens no listener and starts no thread. */
void test_notify_idle_costs_nothing (void)
{
   if (!nt_supported (URI))
      return;
   int before = nt_listeners ();
   leaselock_client_t *c = client ("idle");
   CHECK (c != NULL);
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *l = NULL;
   leaselock_error_t err;
   const char *k = key ("notify-idle");
   bool ok = leaselock_acquire (c, k, strlen (k), &o, &l, &err);
   ok = ok && leaselock_lease_release (l, &err);
   leaselock_lease_destroy (l);
   o.timeout_ms = 1000; /* a blocking acquire that finds the key free */
   l = NULL;
   ok = ok && leaselock_acquire (c, k, strlen (k), &o, &l, &err);
   ok = ok && leaselock_lease_release (l, &err);
   leaselock_lease_destroy (l);
   ll_watch_t *w = ll_client_watch (c);
   pthread_mutex_lock (&w->mu);
   bool idle = !w->running && !w->listener && w->opens == 0;
   pthread_mutex_unlock (&w->mu);
   int after = nt_listeners ();
   leaselock_client_destroy (c);
   CHECK_OK (ok, err);
   CHECK (idle);
   CHECK (after <= before);
}

/* A blocking acquire of k on c in a thread of its own. */
typedef struct nt_waiter
{
   leaselock_client_t *c;
   char k[300];
   pthread_t th;
   bool ok;
   leaselock_lease_t *l;
   leaselock_error_t err;
} nt_waiter_t;

static void *nt_waiter_main (void *arg)
{
   nt_waiter_t *w = arg;
   leaselock_acquire_opts_t o = opts (60000, false);
   o.timeout_ms = 20000;
   w->ok = leaselock_acquire (w->c, w->k, strlen (w->k), &o, &w->l, &w->err);
   return NULL;
}

/* The same in fair mode. */
static void *nt_fair_waiter_main (void *arg)
{
   nt_waiter_t *w = arg;
   leaselock_acquire_opts_t o = opts (60000, false);
   o.timeout_ms = 20000;
   o.fair = true;
   w->ok = leaselock_acquire (w->c, w->k, strlen (w->k), &o, &w->l, &w->err);
   return NULL;
}

/* Waits (up to 10 s) until c's watcher has a listener open, then a moment
 * for its LISTEN to be in place. */
static void nt_listening (leaselock_client_t *c)
{
   for (int i = 0; i < 10000 && ll_watch_opens (ll_client_watch (c)) < 1; i++)
      sleep_ms (1);
   sleep_ms (100);
}

/* A release notifies only when it leaves a waiter next (a live
 * reservation): releases nobody waits for wake no process's watcher, and
 * the one a waiter is next for wakes it. */
void test_notify_only_when_reserved (void)
{
   if (!nt_supported (URI))
      return;
   leaselock_client_t *h = client ("holder"), *x = client ("other");
   nt_waiter_t w = { .c = client ("waiter") };
   CHECK (h && x && w.c);
   snprintf (w.k, sizeof w.k, "%s", key ("notify-reserved"));
   const char *free_key = key ("notify-unwatched");
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *lh = NULL;
   leaselock_error_t err;
   CHECK_OK (leaselock_acquire (h, w.k, strlen (w.k), &o, &lh, &err), err);
   atomic_store (&ll_test_wait_poll_ms, 60000);
   pthread_create (&w.th, NULL, nt_waiter_main, &w);
   ll_watch_t *watch = ll_client_watch (w.c);
   nt_listening (w.c);
   uint64_t before = ll_watch_heard (watch);
   bool others_ok = true;
   for (int i = 0; i < 5 && others_ok; i++) {
      leaselock_lease_t *l = NULL;
      others_ok = leaselock_acquire (x, free_key, strlen (free_key), &o, &l, &err) &&
                  leaselock_lease_release (l, &err);
      leaselock_lease_destroy (l);
   }
   sleep_ms (300); /* a notification would have arrived by now */
   uint64_t after_others = ll_watch_heard (watch);
   bool released = leaselock_lease_release (lh, &err);
   pthread_join (w.th, NULL);
   atomic_store (&ll_test_wait_poll_ms, 0);
   /* The waiter may have been woken by the holder's local release (same
    * process) before its watcher heard the notification: wait for it. */
   uint64_t after_handoff = ll_watch_heard (watch);
   for (int i = 0; i < 5000 && after_handoff == after_others; i++) {
      sleep_ms (1);
      after_handoff = ll_watch_heard (watch);
   }
   CHECK_OK (others_ok, err);
   CHECK_OK (released, err);
   CHECK_OK (w.ok, w.err);
   if (after_others != before)
      fprintf (stderr, "    %llu releases nobody waited for were heard\n",
               (unsigned long long)(after_others - before));
   CHECK_EQ (after_others, before);
   CHECK (after_handoff > after_others);
   leaselock_lease_destroy (w.l);
   leaselock_lease_destroy (lh);
   leaselock_client_destroy (w.c);
   leaselock_client_destroy (x);
   leaselock_client_destroy (h);
}

/* c's tag (ll_watch_begin), into buf[3]. */
static void nt_tag (leaselock_client_t *c, char buf[3])
{
   ll_watch_t *w = ll_client_watch (c);
   pthread_mutex_lock (&w->mu);
   memcpy (buf, w->tag, 3);
   pthread_mutex_unlock (&w->mu);
}

/* A release that names its next owner is heard by that owner's process
 * alone: another process's listener, waiting for another key of the
 * table, hears nothing (PostgreSQL: the owner's tag channel). A channel
 * file (SQLite's, MySQL's and MongoDB's) names nobody: every watcher
 * hears each release there. */
void test_notify_only_next_owners_listener (void)
{
   if (!nt_supported (URI) || !strncmp (URI, "sqlite:", 7) || nt_local_only (URI))
      return;
   leaselock_client_t *h = client ("holder");
   nt_waiter_t a = { .c = client ("waiter-a") }, x = { .c = client ("waiter-x") };
   char ta[3], tx[3];
   nt_tag (a.c, ta);
   nt_tag (x.c, tx);
   for (int i = 0; i < 100 && x.c && !strcmp (ta, tx); i++) { /* 1 in 256: draw again */
      leaselock_client_destroy (x.c);
      x.c = client ("waiter-x");
      nt_tag (x.c, tx);
   }
   CHECK (h && a.c && x.c);
   snprintf (a.k, sizeof a.k, "%s", key ("notify-next-a"));
   snprintf (x.k, sizeof x.k, "%s", key ("notify-next-x"));
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *la = NULL, *lx = NULL;
   leaselock_error_t err;
   CHECK_OK (leaselock_acquire (h, a.k, strlen (a.k), &o, &la, &err), err);
   CHECK_OK (leaselock_acquire (h, x.k, strlen (x.k), &o, &lx, &err), err);
   atomic_store (&ll_test_wait_poll_ms, 60000);
   pthread_create (&a.th, NULL, nt_waiter_main, &a);
   pthread_create (&x.th, NULL, nt_waiter_main, &x);
   nt_listening (a.c);
   nt_listening (x.c);
   uint64_t x_before = ll_watch_heard (ll_client_watch (x.c));
   uint64_t a_before = ll_watch_heard (ll_client_watch (a.c));
   bool released = leaselock_lease_release (la, &err);
   pthread_join (a.th, NULL);
   for (int i = 0; i < 5000 && ll_watch_heard (ll_client_watch (a.c)) == a_before; i++)
      sleep_ms (1);
   sleep_ms (200); /* x's listener would have heard it by now */
   uint64_t a_after = ll_watch_heard (ll_client_watch (a.c));
   uint64_t x_after = ll_watch_heard (ll_client_watch (x.c));
   released = leaselock_lease_release (lx, &err) && released;
   pthread_join (x.th, NULL);
   atomic_store (&ll_test_wait_poll_ms, 0);
   CHECK_OK (released, err);
   CHECK_OK (a.ok, a.err);
   CHECK_OK (x.ok, x.err);
   CHECK (a_after > a_before);
   if (x_after != x_before)
      fprintf (stderr, "    another key's waiter heard %llu releases (tags %s, %s)\n",
               (unsigned long long)(x_after - x_before), ta, tx);
   CHECK_EQ (x_after, x_before);
   leaselock_lease_destroy (a.l);
   leaselock_lease_destroy (x.l);
   leaselock_lease_destroy (la);
   leaselock_lease_destroy (lx);
   leaselock_client_destroy (a.c);
   leaselock_client_destroy (x.c);
   leaselock_client_destroy (h);
}

/* The read end of a pipe that a fair waiter's first listener waits on
 * before it opens (nt_fair_waiter's gate); -1: none. */
static int nt_gate_fd = -1;

static void nt_gate_wait (void)
{
   char b;
   if (nt_gate_fd >= 0 && read (nt_gate_fd, &b, 1) < 0) {
      /* the test's end went away: open now */
   }
   if (nt_gate_fd >= 0)
      close (nt_gate_fd);
   nt_gate_fd = -1;
}

/* A fair waiter of k in a process of its own, its polls put off: queues,
 * holds k hold_ms once it has it, releases. Exits 0 when all of it worked.
 * gate (a pipe; NULL: none): its watcher opens its first listener only
 * once a byte (or the end) can be read from gate[0]; the caller closes
 * gate[0], writes to gate[1] and closes it. */
static pid_t nt_fair_waiter_gated (const char *uri, const char *k, int64_t hold_ms, const int *gate)
{
   pid_t pid = fork ();
   if (pid != 0)
      return pid;
   if (gate) {
      close (gate[1]);
      nt_gate_fd = gate[0];
      ll_test_watch_open_hook = nt_gate_wait;
   }
   atomic_store (&ll_test_wait_poll_ms, 60000);
   leaselock_error_t err;
   leaselock_client_t *c = leaselock_client_new (uri, "fair-waiter", &err);
   leaselock_acquire_opts_t o = opts (60000, false);
   o.fair = true;
   o.timeout_ms = 20000;
   leaselock_lease_t *l = NULL;
   bool ok = c && leaselock_acquire (c, k, strlen (k), &o, &l, &err);
   if (ok) {
      sleep_ms (hold_ms);
      ok = leaselock_lease_release (l, &err);
   }
   if (!ok)
      fprintf (stderr, "    fair waiter: %s %s\n", leaselock_code_name (err.code), err.message);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   _exit (ok ? 0 : 1);
}

static pid_t nt_fair_waiter (const char *uri, const char *k, int64_t hold_ms)
{
   return nt_fair_waiter_gated (uri, k, hold_ms, NULL);
}

/* How many of the n child processes pids (a pid <= 0: none) exited 0;
 * waits for each. */
static int nt_exited_ok (const pid_t *pids, int n)
{
   int done = 0;
   for (int i = 0; i < n; i++) {
      int status = 0;
      if (pids[i] > 0 && waitpid (pids[i], &status, 0) == pids[i] && WIFEXITED (status) &&
          WEXITSTATUS (status) == 0)
         done++;
   }
   return done;
}

/* Waits (up to 5 s) until k's fair queue has n live entries; where
 * inspect cannot count them (MongoDB: no record_waiters), a moment for
 * the waiter just started to join: the waiters' entries, which they do
 * not renew while their polls are put off, must all still be live
 * (LL_WAITER_KEEP_MS) at the first release. */
static bool nt_queued (leaselock_client_t *c, const char *k, int64_t n)
{
   leaselock_error_t err;
   const ll_backend_t *b = ll_backend_for_uri (URI, &err);
   if (b && !b->record_waiters) {
      sleep_ms (150);
      return true;
   }
   leaselock_record_t r = { 0 };
   for (int i = 0; i < 500; i++) {
      bool found = false;
      if (leaselock_inspect (c, k, strlen (k), &r, &found, NULL) && found && r.queued >= n)
         return true;
      sleep_ms (10);
   }
   return false;
}

/* Three fair waiters in processes of their own, queued one after the
 * other, take the key in turn, each woken by the release before it: the
 * third, two places back when it last looked, is woken by the releases
 * (or, where they notify, the queue leaves) that brought it to the head,
 * though the notification names nobody (SQLite, the same-machine
 * channels) and it never polls. */
void test_notify_fair_queue_handoffs (void)
{
   if (!nt_supported (URI))
      return;
   leaselock_client_t *h = client ("holder");
   CHECK (h);
   const char *k = key ("notify-fair-queue");
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *l = NULL;
   leaselock_error_t err;
   CHECK_OK (leaselock_acquire (h, k, strlen (k), &o, &l, &err), err);
   pid_t pids[3];
   bool queued = true;
   for (int i = 0; i < 3; i++) {
      pids[i] = nt_fair_waiter (URI, k, 30);
      queued = queued && pids[i] > 0 && nt_queued (h, k, i + 1);
   }
   sleep_ms (100); /* their listeners are in place */
   int64_t t0 = mono_ms ();
   bool released = leaselock_lease_release (l, &err);
   int done = nt_exited_ok (pids, 3);
   int64_t took = mono_ms () - t0;
   leaselock_lease_destroy (l);
   leaselock_client_destroy (h);
   CHECK (queued);
   CHECK_OK (released, err);
   CHECK_EQ (done, 3);
   /* three holds of 30 ms and three hand-offs; a missed wake-up waits for
    * the waiter's timeout (20 s) */
   if (took >= 5000)
      fprintf (stderr, "    the three waiters took %lld ms\n", (long long)took);
   CHECK (took < 5000);
}

/* Whether uri's fair queue leaves notify, on a backend whose records name
 * the reserved next owner (the cases below read it). */
static bool nt_leaves_notify (void)
{
   leaselock_error_t err;
   const ll_backend_t *b = ll_backend_for_uri (URI, &err);
   return nt_supported (URI) && b->queue_leave_notifies && b->record_waiters;
}

/* Whether, within ms (once *gate is set, when given), k's record read
 * through c is held by one owner and reserved by another: a waiter
 * claimed it during the hold. *r: the record last read. */
static bool nt_claimed_while_held (leaselock_client_t *c, const char *k, int64_t ms,
                                   atomic_bool *gate, leaselock_record_t *r)
{
   for (int64_t t0 = mono_ms (); mono_ms () - t0 < ms; sleep_ms (10)) {
      bool found = false;
      if ((!gate || atomic_load (gate)) && leaselock_inspect (c, k, strlen (k), r, &found, NULL) &&
          found && r->owner[0] && r->next_owner[0] && strcmp (r->owner, r->next_owner) != 0)
         return true;
   }
   return false;
}

/* Where queue leaves notify (queue_leave_notifies), the new holder's leave
 * wakes the waiter it brings to the head, which joins again and claims the
 * reservation while the key is still held: its record names a next owner
 * during the hold, though that waiter never polls. Without the leave's
 * notification it would sleep until the release, and hand-off would cost
 * its join as well. */
void test_notify_fair_next_claims_while_held (void)
{
   if (!nt_leaves_notify ())
      return;
   leaselock_error_t err;
   leaselock_client_t *h = client ("holder");
   CHECK (h);
   const char *k = key ("notify-fair-claim");
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *l = NULL;
   CHECK_OK (leaselock_acquire (h, k, strlen (k), &o, &l, &err), err);
   pid_t first = nt_fair_waiter (URI, k, 3000);
   bool queued = first > 0 && nt_queued (h, k, 1);
   pid_t second = nt_fair_waiter (URI, k, 30);
   queued = queued && second > 0 && nt_queued (h, k, 2);
   sleep_ms (100); /* their listeners are in place */
   bool released = leaselock_lease_release (l, &err);
   /* The first takes the key and holds it 3 s; within 2 s of the release,
    * the second must have claimed it. */
   leaselock_record_t r = { 0 };
   bool claimed = nt_claimed_while_held (h, k, 2000, NULL, &r);
   int done = nt_exited_ok ((pid_t[]){ first, second }, 2);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (h);
   CHECK (queued);
   CHECK_OK (released, err);
   if (!claimed)
      fprintf (stderr, "    during the first waiter's hold: owner \"%s\", next owner \"%s\"\n",
               r.owner, r.next_owner);
   CHECK (claimed);
   CHECK_EQ (done, 2);
}

/* A leave nobody heard: the waiter behind the next holder opens its
 * listener only after that holder took the key and left the queue (a
 * listener slow to connect, or one opened again after it broke). Once
 * listening, its watcher has it join again: it finds itself at the head
 * and claims the reservation during the hold, though its polls are put
 * off and the leave's notification went unheard. */
void test_notify_fair_leave_before_listening (void)
{
   if (!nt_leaves_notify ())
      return;
   leaselock_error_t err;
   leaselock_client_t *h = client ("holder");
   CHECK (h);
   const char *k = key ("notify-fair-unheard");
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *l = NULL;
   CHECK_OK (leaselock_acquire (h, k, strlen (k), &o, &l, &err), err);
   int gate[2];
   CHECK (pipe (gate) == 0);
   pid_t first = nt_fair_waiter (URI, k, 3000);
   bool queued = first > 0 && nt_queued (h, k, 1);
   sleep_ms (100); /* its listener is in place */
   pid_t second = nt_fair_waiter_gated (URI, k, 30, gate);
   close (gate[0]);
   queued = queued && second > 0 && nt_queued (h, k, 2);
   bool released = leaselock_lease_release (l, &err);
   /* The first holds the key and has left the queue: one entry left,
    * the second's, whose listener is not open yet. */
   leaselock_record_t r = { 0 };
   bool left = false;
   for (int i = 0; !left && i < 500; i++, sleep_ms (10)) {
      bool found = false;
      left = leaselock_inspect (h, k, strlen (k), &r, &found, NULL) && found && r.owner[0] &&
             strcmp (r.owner, leaselock_lease_owner (l)) != 0 && r.queued == 1;
   }
   (void)!write (gate[1], "g", 1);
   close (gate[1]);
   bool claimed = left && nt_claimed_while_held (h, k, 2000, NULL, &r);
   int done = nt_exited_ok ((pid_t[]){ first, second }, 2);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (h);
   CHECK (queued);
   CHECK_OK (released, err);
   CHECK (left);
   if (!claimed)
      fprintf (stderr, "    during the first waiter's hold: owner \"%s\", next owner \"%s\"\n",
               r.owner, r.next_owner);
   CHECK (claimed);
   CHECK_EQ (done, 2);
}

/* test_notify_fair_leave_during_count's hook: at the waiter's count, the
 * holder (another process, so that no local release wakes the waiter)
 * releases, and the hook returns once this process's watcher has heard
 * the leave of the waiter ahead (which took the key). */
static int nt_count_fd = -1; /* the holder's release order */
static leaselock_client_t *nt_count_client;
static atomic_bool nt_count_heard;

static void nt_release_at_count (void)
{
   if (nt_count_fd < 0)
      return;
   ll_watch_t *watch = ll_client_watch (nt_count_client);
   uint64_t before = ll_watch_leaves (watch);
   char b = 1;
   bool told = write (nt_count_fd, &b, 1) == 1;
   nt_count_fd = -1;
   for (int i = 0; told && i < 5000 && ll_watch_leaves (watch) == before; i++)
      sleep_ms (1);
   atomic_store (&nt_count_heard, ll_watch_leaves (watch) != before);
}

/* Where queue leaves notify: a leave heard while a waiter's count was on
 * its way still counts. The waiter counted one ahead, which took the key
 * and left before the waiter went to sleep: it must wake at once, join
 * again and claim the reservation during that hold, not sleep until its
 * next poll (put off here). */
void test_notify_fair_leave_during_count (void)
{
   if (!nt_leaves_notify ())
      return;
   leaselock_error_t err;
   leaselock_client_t *h = client ("other holder");
   nt_waiter_t w = { .c = client ("waiter") };
   CHECK (h && w.c);
   const char *k = key ("notify-leave-count");
   snprintf (w.k, sizeof w.k, "%s", k);
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *other = NULL;
   int to[2], from[2];
   CHECK (pipe (to) == 0 && pipe (from) == 0);
   pid_t holder = nt_holder (URI, k, to, from);
   close (to[1]);
   close (from[0]);
   char byte;
   CHECK (read (to[0], &byte, 1) == 1); /* it holds k */
   /* The waiter's watcher runs from an earlier wait (its first wait
    * starts it, after its count). */
   const char *k2 = key ("notify-leave-count-other");
   CHECK_OK (leaselock_acquire (h, k2, strlen (k2), &o, &other, &err), err);
   leaselock_acquire_opts_t wo = opts (60000, false);
   wo.timeout_ms = 300;
   leaselock_lease_t *none = NULL;
   CHECK (!leaselock_acquire (w.c, k2, strlen (k2), &wo, &none, &err));
   nt_listening (w.c);
   pid_t first = nt_fair_waiter (URI, k, 3000);
   bool queued = first > 0 && nt_queued (h, k, 1);
   sleep_ms (100); /* its listener is in place */
   atomic_store (&ll_test_wait_poll_ms, 60000);
   nt_count_client = w.c;
   atomic_store (&nt_count_heard, false);
   nt_count_fd = from[1];
   ll_test_queue_counted_hook = nt_release_at_count;
   CHECK (pthread_create (&w.th, NULL, nt_fair_waiter_main, &w) == 0);
   leaselock_record_t r = { 0 };
   bool claimed = nt_claimed_while_held (h, k, 2500, &nt_count_heard, &r);
   int status = 0;
   bool first_ok = first > 0 && waitpid (first, &status, 0) == first && WIFEXITED (status) &&
                   WEXITSTATUS (status) == 0;
   pthread_join (w.th, NULL);
   ll_test_queue_counted_hook = NULL;
   atomic_store (&ll_test_wait_poll_ms, 0);
   if (nt_count_fd >= 0) /* the hook never ran: let the holder go */
      (void)!write (from[1], &byte, 1);
   nt_count_fd = -1;
   close (to[0]);
   close (from[1]);
   bool holder_ok =
     waitpid (holder, &status, 0) == holder && WIFEXITED (status) && WEXITSTATUS (status) == 0;
   bool heard = atomic_load (&nt_count_heard);
   if (w.l)
      CHECK_OK (leaselock_lease_release (w.l, &err), err);
   leaselock_lease_destroy (w.l);
   leaselock_lease_release (other, &err);
   leaselock_lease_destroy (other);
   leaselock_client_destroy (w.c);
   leaselock_client_destroy (h);
   CHECK (queued);
   CHECK (holder_ok);
   CHECK (heard);
   if (!claimed)
      fprintf (stderr, "    during the first waiter's hold: owner \"%s\", next owner \"%s\"\n",
               r.owner, r.next_owner);
   CHECK (claimed);
   CHECK (first_ok);
   CHECK_OK (w.ok, w.err);
}

void test_notify_local_only_polls (void)
{
   if (!nt_local_only (URI))
      return;
   nt_waiter_t w = { .c = client ("waiter") };
   CHECK (w.c);
   snprintf (w.k, sizeof w.k, "%s", key ("notify-local-only"));
   int to[2], from[2];
   CHECK (pipe (to) == 0 && pipe (from) == 0);
   pid_t pid = nt_holder_of (URI, w.k, to, from, true);
   close (to[1]);
   close (from[0]);
   char b = 1;
   bool held = read (to[0], &b, 1) == 1;
   pthread_create (&w.th, NULL, nt_waiter_main, &w); /* default polls */
   ll_watch_t *watch = ll_client_watch (w.c);
   nt_listening (w.c);
   /* What the waiter's plan reads (wait.c): with a listener open, a
    * reserved waiter would poll every WATCHED_NEXT_POLL_MS, as if every
    * release woke it. */
   char owner[LEASELOCK_OWNER_LEN + 1] = "00000000000000000000000000000000";
   pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
   pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
   ll_watch_waiter_t e = {
      .key = w.k, .key_len = strlen (w.k), .since = mono_ms (), .mu = &mu, .cond = &cond
   };
   ll_watch_begin (watch, &e, owner, getpid ());
   bool released = false;
   bool every = ll_watch_update (watch, &e, true, false, -1, 0, &released);
   pthread_mutex_lock (&watch->mu);
   bool open = watch->listener != NULL;
   pthread_mutex_unlock (&watch->mu);
   ll_watch_end (watch, &e, getpid ());
   uint64_t heard = ll_watch_heard (watch);
   (void)!write (from[1], &b, 1); /* released, untold */
   pthread_join (w.th, NULL);
   uint64_t heard_after = ll_watch_heard (watch);
   close (to[0]);
   close (from[1]);
   int status = 0;
   waitpid (pid, &status, 0);
   CHECK (held);
   CHECK (open);
   CHECK (!every);
   CHECK_OK (w.ok, w.err);
   CHECK_EQ (heard_after, heard); /* taken by a poll, nothing was heard */
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
   leaselock_lease_destroy (w.l);
   leaselock_client_destroy (w.c);
}

/* In a child bounded by alarm(): a FIFO at the channel's name is
 * refused, never opened for writing (which blocks until a reader comes):
 * a release that hands the key on, the listener and the client's close
 * return. */
static atomic_int nt_watch_failures;

static void nt_count_watch_failures (const leaselock_log_event_t *ev, void *data)
{
   (void)data;
   if (ev->level == LEASELOCK_LOG_WARNING && !strcmp (ev->event, "watch_failed") &&
       strstr (ev->message, "not a regular file"))
      atomic_fetch_add (&nt_watch_failures, 1);
}

static int nt_fifo_child (const char *uri, const char *k)
{
   alarm (10);
   leaselock_error_t err;
   void *listener = ll_backend_for_uri (uri, &err)->watch_open (uri, "00", &err);
   if (listener || !strstr (err.message, "not a regular file")) {
      fprintf (stderr, "    watch_open: %s\n", listener ? "opened" : err.message);
      return 1;
   }
   leaselock_client_t *a = leaselock_client_new (uri, "a", &err);
   nt_waiter_t w = { .c = leaselock_client_new (uri, "b", &err) };
   snprintf (w.k, sizeof w.k, "%s", k);
   leaselock_acquire_opts_t o = opts (60000, false);
   leaselock_lease_t *la = NULL;
   if (!a || !w.c || !leaselock_acquire (a, k, strlen (k), &o, &la, &err))
      return 2;
   leaselock_client_set_log (w.c, LEASELOCK_LOG_WARNING, nt_count_watch_failures, NULL);
   /* b waits (its listener refused) and claims the reservation, so that
    * a's release touches the channel */
   pthread_create (&w.th, NULL, nt_waiter_main, &w);
   sleep_ms (300);
   bool released = leaselock_lease_release (la, &err);
   leaselock_lease_destroy (la);
   pthread_join (w.th, NULL);
   released = released && w.ok && leaselock_lease_release (w.l, &err);
   leaselock_lease_destroy (w.l);
   leaselock_client_destroy (a);
   leaselock_client_destroy (w.c);
   int failures = atomic_load (&nt_watch_failures);
   if (failures != 1)
      fprintf (stderr, "    %d watch_failed warnings (want 1)\n", failures);
   return released ? failures == 1 ? 0 : 4 : 3;
}

void test_notify_wake_fifo_refused (void)
{
   char wake[4096];
   if (!nt_supported (URI) || !nt_wake_path (URI, wake, sizeof wake))
      return;
   (void)unlink (wake); /* the regular file the cases before made */
   CHECK (mkfifo (wake, 0600) == 0);
   int64_t t0 = mono_ms ();
   pid_t pid = fork ();
   if (pid == 0)
      _exit (nt_fifo_child (URI, key ("notify-fifo")));
   int status = 0;
   waitpid (pid, &status, 0);
   CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
   if (WIFSIGNALED (status))
      fprintf (stderr, "    the child hung (signal %d)\n", WTERMSIG (status));
   CHECK (mono_ms () - t0 < 5000);
   CHECK (unlink (wake) == 0);
}

void notify_cases_run (void)
{
   RUN (test_notify_wakes_other_process);
   RUN (test_notify_lost_then_poll);
   RUN (test_notify_fork_child);
   RUN (test_notify_idle_costs_nothing);
   RUN (test_notify_only_when_reserved);
   RUN (test_notify_only_next_owners_listener);
   RUN (test_notify_fair_queue_handoffs);
   RUN (test_notify_fair_next_claims_while_held);
   RUN (test_notify_fair_leave_before_listening);
   RUN (test_notify_fair_leave_during_count);
   RUN (test_notify_local_only_polls);
   RUN (test_notify_wake_fifo_refused);
}
