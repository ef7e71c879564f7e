/*
 * watch.c - hand-off by notification: a client's watcher listens for
 * releases (ll_backend_t's watch_* ops: PostgreSQL LISTEN, SQLite's
 * channel file, MySQL's and MongoDB's same-machine channel file) and wakes
 * the blocking acquire that can take the key at once, instead of leaving
 * it to its next poll.
 *
 * Costs nothing while idle: the thread and its listener (a connection of
 * its own on a server backend) start when one of the client's acquires
 * first has to wait, and stop with the client. A lost notification (a
 * listener that broke, a release while it reconnects) only delays a waiter
 * to its next poll; after a reconnect the reserved waiters try at once,
 * since releases may have gone unheard meanwhile.
 *
 * Bounded: the thread polls its listener with WATCH_POLL_MS timeouts and
 * checks for a stop between them; a listener's open is bounded by the
 * backend's connect timeout; the client's close joins the thread.
 */
#include "ll_internal.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <string.h>
#include <unistd.h>

#define WATCH_POLL_MS 100
#define REOPEN_MIN_MS 50
#define REOPEN_MAX_MS 2000

_Atomic int64_t ll_test_wait_poll_ms;
void (*ll_test_watch_open_hook) (void);

/* A new random tag (ll_watch_begin): two hex digits. */
static void new_tag (ll_watch_t *w)
{
   unsigned char r;
   if (getrandom (&r, 1, GRND_NONBLOCK) != 1)
      r = (unsigned char)rand ();
   static const char hex[] = "0123456789abcdef";
   w->tag[0] = hex[r >> 4];
   w->tag[1] = hex[r & 15];
   w->tag[2] = '\0';
}

void ll_watch_init (ll_watch_t *w, const ll_backend_t *backend, const char *uri, ll_obs_t *obs)
{
   memset (w, 0, sizeof *w);
   w->backend = backend;
   w->uri = uri;
   w->obs = obs;
   pthread_mutex_init (&w->mu, NULL);
   ll_cond_init (&w->cond);
   w->pid = ll_getpid ();
   new_tag (w);
}

/* Sets e->woken and wakes its wait. Called with w->mu held. */
static void wake (ll_watch_waiter_t *e)
{
   pthread_mutex_lock (e->mu);
   e->woken = true;
   pthread_cond_broadcast (e->cond);
   pthread_mutex_unlock (e->mu);
}

static bool same_key (const ll_watch_waiter_t *e, const char *key, size_t len)
{
   return e->key_len == len && !memcmp (e->key, key, len);
}

/* Whether e is the oldest of this process's waiters of its key that
 * believe they hold the reservation. A waiter that an older one took the
 * reservation over from still believes so until its next try; the older
 * one is the one that holds it. Called with w->mu held. */
static bool oldest_reserved (const ll_watch_t *w, const ll_watch_waiter_t *e)
{
   for (const ll_watch_waiter_t *o = w->waiters; o; o = o->next)
      if (o != e && o->reserved && o->since < e->since && same_key (o, e->key, e->key_len))
         return false;
   return true;
}

/* The wake policy (ll_watch_t's comment): one waiter per release, the one
 * that can take the key, so a release costs one request, not one per
 * waiter. Called with w->mu held. */
static void on_release (void *data, const char *key, size_t len, const char *next_owner)
{
   ll_watch_t *w = data;
   ll_watch_waiter_t *oldest = NULL;
   bool woke = false;
   for (ll_watch_waiter_t *e = w->waiters; e; e = e->next) {
      if (key && !same_key (e, key, len))
         continue;
      e->released = true;
      /* A fair waiter that the releases heard since its last try may have
       * brought to the queue's head or next to it is next as much as a
       * reserved one: its own count is from before them. Where leaves
       * notify, they move it instead (on_queue_left). */
      if (!w->backend->queue_leave_notifies && e->ahead > 0 && --e->ahead <= 1)
         e->reserved = true;
      if (!key) {
         if (e->reserved && oldest_reserved (w, e))
            wake (e);
         continue;
      }
      if (next_owner && *next_owner) {
         if (!strcmp (e->owner, next_owner)) {
            wake (e);
            woke = true;
         }
         continue;
      }
      if (!next_owner && e->reserved && oldest_reserved (w, e)) {
         wake (e);
         woke = true;
      }
      if (!e->behind && (!oldest || e->since < oldest->since))
         oldest = e;
   }
   /* No live reservation (or none known here): the oldest waiter of the
    * key tries, and claims the reservation if another process's waiter
    * takes the key first. Not a waiter that saw another next at its last
    * try, nor one that went to the back (acquire.c's REJOIN_MS): the one
    * that was next has taken the key since, and may take it again after
    * its release; the others claim the reservation at their next poll,
    * rather than every process's waiter on every such release. */
   if (key && !woke && oldest && !(next_owner && *next_owner))
      wake (oldest);
}

/* e is first in its key's fair queue now: next as much as a reserved
 * waiter, and woken to join again and claim. Called with w->mu held. */
static void at_head (ll_watch_waiter_t *e)
{
   e->ahead = 0;
   e->reserved = true;
   wake (e);
}

/* A waiter left a key's fair queue (key NULL: unknown which;
 * ll_backend_t's queue_leave_notifies): the waiter it brings to the head
 * (named by next_owner, else each fair waiter of the key moves up a place)
 * is woken to join again and claim the reservation while the key is
 * still held. Called with w->mu held. */
static void on_queue_left (ll_watch_t *w, const char *key, size_t len, const char *next_owner)
{
   for (ll_watch_waiter_t *e = w->waiters; e; e = e->next) {
      if (key && !same_key (e, key, len))
         continue;
      if (next_owner ? !strcmp (e->owner, next_owner) : e->ahead > 0 && --e->ahead == 0)
         at_head (e);
   }
}

static void on_event_locked (void *data, ll_watch_event_t ev, const char *key, size_t len,
                             const char *next_owner)
{
   ll_watch_t *w = data;
   pthread_mutex_lock (&w->mu);
   if (ev == LL_WATCH_QUEUE_LEFT) {
      w->leaves++;
      on_queue_left (w, key, len, next_owner);
   } else {
      w->heard++;
      on_release (w, key, len, next_owner);
   }
   pthread_mutex_unlock (&w->mu);
}

/* Waits on w->cond for ms unless stopping. Called with w->mu held. */
static void pause_locked (ll_watch_t *w, int64_t ms)
{
   int64_t until = ll_real_now_ms () + ms;
   while (!w->stopping && ll_real_now_ms () < until)
      ll_cond_wait_until (&w->cond, &w->mu, ll_now_ms () + (until - ll_real_now_ms ()));
}

/* Opens a listener (after backoff_ms when the last one failed) and
 * publishes it. Returns it, or NULL when stopping or it failed. */
static void *open_listener (ll_watch_t *w, int64_t *backoff_ms)
{
   leaselock_error_t err;
   char tag[sizeof w->tag];
   pthread_mutex_lock (&w->mu);
   memcpy (tag, w->tag, sizeof tag);
   pthread_mutex_unlock (&w->mu);
   if (ll_test_watch_open_hook)
      ll_test_watch_open_hook ();
   void *l = w->backend->watch_open (w->uri, tag, &err);
   pthread_mutex_lock (&w->mu);
   if (l && w->stopping) {
      pthread_mutex_unlock (&w->mu);
      w->backend->watch_close (l);
      return NULL;
   }
   if (l) {
      w->listener = l;
      w->opens++;
      *backoff_ms = REOPEN_MIN_MS;
      /* Releases may have gone unheard before: the waiters that can
       * take a key try now. */
      on_release (w, NULL, 0, NULL);
      /* So may queue leaves, where they move the queue: each fair waiter
       * behind others joins again and counts anew (one that such a leave
       * brought to the head claims the reservation then). */
      if (w->backend->queue_leave_notifies)
         for (ll_watch_waiter_t *e = w->waiters; e; e = e->next)
            if (e->ahead > 0)
               wake (e);
   }
   /* A failure is logged once until a listener opens again: waiters
    * poll meanwhile, and the open is retried with backoff. */
   bool warn = !l && !w->warned && !w->stopping && w->obs;
   w->warned = !l;
   if (warn) {
      pthread_mutex_unlock (&w->mu); /* the hook runs with no lock held */
      LL_LOG (w->obs, LEASELOCK_LOG_WARNING, "watch_failed", NULL, 0, 0, err.code,
              "release notifications are off (waiters poll): %s", err.message);
      pthread_mutex_lock (&w->mu);
   }
   if (!l) {
      pause_locked (w, *backoff_ms);
      *backoff_ms = *backoff_ms * 2 > REOPEN_MAX_MS ? REOPEN_MAX_MS : *backoff_ms * 2;
   }
   pthread_mutex_unlock (&w->mu);
   return l;
}

static void *watch_main (void *arg)
{
   ll_watch_t *w = arg;
   int64_t backoff = REOPEN_MIN_MS;
   void *l = NULL;
   for (;;) {
      pthread_mutex_lock (&w->mu);
      bool stop = w->stopping;
      pthread_mutex_unlock (&w->mu);
      if (stop)
         break;
      if (!l && !(l = open_listener (w, &backoff)))
         continue;
      struct pollfd p[2] = { { .fd = w->backend->watch_fd (l), .events = POLLIN },
                             { .fd = w->stop_fd, .events = POLLIN } };
      int r = p[0].fd < 0 ? -1 : poll (p, 2, WATCH_POLL_MS);
      if (r > 0 && p[1].revents) {
         eventfd_t ignored;
         (void)eventfd_read (w->stop_fd, &ignored);
      }
      if (r == 0 || (r < 0 && p[0].fd >= 0) || (r > 0 && !p[0].revents))
         continue; /* timeout, EINTR or a stop: check for a stop */
      leaselock_error_t err;
      if (p[0].fd >= 0 && w->backend->watch_drain (l, on_event_locked, w, &err))
         continue;
      /* Broken: closed, and reopened after a pause. */
      pthread_mutex_lock (&w->mu);
      w->listener = NULL;
      pause_locked (w, backoff);
      pthread_mutex_unlock (&w->mu);
      w->backend->watch_close (l);
      l = NULL;
   }
   pthread_mutex_lock (&w->mu);
   w->listener = NULL;
   pthread_mutex_unlock (&w->mu);
   if (l)
      w->backend->watch_close (l);
   return NULL;
}

/* A listener and thread of the parent are not ours. Called with w->mu
 * held. */
static void reset_after_fork_locked (ll_watch_t *w, pid_t me)
{
   if (w->pid == me)
      return;
   /* Its socket is the parent's: freed without I/O. */
   if (w->listener && w->backend->watch_abandon)
      w->backend->watch_abandon (w->listener);
   w->listener = NULL;
   w->running = false;
   w->waiters = NULL;
   w->opens = 0;
   w->heard = 0;
   w->leaves = 0;
   if (w->stop_fd > 0)
      close (w->stop_fd); /* the parent's: shared with its thread */
   w->stop_fd = 0;
   w->pid = me;
   new_tag (w); /* the parent's listener hears the parent's */
}

void ll_watch_begin (ll_watch_t *w, ll_watch_waiter_t *e, char *owner, pid_t me)
{
   e->owner = owner;
   e->woken = false;
   e->reserved = false;
   e->prev = e->next = NULL;
   if (!w->backend->watch_open)
      return;
   pthread_mutex_lock (&w->mu);
   reset_after_fork_locked (w, me);
   memcpy (owner, w->tag, 2); /* before its first try: the tag is this process's */
   LL_LIST_PUSH (w->waiters, e, prev, next);
   e->released = false;
   pthread_mutex_unlock (&w->mu);
}

bool ll_watch_update (ll_watch_t *w, ll_watch_waiter_t *e, bool reserved, bool behind,
                      int64_t ahead, uint64_t leaves_before, bool *released)
{
   *released = false;
   if (!w->backend->watch_open)
      return false;
   pthread_mutex_lock (&w->mu);
   if (!w->running && !w->stopping) {
      if (w->stop_fd <= 0)
         w->stop_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK); /* -1: stops within WATCH_POLL_MS */
      w->running = pthread_create (&w->thread, NULL, watch_main, w) == 0;
   }
   e->reserved = reserved;
   e->behind = behind;
   e->ahead = ahead;
   if (ahead > 0 && w->backend->queue_leave_notifies) {
      uint64_t missed = w->leaves - leaves_before;
      if (missed >= (uint64_t)ahead)
         at_head (e);
      else
         e->ahead = ahead - (int64_t)missed;
   }
   *released = e->released;
   e->released = false;
   /* A listener that hears only this machine's releases lets the next
    * owner poll no less often: another host's release reaches it by a
    * poll alone. */
   bool open = w->listener != NULL && !w->backend->watch_local_only;
   pthread_mutex_unlock (&w->mu);
   return open;
}

void ll_watch_end (ll_watch_t *w, ll_watch_waiter_t *e, pid_t me)
{
   if (!w->backend->watch_open)
      return;
   pthread_mutex_lock (&w->mu);
   if (w->pid == me) /* a child's list never held the parent's waiters */
      LL_LIST_UNLINK (w->waiters, e, prev, next);
   pthread_mutex_unlock (&w->mu);
}

void ll_watch_stop (ll_watch_t *w)
{
   pthread_mutex_lock (&w->mu);
   reset_after_fork_locked (w, ll_getpid ());
   w->stopping = true;
   bool join = w->running;
   w->running = false;
   pthread_cond_broadcast (&w->cond);
   if (w->stop_fd > 0)
      (void)eventfd_write (w->stop_fd, 1);
   pthread_mutex_unlock (&w->mu);
   if (join)
      pthread_join (w->thread, NULL);
}

void ll_watch_destroy (ll_watch_t *w)
{
   if (w->stop_fd > 0)
      close (w->stop_fd);
   pthread_mutex_destroy (&w->mu);
   pthread_cond_destroy (&w->cond);
}

uint64_t ll_watch_opens (ll_watch_t *w)
{
   pthread_mutex_lock (&w->mu);
   uint64_t n = w->pid == ll_getpid () ? w->opens : 0;
   pthread_mutex_unlock (&w->mu);
   return n;
}

uint64_t ll_watch_leaves (ll_watch_t *w)
{
   pthread_mutex_lock (&w->mu);
   uint64_t n = w->leaves;
   pthread_mutex_unlock (&w->mu);
   return n;
}

uint64_t ll_watch_heard (ll_watch_t *w)
{
   pthread_mutex_lock (&w->mu);
   uint64_t n = w->pid == ll_getpid () ? w->heard : 0;
   pthread_mutex_unlock (&w->mu);
   return n;
}
