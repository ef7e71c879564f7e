/*
 * take.c - one try of an acquire call: the statement that takes the key
 * (or a waiter's claim on the key's reservation), the fair mode's queue
 * around it, bounded by the caller's timeout, the lease it makes, the
 * resend of a statement that failed once sent, and forgetting an owner
 * whose acquire's outcome stayed unknown.
 */
#include "engine_private.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A waiter's claim lasts RESERVE_MS past each poll (wait.c's
 * WAIT_POLL_MS says why). */
#define RESERVE_MS 200
/* A try of an acquire with a timeout waits on the server no longer than
 * what is left of that timeout (ll_call_bound), but at least TRY_MIN_MS:
 * a waiter's last try comes at its deadline, and a healthy server answers
 * within that. */
#define TRY_MIN_MS 100
/* A one-try acquire (timeout 0) is bounded by the backend's own I/O
 * timeouts; it sends its statement once more after a lost reply only when
 * the first send failed within RESEND_FAST_MS (a dropped connection, not a
 * server that does not answer: the resend would wait as long again). */
#define RESEND_FAST_MS 1000

void (*ll_test_queue_counted_hook) (void);

/* A lease for a's key and owner, not yet acquired (no client). */
static leaselock_lease_t *lease_new (const acquire_call_t *a)
{
   const leaselock_acquire_opts_t *o = a->opts;
   leaselock_lease_t *l = ll_lease_alloc (a->c);
   if (!l)
      return NULL;
   memcpy (l->owner, a->owner, sizeof l->owner);
   memcpy (l->key, a->key, a->key_len);
   l->key[a->key_len] = '\0';
   l->key_len = a->key_len;
   l->ttl_ms = o->ttl_ms;
   l->min_hold_ms = o->min_hold_ms;
   l->auto_renew = o->auto_renew;
   l->on_lost = o->on_lost;
   l->on_lost_data = o->on_lost_data;
   l->on_renew_failed = o->on_renew_failed;
   l->on_renew_failed_data = o->on_renew_failed_data;
   l->pid = a->me;
   atomic_init (&l->refs, 1);
   return l;
}

/* Makes l, just acquired for call a by a statement sent at sent, a lease
 * of a's client: HELD, listed, and scheduled for renewal. A client closed
 * meanwhile gets the key released again (the caller never sees the
 * lease): INVALID. On failure l is freed. */
static bool lease_start (const acquire_call_t *a, leaselock_lease_t *l, int64_t sent,
                         leaselock_error_t *err)
{
   leaselock_client_t *c = a->c;
   const leaselock_acquire_opts_t *o = a->opts;
   atomic_fetch_add (&c->refs, 1);
   l->client = c;
   l->state = LEASELOCK_STATE_HELD;
   l->holds = 1;
   l->acquired_ms = sent;
   ll_deadline_start (&l->dl, sent, o->ttl_ms);
   if (a->resent) /* the first send may still run, after any renew */
      ll_deadline_may_rerun (&l->dl, o->ttl_ms);
   l->next_renew_ms = ll_first_renewal (sent, &l->dl);
   pthread_mutex_lock (&c->mu);
   bool closing = atomic_load (&c->closing);
   if (!closing)
      ll_all_add_locked (c, l);
   bool scheduled = closing || !o->auto_renew || ll_schedule_locked (c, l, err);
   pthread_mutex_unlock (&c->mu);
   if (closing) {
      bool sent_release;
      leaselock_error_t ignored;
      ll_release_call (c, l, l->pid, &sent_release, &ignored);
      ll_error_set (err, LEASELOCK_INVALID, "the client was closed while acquiring \"%s\"",
                    LL_KEY_SHOWN (l->key, l->key_len));
      ll_lease_unref (l);
      return false;
   }
   if (!scheduled)
      leaselock_lease_destroy (l); /* releases it */
   return scheduled;
}

/* How long a waiter's next claim lasts, with left_ms of its call left: it
 * outlasts the sleep, but never the call. The claim starts when the
 * statement reaches the database, a trip after left_ms was read, so near
 * the end it covers half of what is left (less 2 ms for the database's
 * millisecond rounding): a waiter that timed out leaves no claim behind
 * unless that trip took longer than the other half; 0 (no claim) when too
 * little is left. */
static int64_t reserve_for (bool forever, int64_t left_ms)
{
   /* Tests that put polls off (ll_test_wait_poll_ms) keep the claim
    * outlasting the sleep all the same. */
   int64_t keep = RESERVE_MS + atomic_load (&ll_test_wait_poll_ms);
   int64_t half = (left_ms - 2) / 2;
   if (forever || half > keep)
      return keep;
   return half > 0 ? half : 0;
}

/* The take itself, into l: the backend's acquire, or for a waiter (a
 * blocking call) its acquire_wait. */
static bool take_or_claim (acquire_call_t *a, void *conn, leaselock_lease_t *l,
                           const ll_holder_t *holder, leaselock_error_t *err)
{
   const ll_backend_t *b = a->c->backend;
   int64_t ttl_ms = a->opts->ttl_ms;
   waiter_t *w = &a->w;
   int64_t now = ll_now_ms ();
   int64_t reserve_ms = w->waits ? reserve_for (w->until < 0, w->until - now) : 0;
   bool rejoin = w->rejoins && w->since < 0; /* its first try (REJOIN_MS) */
   w->behind = false;
   ll_take_t t = {
      { l->key, l->key_len, l->owner }, ttl_ms, holder, reserve_ms, 0, false, w->fair && w->queued
   };
   if (reserve_ms <= 0 || !b->acquire_wait || rejoin) {
      bool ok = ll_backend_acquire (b, conn, &t, &l->fence, err);
      if (rejoin && !ok && err->code == LEASELOCK_BUSY)
         w->behind = true;
      return ok;
   }
   t.waited_ms = w->since < 0 ? 0 : now - w->since;
   bool was = w->reserved, ok;
   ll_taken_t got = { l->fence, w->reserved, -1 };
   ok = b->acquire_wait (conn, &t, &got, err);
   l->fence = got.fence;
   w->reserved = !ok && err->code == LEASELOCK_BUSY && got.reserved;
   /* now was read before the statement, which read the database clock
    * after it: now + left_ms is at or before the record's end. */
   w->runs_out = w->reserved && got.left_ms >= 0 ? now + got.left_ms + 1 : -1;
   w->behind = !ok && err->code == LEASELOCK_BUSY && !w->reserved;
   if (w->reserved && !was)
      w->reserved_since = now;
   return ok;
}

/* Fair mode: joins the key's queue again (keeping its place) and learns
 * how many live waiters arrived before it. BUSY while any did: only the
 * first in the queue may take the key. */
static bool queue_turn (acquire_call_t *a, void *conn, const leaselock_lease_t *l,
                        leaselock_error_t *err)
{
   leaselock_client_t *c = a->c;
   waiter_t *w = &a->w;
   int64_t t0 = ll_real_now_us ();
   const ll_op_t op = { l->key, l->key_len, l->owner };
   if (c->backend->queue_leave_notifies)
      w->leaves_before = ll_watch_leaves (&c->watch);
   bool ok = c->backend->queue_join (conn, &op, QUEUE_KEEP_MS, &w->ahead, err);
   ll_obs_request (&c->obs, t0, ok, err);
   if (ok && ll_test_queue_counted_hook)
      ll_test_queue_counted_hook ();
   if (!ok)
      return false;
   w->queued = true;
   if (w->ahead > 0)
      return ll_error_set (err, LEASELOCK_BUSY,
                           "held by another owner (fair mode: %lld waiter(s) queued before this "
                           "one)",
                           (long long)w->ahead);
   return true;
}

/* Fair mode: a's owner leaves the key's queue (the key was taken, or the
 * call ends). Best effort: an entry left behind runs out within
 * QUEUE_KEEP_MS. */
static void queue_quit (acquire_call_t *a, void *conn)
{
   leaselock_client_t *c = a->c;
   const char *key = a->key, *owner = a->owner;
   size_t key_len = a->key_len;
   waiter_t *w = &a->w;
   if (!w->queued)
      return;
   leaselock_error_t e;
   int64_t t0 = ll_real_now_us ();
   bool ok = c->backend->queue_leave (conn, &(ll_op_t){ key, key_len, owner }, &e);
   ll_obs_request (&c->obs, t0, ok, &e);
   w->queued = !ok;
   if (!ok)
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "queue_leave_failed", key, key_len, 0, e.code,
              "leaving the fair queue failed (the entry runs out within %d ms): %s", QUEUE_KEEP_MS,
              e.message);
}

/* Fair mode, a call not in the key's queue (its first try), on a backend
 * whose take honours the queue (fair_take): the plain take, refused while
 * another owner is queued, so that it never goes ahead of a waiter. An
 * uncontended fair acquire is thus the plain one's one statement, and it
 * never joined: nothing to leave. *done: the try ends here (taken, failed,
 * or BUSY for a call that does not wait); else the key was busy and the
 * waiter joins the queue now, in the same try. */
static bool fair_first_take (acquire_call_t *a, void *conn, leaselock_lease_t *l,
                             const ll_holder_t *holder, bool *done, leaselock_error_t *err)
{
   ll_take_t t = { { l->key, l->key_len, l->owner }, a->opts->ttl_ms, holder, -1, 0, true, false };
   int64_t t0 = ll_real_now_us ();
   bool ok = ll_backend_acquire (a->c->backend, conn, &t, &l->fence, err);
   ll_obs_request (&a->c->obs, t0, ok, err);
   a->w.behind = false;
   bool busy = !ok && err->code == LEASELOCK_BUSY;
   *done = !busy || !a->w.waits;
   if (busy && !a->w.waits) /* one statement cannot tell which */
      ll_error_set (err, LEASELOCK_BUSY,
                    "held by another owner (fair mode: or fair waiters are queued for it)");
   return ok;
}

/* One try of call a on conn into l, each statement counted: in fair mode
 * the queue first (after a first take that found the key busy, on a
 * backend with fair_take), then the take. */
static bool backend_acquire (acquire_call_t *a, void *conn, leaselock_lease_t *l,
                             const ll_holder_t *holder, leaselock_error_t *err)
{
   bool fair = a->w.fair;
   if (fair && !a->w.queued && a->c->backend->fair_take) {
      bool done;
      bool ok = fair_first_take (a, conn, l, holder, &done, err);
      if (done)
         return ok;
   }
   /* The queue's first, once it holds the reservation (claimed only
    * while first, and no later arrival goes before it), takes first and
    * joins again only if the key is still busy: a hand-off costs the
    * take and the leave, not a join as well (two round trips on MySQL,
    * and MongoDB's settling pause). */
   bool first = fair && a->w.queued && a->w.reserved && a->w.ahead == 0;
   bool ok = first || !fair || queue_turn (a, conn, l, err);
   if (ok) {
      int64_t t0 = ll_real_now_us ();
      ok = take_or_claim (a, conn, l, holder, err);
      ll_obs_request (&a->c->obs, t0, ok, err);
      if (first && !ok && err->code == LEASELOCK_BUSY && a->w.waits) {
         leaselock_error_t busy = *err;
         if (queue_turn (a, conn, l, err)) /* its place kept: still BUSY */
            *err = busy;
      }
   }
   if (fair && (ok || !a->w.waits))
      queue_quit (a, conn);
   return ok;
}

/* The bound of a try of call a (ll_call_bound: real time), -1 for none:
 * what is left of the caller's timeout, at least TRY_MIN_MS; none for a
 * one-try acquire (the backend's I/O timeouts bound it; a mode's step
 * the mode's call) or one that waits forever. */
static int64_t try_bound (const acquire_call_t *a)
{
   /* A mode's step (ll_mode_bound) is bounded by the mode's call. */
   if (a->opts->timeout_ms == 0 && ll_mode_bound () != LL_MODE_NONE)
      return ll_mode_bound ();
   if (a->opts->timeout_ms <= 0)
      return -1;
   int64_t left = a->until - ll_now_ms ();
   return ll_real_now_ms () + (left > TRY_MIN_MS ? left : TRY_MIN_MS);
}

/* One acquire statement for a's owner. *sent says whether it was handed
 * to the backend on a connection (so, on failure, it may have been
 * applied). */
static bool try_once (acquire_call_t *a, leaselock_lease_t **out, bool *sent_out,
                      leaselock_error_t *err)
{
   leaselock_client_t *c = a->c;
   *sent_out = false;
   leaselock_lease_t *l = lease_new (a);
   if (!l)
      return ll_error_set (err, LEASELOCK_NOMEM, "out of memory");
   ll_holder_t holder = { c->host, (int64_t)l->pid, c->label };
   void *conn = ll_pool_get (c, a->me, err);
   if (!conn) {
      ll_lease_free (c, l);
      return false;
   }
   int64_t sent = ll_now_ms ();
   (void)ll_call_unsent_take (); /* what an earlier call left */
   bool ok = backend_acquire (a, conn, l, &holder, err);
   *sent_out = ok || !ll_call_unsent_take ();
   ll_pool_put (c, conn, a->me, !ok && ll_conn_failed (err));
   if (!ok) {
      ll_lease_free (c, l);
      return false;
   }
   if (!lease_start (a, l, sent, err))
      return false;
   *out = l;
   return true;
}

/* try_once within the try's bound (try_bound), the backend told what
 * kind of call it is (ll_call_wait). */
static bool try_bounded (acquire_call_t *a, leaselock_lease_t **out, bool *sent_out,
                         leaselock_error_t *err)
{
   ll_call_wait_t *w = &a->lock_wait;
   w->one_try = (a->opts->timeout_ms == 0 && ll_mode_bound () == LL_MODE_NONE) || a->driven;
   w->obs = &a->c->obs;
   w->key = a->key;
   w->key_len = a->key_len;
   ll_call_bound_set (try_bound (a));
   ll_call_wait_set (w);
   bool ok = try_once (a, out, sent_out, err);
   ll_call_wait_set (NULL);
   ll_call_bound_set (-1);
   return ok;
}

/* Whether call a, whose last try failed after took ms, has time for one
 * more statement in the caller's thread: while its timeout leaves more
 * than TRY_MIN_MS, or for a one-try acquire when that try failed fast. */
static bool time_left (const acquire_call_t *a, int64_t took)
{
   int64_t timeout = a->opts->timeout_ms;
   if (timeout < 0)
      return true;
   if (timeout == 0)
      return took < RESEND_FAST_MS;
   return a->until - ll_now_ms () > TRY_MIN_MS;
}

/* One release of a's owner's record within a's bound: true when it
 * released it. NOT_HELD does not end it: the statement whose outcome is
 * unknown may still be queued on the server (a connection closed under a
 * stalled server's statement) and run after this release. */
static bool forget_now (const acquire_call_t *a)
{
   leaselock_error_t err;
   bool sent;
   ll_call_bound_set (try_bound (a));
   bool ok = ll_owner_call (a->c, a->key, a->key_len, a->owner, false, 0, a->me, &sent, &err);
   ll_call_bound_set (-1);
   return ok;
}

/* An acquire whose outcome stayed unknown (sent, then no answer) may
 * have taken the key for a's owner, which nobody would then hold: it is
 * released for that owner (no min_hold; only this owner's record can
 * match), so that the key is not left blocked until its TTL runs out. At
 * once when the call has time left (time_left, took: its last try's
 * length); else, or when that fails too, by the client's I/O threads,
 * retried with backoff, so that the caller does not wait on a server that
 * may go on not answering. Returns whether it was released at once. */
static bool forget_owner (const acquire_call_t *a, int64_t took)
{
   /* A one-try acquire leaves it to the I/O threads: its bound has no
    * room for one more statement. */
   if (a->opts->timeout_ms != 0 && time_left (a, took) && forget_now (a))
      return true;
   leaselock_client_t *c = a->c;
   ll_forget_t *f = calloc (1, sizeof *f);
   if (!f)
      return false; /* the record expires by its TTL */
   memcpy (f->key, a->key, a->key_len);
   f->key_len = a->key_len;
   memcpy (f->owner, a->owner, sizeof f->owner);
   /* Every send went out before now, and a statement sets the expiry from
    * the database's clock when it runs: by then the record of one that ran
    * before now has expired (one that a stalled server runs later than
    * that expires by its TTL). */
   int64_t ttl = a->opts->ttl_ms;
   f->until = ll_now_ms () + ttl + ll_deadline_margin_ms (ttl);
   pthread_mutex_lock (&c->mu);
   ll_forget_locked (c, f);
   pthread_mutex_unlock (&c->mu);
   return false;
}

/* err (BACKEND, from a statement that may have been applied and was not
 * undone yet) says so. */
static void say_unknown (leaselock_error_t *err)
{
   char was[LEASELOCK_ERROR_MAX];
   memcpy (was, err->message, sizeof was);
   ll_error_set (err, LEASELOCK_BACKEND,
                 "outcome unknown (the grant may have been committed; it is being released): %s",
                 was);
}

/* What follows an attempt that failed with err (sent: it reached a
 * connection). */
static acquire_next_t after_failure (acquire_call_t *a, bool sent, int64_t took,
                                     leaselock_error_t *err)
{
   a->sent_any = a->sent_any || sent;
   if (err->code == LEASELOCK_BACKEND && sent && !a->resent && time_left (a, took)) {
      /* Failed once sent (a dropped connection, a lost reply): send it
       * once more, at once, on a fresh connection. */
      a->resent = true;
      return NEXT_RESEND;
   }
   if (err->code == LEASELOCK_BACKEND && a->sent_any) {
      if (!forget_owner (a, took))
         say_unknown (err);
      return NEXT_FAIL;
   }
   if (err->code != LEASELOCK_BUSY || a->opts->timeout_ms == 0)
      return NEXT_FAIL; /* BUSY is the answer of one try */
   return NEXT_WAIT;
}

/* One try of call a, sent once more at once when it failed after being
 * sent (after_failure). */
acquire_next_t ll_call_try (acquire_call_t *a, leaselock_lease_t **lease, leaselock_error_t *err)
{
   for (;;) {
      bool sent;
      int64_t t0 = ll_now_ms ();
      if (try_bounded (a, lease, &sent, err))
         return NEXT_DONE;
      acquire_next_t next = after_failure (a, sent, ll_now_ms () - t0, err);
      if (next != NEXT_RESEND)
         return next;
   }
}

/* A call that ends without the key leaves the key's queue (fair mode). */
void ll_call_quit (acquire_call_t *a)
{
   if (!a->w.queued)
      return;
   leaselock_error_t ignored;
   ll_call_bound_set (try_bound (a)); /* the entry runs out by itself */
   void *conn = ll_pool_get (a->c, a->me, &ignored);
   if (conn) {
      queue_quit (a, conn);
      ll_pool_put (a->c, conn, a->me, a->w.queued);
   }
   ll_call_bound_set (-1);
}
