/*
 * acquire.c - leaselock_acquire and the wait its caller drives
 * (leaselock_wait_*): one call's checks, set-up, tries (take.c), waits
 * between them (wait.c), and its end, counted and logged.
 */
#include "engine_private.h"

#include <stdio.h>
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

bool ll_acquire_target_ok (leaselock_client_t *c, const char *key, size_t key_len,
                           leaselock_lease_t **lease, leaselock_error_t *err)
{
   if (!c)
      return ll_error_set (err, LEASELOCK_INVALID, "client is NULL");
   if (!lease)
      return ll_error_set (err, LEASELOCK_INVALID, "lease (the out parameter) is NULL");
   return ll_check_key (key, key_len, "key", false, err);
}

/* The checks of leaselock_acquire's arguments, before any I/O. */
static bool acquire_args_ok (leaselock_client_t *c, const char *key, size_t key_len,
                             const leaselock_acquire_opts_t *opts, leaselock_lease_t **lease,
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
      ll_watch_end (&a->c->watch, &a->watch, a->me);
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

/* "held by host pid 1 (label), fence 1, expires in 29.7s" for rec, into
 * buf: the CLI's words (cli/run.c). Host and label are cut as keys are. */
static void holder_text (const leaselock_record_t *rec, char *buf, size_t size)
{
   char ms[32];
   leaselock_format_duration (rec->expires_in_ms, ms, sizeof ms);
   const char *label = rec->label[0] ? LL_KEY_SHOWN (rec->label, strlen (rec->label)) : NULL;
   snprintf (buf, size, "%s %s pid %lld%s%s%s, fence %lld, expires in %s",
             rec->owner[0] ? "held by" : "released but kept by min_hold of",
             LL_KEY_SHOWN (rec->host, strlen (rec->host)), (long long)rec->pid, label ? " (" : "",
             label ? label : "", label ? ")" : "", (long long)rec->fence, ms);
}

/* The read that names a holder comes after the caller's time ran out (or
 * after its one try): a locked SQLite file holds it a moment at most, as
 * a one try, and a server no longer than this (a healthy one answers
 * well within it; the message then names nobody). */
#define EXPLAIN_MAX_MS 100

/* leaselock_inspect of key, bounded as EXPLAIN_MAX_MS says. */
static bool inspect_bounded (leaselock_client_t *c, const char *key, size_t key_len,
                             leaselock_record_t *rec, bool *found)
{
   ll_call_wait_t w = { .one_try = true, .warned = true /* no lock_wait WARNING for it */ };
   ll_call_wait_t *was_wait = ll_call_wait ();
   int64_t was_bound = ll_call_bound ();
   ll_call_bound_set (ll_call_bound_cap (ll_real_now_ms () + EXPLAIN_MAX_MS));
   ll_call_wait_set (&w);
   leaselock_error_t e;
   bool ok = leaselock_inspect (c, key, key_len, rec, found, &e);
   ll_call_wait_set (was_wait);
   ll_call_bound_set (was_bound);
   return ok;
}

bool leaselock_explain_busy (leaselock_client_t *c, const char *key, size_t key_len,
                             int64_t waited_ms, leaselock_error_t *error)
{
   if (!error || (error->code != LEASELOCK_BUSY && error->code != LEASELOCK_TIMEOUT))
      return true;
   leaselock_record_t rec;
   bool found = false;
   if (!inspect_bounded (c, key, key_len, &rec, &found) || !found || rec.expires_in_ms <= 0)
      return false;
   char who[LEASELOCK_ERROR_MAX];
   holder_text (&rec, who, sizeof who);
   const char *shown = LL_KEY_SHOWN (key, key_len);
   if (error->code == LEASELOCK_BUSY) {
      /* keeps what the try added: "(fair mode: 2 waiter(s) queued ...)" */
      const char *more = strstr (error->message, " (");
      char was[LEASELOCK_ERROR_MAX];
      snprintf (was, sizeof was, "%s", more ? more : "");
      ll_error_set (error, LEASELOCK_BUSY, "\"%s\" is %s%s", shown, who, was);
   } else {
      ll_error_set (error, LEASELOCK_TIMEOUT, "timed out after %lld ms waiting for \"%s\" (%s)",
                    (long long)waited_ms, shown, who);
   }
   leaselock_holder_t *h = &error->holder;
   *h = (leaselock_holder_t){ .known = true,
                              .released = !rec.owner[0],
                              .fence = rec.fence,
                              .expires_in_ms = rec.expires_in_ms,
                              .pid = rec.pid };
   memcpy (h->host, rec.host, sizeof h->host);
   memcpy (h->label, rec.label, sizeof h->label);
   return true;
}

/* The end of a call that gave up, BUSY or TIMEOUT in err: names the
 * holder (one read, on this failure path only) when the caller asked for
 * the error (error: the caller's, NULL when it did not). */
static void call_explain (acquire_call_t *a, const leaselock_error_t *error, leaselock_error_t *err)
{
   if (!error || a->opts->no_holder ||
       (err->code != LEASELOCK_BUSY && err->code != LEASELOCK_TIMEOUT))
      return;
   leaselock_explain_busy (a->c, a->key, a->key_len, ll_now_ms () - a->start, err);
}

/* Sets up call a for key with opts (already checked). */
static bool call_init (acquire_call_t *a, leaselock_client_t *c, const char *key, size_t key_len,
                       const leaselock_acquire_opts_t *opts, leaselock_error_t *err)
{
   *a =
     (acquire_call_t){ .c = c, .key = key, .key_len = key_len, .opts = opts, .me = ll_getpid () };
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

leaselock_error_t *ll_acquire_prologue (ll_acquire_frame_t *f, leaselock_error_t *error,
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

/* leaselock_acquire; explain: name the holder when it gives up (not for
 * the records of a mode, modes.c, whose one tries are not the end). */
static bool acquire_run (leaselock_client_t *c, const char *key, size_t key_len,
                         const leaselock_acquire_opts_t *opts, leaselock_lease_t **lease,
                         leaselock_error_t *error, bool explain)
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
         if (explain)
            call_explain (&a, error, err);
         return acquire_done (&a, NULL, err);
      }
   }
}

bool leaselock_acquire (leaselock_client_t *c, const char *key, size_t key_len,
                        const leaselock_acquire_opts_t *opts, leaselock_lease_t **lease,
                        leaselock_error_t *error)
{
   return acquire_run (c, key, key_len, opts, lease, error, true);
}

bool ll_acquire_record (leaselock_client_t *c, const char *key, size_t key_len,
                        const leaselock_acquire_opts_t *opts, leaselock_lease_t **lease,
                        leaselock_error_t *error)
{
   return acquire_run (c, key, key_len, opts, lease, error, false);
}

struct leaselock_wait
{
   acquire_call_t a; /* its key and opts point into this struct */
   leaselock_acquire_opts_t opts;
   char key[LEASELOCK_KEY_MAX + 1];
   bool over; /* acquired, or failed: no more tries */
};

leaselock_wait_t *leaselock_wait_new (leaselock_client_t *c, const char *key, size_t key_len,
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

bool leaselock_wait_try (leaselock_wait_t *w, leaselock_lease_t **lease, int64_t *sleep_ms,
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
   if (ll_getpid () != a->me)
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
   call_explain (a, error, err);
   return acquire_done (a, NULL, err);
}

void leaselock_wait_destroy (leaselock_wait_t *w)
{
   if (!w)
      return;
   if (!w->over && ll_getpid () == w->a.me) {
      leaselock_error_t timeout;
      ll_error_set (&timeout, LEASELOCK_INTERRUPTED, "the wait was given up");
      ll_call_quit (&w->a);
      acquire_done (&w->a, NULL, &timeout);
   }
   ll_client_unref (w->a.c);
   free (w);
}
