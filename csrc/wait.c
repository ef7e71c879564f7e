/*
 * wait.c - how a blocking acquire waits between its tries: the process's
 * wait buckets (a local release wakes one local waiter of its key), the
 * waiters' sleeps (backoff, polls, fair polls), and the wait itself
 * (registration with the client's watcher, the plan of the next sleep,
 * the sleep).
 */
#include "engine_private.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define BACKOFF_BASE_MS 5
#define BACKOFF_CAP_MS 1000
/* Waiting across processes (contract invariant 9): a waiter that is not
 * next polls at least every WAIT_POLL_MS until it has waited 8 times that
 * (so the oldest waiter claims the reservation soon after it frees), then
 * backs off towards BACKOFF_CAP_MS; the reserved waiter polls every quarter
 * of the time it has been next, within [1, NEXT_POLL_MAX_MS]. Its claim
 * lasts RESERVE_MS (take.c) past each poll: a waiter that died or gave up
 * blocks a free key for at most that long. */
#define WAIT_POLL_MS 50
/* A waiter that found another live waiter next cannot take the key before
 * that one has, and claims the reservation only after it: it polls in
 * [1/2, 1] x max(BEHIND_POLL_MS, waited / 8), never in the backoff's
 * first few milliseconds. Meanwhile the holder of the moment may take the
 * key again at once while nobody is next, so under contention a key
 * changes hands about once per such poll, not on every release: fewer
 * requests per grant and no hand-off gap between most grants, while each
 * waiter still becomes next within a bounded wait (the oldest first).
 * The longer the poll, the fewer hand-offs (each costs a notification or
 * poll gap) and the longer the waits: 150 ms keeps 8 processes holding a
 * key for 1 ms each above 0.8 of the ideal throughput (make
 * bench-contention), with waits of about that long at worst. */
#define BEHIND_POLL_MS 150
#define NEXT_POLL_MAX_MS 50
/* Fair mode: a waiter with others queued before it polls within
 * FAIR_POLL_MAX_MS, far more often than its entry's QUEUE_KEEP_MS, so that
 * its entry stays live. */
#define FAIR_POLL_MAX_MS 50
/* The reserved waiter's poll while its client's listener is open: a
 * release wakes it at once (watch.c), so it polls only to keep its claim
 * (RESERVE_MS) and for what no notification reports (an expiry). Not
 * with a listener that hears only this machine's releases
 * (watch_local_only): the quarter rule stays, as another host's release
 * reaches it by a poll alone. */
#define WATCHED_NEXT_POLL_MS 100
#define STOP_POLL_MS 100

bucket_t ll_buckets[LL_N_BUCKETS];

uint32_t ll_key_hash (const char *key, size_t len)
{
   uint32_t h = 2166136261u; /* FNV-1a */
   for (size_t i = 0; i < len; i++)
      h = (h ^ (unsigned char)key[i]) * 16777619u;
   return h;
}

static bucket_t *bucket_for (const char *key, size_t len)
{
   return &ll_buckets[ll_key_hash (key, len) % LL_N_BUCKETS];
}

static void bucket_join (bucket_t *b, local_waiter_t *e)
{
   pthread_mutex_lock (&b->mu);
   LL_LIST_PUSH (b->waiters, e, prev, next);
   pthread_mutex_unlock (&b->mu);
}

void ll_bucket_leave (bucket_t *b, local_waiter_t *e)
{
   pthread_mutex_lock (&b->mu);
   LL_LIST_UNLINK (b->waiters, e, prev, next);
   pthread_mutex_unlock (&b->mu);
}

/* A local release of key: wakes the one local waiter that can take it
 * (the one holding the reservation, else the oldest), which tries at
 * once; the others keep to their polls. Waking them all would cost a
 * request each per release, for one grant. A waiter chosen while it is
 * trying finds woken set and tries again at once, so no release is
 * missed. */
void ll_bucket_wake (const char *key, size_t len)
{
   bucket_t *b = bucket_for (key, len);
   pthread_mutex_lock (&b->mu);
   b->released_hash = ll_key_hash (key, len);
   b->released_at = ll_now_ms ();
   local_waiter_t *pick = NULL;
   for (local_waiter_t *e = b->waiters; e; e = e->next) {
      if (e->key_len != len || memcmp (e->key, key, len) != 0)
         continue;
      if (!pick || (e->reserved && !pick->reserved) ||
          (e->reserved == pick->reserved && e->since < pick->since))
         pick = e;
   }
   if (pick) {
      *pick->woken = true;
      pthread_cond_broadcast (&b->cond);
   }
   pthread_mutex_unlock (&b->mu);
}

/* Wakes every blocking acquire of the process, so that those of a client
 * being closed see it (wait_turn). */
void ll_wake_all_waiters (void)
{
   for (int i = 0; i < LL_N_BUCKETS; i++) {
      pthread_mutex_lock (&ll_buckets[i].mu);
      pthread_cond_broadcast (&ll_buckets[i].cond);
      pthread_mutex_unlock (&ll_buckets[i].mu);
   }
}

/* Uniform in [1, cap]. */
static int64_t jitter_ms (int64_t cap)
{
   uint32_t r;
   if (getrandom (&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = (uint32_t)rand ();
   return 1 + (int64_t)(r % (uint32_t)cap);
}

/* base * 2^attempt, capped. */
static int64_t backoff_cap (int attempt)
{
   int64_t cap = BACKOFF_BASE_MS;
   for (int i = 0; i < attempt && cap < BACKOFF_CAP_MS; i++)
      cap *= 2;
   return cap > BACKOFF_CAP_MS ? BACKOFF_CAP_MS : cap;
}

/* Full jitter: uniform in [1, min(cap, base * 2^attempt)]. */
int64_t ll_backoff_ms (int attempt)
{
   return jitter_ms (backoff_cap (attempt));
}

/* A fair waiter's sleep while ahead others are queued before it: uniform
 * in [cap/2, cap], cap growing with its place, at most FAIR_POLL_MAX_MS. */
int64_t ll_fair_sleep_ms (int64_t ahead)
{
   int64_t cap = 2 + 4 * (ahead < 1 ? 1 : ahead > FAIR_POLL_MAX_MS ? FAIR_POLL_MAX_MS : ahead);
   if (cap > FAIR_POLL_MAX_MS)
      cap = FAIR_POLL_MAX_MS;
   return cap / 2 + jitter_ms (cap - cap / 2);
}

/* A waiter's sleep before its next try (WAIT_POLL_MS's comment). */
int64_t ll_wait_sleep_ms (int attempt, int64_t waited_ms, bool reserved, int64_t next_for_ms)
{
   if (reserved) {
      int64_t t = next_for_ms / 4;
      return t < 1 ? 1 : t > NEXT_POLL_MAX_MS ? NEXT_POLL_MAX_MS : t;
   }
   int64_t cap = backoff_cap (attempt);
   int64_t poll = waited_ms / 8 > WAIT_POLL_MS ? waited_ms / 8 : WAIT_POLL_MS;
   return jitter_ms (cap < poll ? cap : poll);
}

/* The sleep of a waiter that another live waiter is next before
 * (BEHIND_POLL_MS's comment). */
int64_t ll_behind_sleep_ms (int64_t waited_ms)
{
   int64_t poll = waited_ms / 8 > BEHIND_POLL_MS ? waited_ms / 8 : BEHIND_POLL_MS;
   if (poll > BACKOFF_CAP_MS)
      poll = BACKOFF_CAP_MS;
   return poll / 2 + jitter_ms (poll - poll / 2);
}

/* A blocking acquire's sleep: until until, or until a release in this
 * process or a notification chooses it (*woken, then cleared), or c is
 * being closed. Returns false when should_stop asks
 * to stop, polled every STOP_POLL_MS. */
static bool wait_turn (leaselock_client_t *c, bucket_t *b, bool *woken, int64_t until,
                       const leaselock_acquire_opts_t *opts)
{
   pthread_mutex_lock (&b->mu);
   while (!*woken && !atomic_load (&c->closing)) {
      int64_t t = ll_now_ms ();
      if (t >= until)
         break;
      int64_t slice = until;
      if (opts->should_stop && slice > t + STOP_POLL_MS)
         slice = t + STOP_POLL_MS;
      ll_cond_wait_until (&b->cond, &b->mu, slice);
      if (opts->should_stop && ll_now_ms () >= slice && ll_now_ms () < until) {
         pthread_mutex_unlock (&b->mu);
         if (opts->should_stop (opts->should_stop_data))
            return false;
         pthread_mutex_lock (&b->mu);
      }
   }
   *woken = false;
   pthread_mutex_unlock (&b->mu);
   return !(opts->should_stop && opts->should_stop (opts->should_stop_data));
}

/* Registers a blocking acquire with the client's watcher before its
 * first try; the watcher starts listening for releases at its first wait
 * (a client that never waits never listens). */
void ll_call_watch_begin (acquire_call_t *a, int64_t now)
{
   a->watch = (ll_watch_waiter_t){
      .key = a->key, .key_len = a->key_len, .since = now, .mu = &a->b->mu, .cond = &a->b->cond
   };
   ll_watch_begin (&a->c->watch, &a->watch, a->owner, a->me);
   a->watched = true;
   a->local = (local_waiter_t){
      .key = a->key, .key_len = a->key_len, .since = now, .woken = &a->watch.woken
   };
   bucket_join (a->b, &a->local);
}

/* Before the wait that follows a busy try: TIMEOUT in err once the
 * call's deadline has passed; else *until_out, when the next try is due
 * (local ms). */
bool ll_wait_plan (acquire_call_t *a, int64_t *until_out, leaselock_error_t *err)
{
   int64_t now = ll_now_ms ();
   bool forever = a->opts->timeout_ms < 0;
   if (!forever && now >= a->until)
      return ll_error_set (err, LEASELOCK_TIMEOUT,
                           "timed out after %lld ms waiting for \"%s\" (held by another owner)",
                           (long long)(now - a->start), LL_KEY_SHOWN (a->key, a->key_len));
   if (a->attempt == 0) {
      a->waited_from = now;
      ll_count (&a->c->obs, LL_ST_WAITS, 1);
      if (forever)
         LL_LOG (&a->c->obs, LEASELOCK_LOG_DEBUG, "wait", a->key, a->key_len, 0, LEASELOCK_BUSY,
                 "held by another owner: waiting without a time limit");
      else
         LL_LOG (&a->c->obs, LEASELOCK_LOG_DEBUG, "wait", a->key, a->key_len, 0, LEASELOCK_BUSY,
                 "held by another owner: waiting up to %lld ms in all",
                 (long long)a->opts->timeout_ms);
   }
   waiter_t *w = &a->w;
   if (w->since < 0)
      w->since = now;
   bool released = false, heard = false;
   if (a->watched) {
      /* A fair waiter first in the queue is next as much as a reserved
       * one, and so is the second once the first has taken the key: a
       * notification that names no waiter (SQLite's) wakes them too.
       * Where queue leaves notify, the second is woken by the first's
       * leave instead (watch.c's on_queue_left), not by each release. */
      int64_t near = a->c->backend->queue_leave_notifies ? 0 : 1;
      heard =
        ll_watch_update (&a->c->watch, &a->watch, w->reserved || (w->fair && w->ahead <= near),
                         w->behind, w->fair ? w->ahead : -1, w->leaves_before, &released);
      pthread_mutex_lock (&a->b->mu);
      a->local.reserved = w->reserved;
      pthread_mutex_unlock (&a->b->mu);
   }
   int64_t sleep;
   if (w->fair && w->ahead > 0) {
      sleep = ll_fair_sleep_ms (w->ahead);
      a->attempt++;
   } else if (w->behind) {
      sleep = ll_behind_sleep_ms (now - w->since);
      a->attempt++;
   } else {
      sleep = ll_wait_sleep_ms (a->attempt++, now - w->since, w->reserved, now - w->reserved_since);
   }
   /* Next, it sleeps until a release wakes it; but when it has just
    * become next, or a key's release was heard since its last sleep began,
    * it tries once more soon (the quarter rule): it may have taken the
    * reservation over from a younger waiter after a release, and the key
    * may be free, with no release left to notify it. */
   if (heard && w->reserved && now > w->reserved_since && !released)
      sleep = WATCHED_NEXT_POLL_MS;
   if (w->fair && sleep > QUEUE_KEEP_MS / 4)
      sleep = QUEUE_KEEP_MS / 4; /* tries often enough to keep its place */
   if (atomic_load (&ll_test_wait_poll_ms) > 0)
      sleep = atomic_load (&ll_test_wait_poll_ms);
   /* The next owner never sleeps past the record's known end: nothing
    * tells it when a dead holder's lease, or a released lease's min_hold,
    * runs out. */
   if (w->reserved && w->runs_out > 0 && now + sleep > w->runs_out)
      sleep = w->runs_out > now ? w->runs_out - now : 1;
   int64_t until = now + sleep;
   if (!forever && until > a->until)
      until = a->until;
   *until_out = until;
   return true;
}

/* The wait between two tries of a blocking acquire: false with TIMEOUT,
 * INTERRUPTED or INVALID (the client was closed) in err. */
bool ll_wait_next (acquire_call_t *a, leaselock_error_t *err)
{
   int64_t until;
   if (!ll_wait_plan (a, &until, err))
      return false;
   /* Sleep, but wake at once if a holder in this process releases a key
    * in this bucket, or a notification wakes this waiter. */
   bool unwatched = false;
   if (!wait_turn (a->c, a->b, a->watched ? &a->watch.woken : &unwatched, until, a->opts))
      return ll_error_set (err, LEASELOCK_INTERRUPTED, "the wait for \"%s\" was interrupted",
                           LL_KEY_SHOWN (a->key, a->key_len));
   if (atomic_load (&a->c->closing))
      return ll_error_set (err, LEASELOCK_INVALID, "the client was closed while waiting for \"%s\"",
                           LL_KEY_SHOWN (a->key, a->key_len));
   return true;
}
