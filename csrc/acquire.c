/*
 * acquire.c - leaselock_acquire and the wait its caller drives
 * (leaselock_wait_*): one call's checks, set-up, tries (take.c), waits
 * between them (wait.c), and its end, counted and logged.
 */
#include "engine_private.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A blocking acquire that this process begins within REJOIN_MS of its own
 * release of the key (a worker's loop) goes to the back: its first try
 * only takes the key, and when it is busy the call waits as one behind
 * another, claiming at its next poll. Else it would claim the reservation
 * the moment the waiter it handed the key to took it, and the two would
 * pass the key back and forth while the others wait. */
#define REJOIN_MS 10

void leaselock_acquire_opts_init (leaselock_acquire_opts_t *opts)
{
   if (!opts)
      return;
   memset (opts, 0, sizeof *opts);
   opts->ttl_ms = 30000;
   opts->auto_renew = true;
}

bool ll_acquire_target_ok (leaselock_client_t *c,
                           const char *key,
                           size_t key_len,
                           leaselock_lease_t **lease,
                           leaselock_error_t *err)
{
   if (!c)
      return ll_error_set (err, LEASELOCK_INVALID, "client is NULL");
   if (!lease)
      return ll_error_set (err, LEASELOCK_INVALID, "lease (the out parameter) is NULL");
   return ll_check_key (key, key_len, "key", false, err);
}

/* The checks of leaselock_acquire's arguments, before any I/O. */
static bool acquire_args_ok (leaselock_client_t *c,
                             const char *key,
                             size_t key_len,
                             const leaselock_acquire_opts_t *opts,
                             leaselock_lease_t **lease,
                             leaselock_error_t *err)
{
   if (!ll_acquire_target_ok (c, key, key_len, lease, err) ||
       !ll_check_ttl (opts->ttl_ms, "ttl", err) ||
       !ll_check_duration (opts->min_hold_ms, "min_hold", err))
      return false;
   if (opts->timeout_ms > LEASELOCK_TTL_MAX_MS)
      return ll_error_set (err, LEASELOCK_INVALID, "timeout must be at most 30 days (got %lld ms)",
                           (long long)opts->timeout_ms);
   if (atomic_load (&c->closing))
      return ll_error_set (err, LEASELOCK_INVALID, "the client is closed");
   if (opts->fair && !c->backend->queue_join)
      return ll_error_set (err, LEASELOCK_UNSUPPORTED,
                           "fair mode: the %s backend keeps no queue of waiters", c->backend->name);
   return true;
}

/* Counts and logs the end of an acquire call (lease: NULL when it
 * failed with err). Returns whether it succeeded. */
static bool acquire_done (acquire_call_t *a, leaselock_lease_t *lease, const leaselock_error_t *err)
{
   ll_obs_t *o = &a->c->obs;
   if (a->watched) {
      ll_watch_end (&a->c->watch, &a->watch);
      ll_bucket_leave (a->b, &a->local);
   }
   int64_t waited = a->attempt > 0 ? ll_now_ms () - a->waited_from : 0;
   if (waited > 0)
      ll_count (o, LL_ST_WAIT_MS, (uint64_t)waited);
   if (lease) {
      ll_count (o, LL_ST_ACQUIRES, 1);
      LL_LOG (o, LEASELOCK_LOG_DEBUG, "acquire", a->key, a->key_len, lease->fence, LEASELOCK_OK,
              "acquired for %lld ms (waited %lld ms)", (long long)a->opts->ttl_ms,
              (long long)waited);
      return true;
   }
   if (err->code == LEASELOCK_BUSY) {
      ll_count (o, LL_ST_BUSY, 1);
      LL_LOG (o, LEASELOCK_LOG_DEBUG, "busy", a->key, a->key_len, 0, err->code,
              "held by another owner");
   } else if (err->code == LEASELOCK_TIMEOUT) {
      ll_count (o, LL_ST_TIMEOUTS, 1);
      LL_LOG (o, LEASELOCK_LOG_INFO, "timeout", a->key, a->key_len, 0, err->code, "%s",
              err->message);
   } else if (err->code == LEASELOCK_BACKEND || err->code == LEASELOCK_NOMEM) {
      LL_LOG (o, LEASELOCK_LOG_WARNING, "backend_error", a->key, a->key_len, 0, err->code,
              "acquire failed: %s", err->message);
   }
   return false;
}

/* Sets up call a for key with opts (already checked). */
static bool call_init (acquire_call_t *a,
                       leaselock_client_t *c,
                       const char *key,
                       size_t key_len,
                       const leaselock_acquire_opts_t *opts,
                       leaselock_error_t *err)
{
   *a = (acquire_call_t){ .c = c, .key = key, .key_len = key_len, .opts = opts, .me = getpid () };
   a->start = ll_now_ms ();
   a->until = a->start + opts->timeout_ms;
   a->w.since = -1;
   a->w.runs_out = -1;
   /* A blocking acquire is a waiter from its first try: it claims to be
    * next as soon as it finds the key busy. */
   a->w.waits = opts->timeout_ms != 0;
   a->w.until = opts->timeout_ms < 0 ? -1 : a->until;
   a->w.fair = opts->fair;
   uint32_t h = ll_key_hash (key, key_len);
   a->b = &ll_buckets[h % LL_N_BUCKETS];
   if (a->w.waits && !opts->fair) { /* only a blocking acquire claims: REJOIN_MS */
      pthread_mutex_lock (&a->b->mu);
      a->w.rejoins = a->b->released_at > 0 && a->b->released_hash == h &&
                     a->start - a->b->released_at <= REJOIN_MS;
      pthread_mutex_unlock (&a->b->mu);
   }
   return ll_owner_new (a->owner, err);
}

leaselock_error_t *ll_acquire_prologue (ll_acquire_frame_t *f,
                                        leaselock_error_t *error,
                                        const leaselock_acquire_opts_t **opts,
                                        leaselock_lease_t **lease)
{
   leaselock_error_t *err = ll_error_start (error, &f->local);
   if (!*opts) {
      leaselock_acquire_opts_init (&f->dflt);
      *opts = &f->dflt;
   }
   if (lease)
      *lease = NULL;
   return err;
}

bool leaselock_acquire (leaselock_client_t *c,
                        const char *key,
                        size_t key_len,
                        const leaselock_acquire_opts_t *opts,
                        leaselock_lease_t **lease,
                        leaselock_error_t *error)
{
   ll_acquire_frame_t f;
   leaselock_error_t *err = ll_acquire_prologue (&f, error, &opts, lease);
   if (!acquire_args_ok (c, key, key_len, opts, lease, err))
      return false;
   acquire_call_t a;
   if (!call_init (&a, c, key, key_len, opts, err))
      return false;
   if (opts->timeout_ms != 0)
      ll_call_watch_begin (&a, a.start);
   for (;;) {
      acquire_next_t next = ll_call_try (&a, lease, err);
      if (next == NEXT_DONE)
         return acquire_done (&a, *lease, err);
      if (next == NEXT_FAIL || !ll_wait_next (&a, err)) {
         ll_call_quit (&a);
         return acquire_done (&a, NULL, err);
      }
   }
}

struct leaselock_wait
{
   acquire_call_t a; /* its key and opts point into this struct */
   leaselock_acquire_opts_t opts;
   char key[LEASELOCK_KEY_MAX + 1];
   bool over; /* acquired, or failed: no more tries */
};

leaselock_wait_t *leaselock_wait_new (leaselock_client_t *c,
                                      const char *key,
                                      size_t key_len,
                                      const leaselock_acquire_opts_t *opts,
                                      leaselock_error_t *error)
{
   ll_acquire_frame_t f;
   leaselock_error_t *err = ll_acquire_prologue (&f, error, &opts, NULL);
   leaselock_lease_t *unused;
   if (!acquire_args_ok (c, key, key_len, opts, &unused, err))
      return NULL;
   leaselock_wait_t *w = calloc (1, sizeof *w);
   if (!w)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory"), NULL;
   w->opts = *opts;
   w->opts.should_stop = NULL; /* the caller decides when to stop */
   memcpy (w->key, key, key_len);
   if (!call_init (&w->a, c, w->key, key_len, &w->opts, err)) {
      free (w);
      return NULL;
   }
   w->a.driven = true;
   atomic_fetch_add (&c->refs, 1);
   return w;
}

bool leaselock_wait_try (leaselock_wait_t *w,
                         leaselock_lease_t **lease,
                         int64_t *sleep_ms,
                         leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (lease)
      *lease = NULL;
   if (sleep_ms)
      *sleep_ms = 0;
   if (!w)
      return ll_error_set (err, LEASELOCK_INVALID, "wait is NULL");
   if (!lease || !sleep_ms)
      return ll_error_set (err, LEASELOCK_INVALID, "%s (an out parameter) is NULL",
                           lease ? "sleep_ms" : "lease");
   acquire_call_t *a = &w->a;
   if (w->over)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "the wait for \"%s\" is over (it acquired the key or failed)",
                           LL_KEY_SHOWN (a->key, a->key_len));
   if (getpid () != a->me)
      return ll_error_set (err, LEASELOCK_INVALID, "the wait was begun in another process");
   if (atomic_load (&a->c->closing)) {
      w->over = true;
      return ll_error_set (err, LEASELOCK_INVALID, "the client was closed while waiting for \"%s\"",
                           LL_KEY_SHOWN (a->key, a->key_len));
   }
   acquire_next_t next = ll_call_try (a, lease, err);
   if (next == NEXT_DONE) {
      w->over = true;
      return acquire_done (a, *lease, err);
   }
   int64_t until;
   if (next == NEXT_WAIT && ll_wait_plan (a, &until, err)) {
      int64_t left = until - ll_now_ms ();
      *sleep_ms = left > 0 ? left : 0;
      return false; /* BUSY, from the try */
   }
   w->over = true;
   ll_call_quit (a);
   return acquire_done (a, NULL, err);
}

void leaselock_wait_destroy (leaselock_wait_t *w)
{
   if (!w)
      return;
   if (!w->over && getpid () == w->a.me) {
      leaselock_error_t timeout;
      ll_error_set (&timeout, LEASELOCK_INTERRUPTED, "the wait was given up");
      ll_call_quit (&w->a);
      acquire_done (&w->a, NULL, &timeout);
   }
   ll_client_unref (w->a.c);
   free (w);
}
