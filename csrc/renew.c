/*
 * renew.c - automatic renewal: a client's renewal thread, which keeps
 * time, hands due renewals to up to IO_MAX I/O threads and runs the
 * on_lost and on_renew_failed callbacks; the I/O threads, which send the
 * renews, and the releases for owners whose acquire's outcome stayed
 * unknown (ll_forget_t); manual renew and extend; and the outcome of every
 * renew, manual or automatic.
 */
#include "engine_private.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *io_main (void *arg);

_Atomic uint64_t ll_test_renewal_wakes;
_Atomic uint64_t ll_test_io_starts;

bool ll_on_renewal_thread (leaselock_client_t *c)
{
   return c->thread_running && pthread_equal (c->thread, pthread_self ());
}

/* Stops the renewal thread and the I/O threads and empties the renewal
 * list. Called from the renewal thread itself (an on_lost callback that
 * closes the client), it leaves that thread to leaselock_client_destroy
 * to join: it ends once the callback returns. */
void ll_stop_renewal (leaselock_client_t *c)
{
   pthread_mutex_lock (&c->mu);
   c->stopping = true;
   bool join = c->thread_running && !ll_on_renewal_thread (c), join_io[IO_MAX];
   for (int i = 0; i < IO_MAX; i++)
      join_io[i] = c->io[i].running;
   pthread_cond_broadcast (&c->cond);
   pthread_cond_signal (&c->renew_cond);
   pthread_cond_broadcast (&c->io_cond);
   pthread_mutex_unlock (&c->mu);
   if (join)
      pthread_join (c->thread, NULL);
   for (int i = 0; i < IO_MAX; i++)
      if (join_io[i])
         pthread_join (c->io[i].tid, NULL); /* after its call in flight, if any */

   pthread_mutex_lock (&c->mu);
   if (join)
      c->thread_running = false;
   for (int i = 0; i < IO_MAX; i++)
      c->io[i].running = c->io[i].running && !join_io[i];
   for (leaselock_lease_t *l = c->renewing; l; l = l->next)
      l->in_list = false;
   c->renewing = NULL;
   ll_forgets_drop_locked (c); /* their records expire by their TTLs */
   pthread_mutex_unlock (&c->mu);
}

/* The renewal thread acts a third of the way to the deadline. */
int64_t ll_first_renewal (int64_t sent, const ll_deadline_t *dl)
{
   return sent + (dl->at_ms - sent) / 3;
}

/* One renew of a lease, manual or automatic, from its send to its
 * outcome. On the stack of the thread that sends it. */
typedef struct renew_op
{
   leaselock_lease_t *l;   /* borrowed: the sender holds a reference */
   int64_t ttl;            /* the TTL it asks for */
   int64_t sent;           /* local ms, taken before it went out */
   bool ok;                /* the database renewed it */
   bool was_sent;          /* it reached a connection (failed: it may have run) */
   leaselock_error_t *err; /* borrowed: what failed, when !ok */
} renew_op_t;

/* Sends r's renew (with no lock held), filling its ok and was_sent. */
static void renew_send (renew_op_t *r, pid_t me)
{
   leaselock_lease_t *l = r->l;
   r->ok = ll_owner_call (l->client, l->key, l->key_len, l->owner, true, r->ttl, me, &r->was_sent,
                          r->err);
}

/* Records the outcome of renew r (every renew, manual or automatic, goes
 * through here, so that renews in flight together are judged together:
 * deadline.c). Returns true when the lease is still HELD and was renewed.
 * Called with the lease's client's mu held. */
static bool renew_done_locked (const renew_op_t *r)
{
   leaselock_lease_t *l = r->l;
   leaselock_client_t *c = l->client;
   bool ok = r->ok;
   const leaselock_error_t *err = r->err;
   ll_outcome_t outcome = ok                                               ? LL_OUTCOME_APPLIED
                          : r->was_sent && err->code != LEASELOCK_NOT_HELD ? LL_OUTCOME_UNKNOWN
                                                                           : LL_OUTCOME_NOT_APPLIED;
   int64_t now = ll_now_ms ();
   ll_count (&c->obs, ok ? LL_ST_RENEWALS : LL_ST_RENEWAL_FAILURES, 1);
   /* A reply after the deadline cannot bring the lease back. */
   ll_check_deadline_locked (c, l, now);
   ll_deadline_renew_done (&l->dl, outcome, r->ttl);
   if (l->state != LEASELOCK_STATE_HELD)
      return false;
   if (!ok && err->code == LEASELOCK_NOT_HELD) {
      ll_mark_lost_locked (c, l); /* taken over or force-released */
      return false;
   }
   /* A renew in flight beside this one, or one that may have been applied,
    * may have pulled the deadline in, maybe into the past. */
   ll_check_deadline_locked (c, l, now);
   if (!ok || l->state != LEASELOCK_STATE_HELD)
      return false;
   l->next_renew_ms = ll_first_renewal (r->sent, &l->dl);
   return true;
}

static int64_t retry_interval (int64_t ttl)
{
   int64_t r = ttl / 10;
   return r < RETRY_MIN_MS ? RETRY_MIN_MS : r > RETRY_MAX_MS ? RETRY_MAX_MS : r;
}

/* Whether an I/O thread renews l now. Called with c->mu held. */
static bool io_busy_with (leaselock_client_t *c, leaselock_lease_t *l)
{
   for (int i = 0; i < IO_MAX; i++)
      if (c->io[i].job == l)
         return true;
   return false;
}

/* An I/O thread free for a renewal, started if start and need be; NULL
 * when all are busy (or none more can start). Called with c->mu held. */
static io_slot_t *io_free_slot (leaselock_client_t *c, bool start)
{
   for (int i = 0; i < IO_MAX; i++)
      if (c->io[i].running && !c->io[i].job)
         return &c->io[i];
   for (int i = 0; i < IO_MAX; i++) {
      io_slot_t *s = &c->io[i];
      if (!s->running && !s->failed) {
         if (!start)
            return s;
         s->client = c;
         s->failed = pthread_create (&s->tid, NULL, io_main, s) != 0;
         atomic_fetch_add_explicit (&ll_test_io_starts, !s->failed, memory_order_relaxed);
         s->running = !s->failed;
         return s->running ? s : NULL;
      }
   }
   return NULL;
}

/* Runs l's pending callback, with c->mu let go: on_lost once it is lost,
 * else on_renew_failed. Called and returns with c->mu held. */
static void notify_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   bool lost = l->lost_notify;
   leaselock_error_t err = l->renew_err;
   int64_t left = l->dl.at_ms - ll_now_ms ();
   l->lost_notify = false;
   l->renew_failed_notify = false;
   if (lost)
      ll_list_remove_locked (c, l);
   atomic_fetch_add (&l->refs, 1);
   l->in_callback = true;
   pthread_mutex_unlock (&c->mu);
   ll_log_flush (&c->obs);
   if (lost)
      l->on_lost (l, l->on_lost_data);
   else
      l->on_renew_failed (l, &err, left > 0 ? left : 0, l->on_renew_failed_data);
   pthread_mutex_lock (&c->mu);
   l->in_callback = false;
   pthread_cond_broadcast (&c->cond);
   pthread_mutex_unlock (&c->mu);
   ll_lease_unref (l);
   pthread_mutex_lock (&c->mu);
}

/* The first forget due (not in flight, its next try now or past), or
 * NULL; lowers *wake (-1: none yet) to the next one's time. Called with
 * c->mu held. */
static ll_forget_t *forget_due_locked (leaselock_client_t *c, int64_t now, int64_t *wake)
{
   ll_forget_t *due = NULL;
   for (ll_forget_t *f = c->forgets; f; f = f->next) {
      if (f->busy)
         continue;
      if (f->next_ms <= now) {
         if (!due)
            due = f;
      } else if (*wake < 0 || f->next_ms < *wake) {
         *wake = f->next_ms;
      }
   }
   return due;
}

/* The wake-up the renewal thread plans at now: wake (its leases' and
 * forgets' next time, -1 none), or sooner the first renewal of a lease
 * added since it last planned, even if let go since: a thread that found
 * no lease would sleep until signalled, and then each next acquire would
 * wake it, the lease of each gone again when it looks. Called with c->mu
 * held. */
static int64_t plan_wake_locked (leaselock_client_t *c, int64_t now, int64_t wake)
{
   int64_t added = c->added_due;
   c->added_due = 0;
   return added > now && (wake < 0 || added < wake) ? added : wake;
}

static void *renew_main (void *arg)
{
   leaselock_client_t *c = arg;
   pthread_mutex_lock (&c->mu);
   while (!c->stopping) {
      int64_t now = ll_now_ms ();
      int64_t wake = -1;
      leaselock_lease_t *due = NULL, *notify = NULL;
      bool can_renew = io_free_slot (c, false) != NULL;
      for (leaselock_lease_t *l = c->renewing; l; l = l->next) {
         ll_check_deadline_locked (c, l, now);
         if (l->lost_notify || (l->renew_failed_notify && l->state == LEASELOCK_STATE_HELD)) {
            notify = l;
            break;
         }
         if (l->state != LEASELOCK_STATE_HELD)
            continue;
         /* While its renewal is in flight, or no I/O thread is free, only
          * its deadline can come due. */
         bool wait = !can_renew || io_busy_with (c, l) || l->next_renew_ms > l->dl.at_ms;
         int64_t at = wait ? l->dl.at_ms : l->next_renew_ms;
         if (at <= now) {
            if (!due)
               due = l;
         } else if (wake < 0 || at < wake) {
            wake = at;
         }
      }
      if (notify) {
         notify_locked (c, notify);
         continue;
      }
      ll_forget_t *forget = can_renew && !due ? forget_due_locked (c, now, &wake) : NULL;
      if (atomic_load_explicit (&c->obs.n_pending, memory_order_relaxed) > 0) {
         pthread_mutex_unlock (&c->mu); /* deliver the losses found above */
         ll_log_flush (&c->obs);
         pthread_mutex_lock (&c->mu);
         continue;
      }
      if (!due && !forget) {
         c->sleeping = true;
         c->sleep_until = plan_wake_locked (c, now, wake);
         ll_cond_wait_until (&c->renew_cond, &c->mu, c->sleep_until);
         c->sleeping = false;
         atomic_fetch_add_explicit (&ll_test_renewal_wakes, 1, memory_order_relaxed);
         continue;
      }

      /* Hand it to a free I/O thread. */
      io_slot_t *slot = io_free_slot (c, true);
      if (!slot)
         continue; /* could not start one: plan again without it */
      if (due) {
         atomic_fetch_add (&due->refs, 1);
         slot->job = due;
      } else {
         forget->busy = true;
         slot->forget = forget;
      }
      pthread_cond_broadcast (&c->io_cond);
   }
   pthread_mutex_unlock (&c->mu);
   return NULL;
}

/* Records the outcome of automatic renewal r: a failure that left the
 * lease HELD is retried, and on_renew_failed is due. Returns the time left
 * to the local deadline then (< 0 when the lease is no longer HELD).
 * Called with the lease's client's mu held. */
static int64_t renew_outcome_locked (const renew_op_t *r)
{
   leaselock_lease_t *l = r->l;
   if (renew_done_locked (r) || l->state != LEASELOCK_STATE_HELD)
      return l->state == LEASELOCK_STATE_HELD ? l->dl.at_ms - ll_now_ms () : -1;
   int64_t now = ll_now_ms ();
   l->next_renew_ms = now + retry_interval (r->ttl);
   if (l->on_renew_failed && l->in_list) {
      l->renew_failed_notify = true;
      l->renew_err = *r->err;
   }
   return l->dl.at_ms - now;
}

/* The "renew" or "renew_failed" event of renewal r (left: as
 * renew_outcome_locked returns it; retry: the automatic renewal's next
 * try, 0 for a manual renew), and the losses it found. With no lock
 * held. */
static void log_renew (const renew_op_t *r, int64_t left, int64_t retry)
{
   leaselock_lease_t *l = r->l;
   leaselock_client_t *c = l->client;
   int64_t ttl = r->ttl;
   bool ok = r->ok;
   const leaselock_error_t *err = r->err;
   if (ok && left >= 0)
      LL_LOG (&c->obs, LEASELOCK_LOG_DEBUG, "renew", l->key, l->key_len, l->fence, LEASELOCK_OK,
              "renewed for %lld ms", (long long)ttl);
   else if (!ok && left >= 0 && retry > 0)
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "renew_failed", l->key, l->key_len, l->fence,
              err->code,
              "renewal failed (retrying in %lld ms, %lld ms left before the local deadline): %s",
              (long long)retry, (long long)left, err->message);
   else if (!ok && left >= 0)
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "renew_failed", l->key, l->key_len, l->fence,
              err->code, "renewal failed (%lld ms left before the local deadline): %s",
              (long long)left, err->message);
   ll_log_flush (&c->obs);
}

/* Takes f out of c's forgets and frees it. Called with c->mu held. */
static void forget_end_locked (leaselock_client_t *c, ll_forget_t *f)
{
   for (ll_forget_t **p = &c->forgets; *p; p = &(*p)->next)
      if (*p == f) {
         *p = f->next;
         break;
      }
   free (f);
}

/* Sends the release of slot's forget (with c->mu let go): done once it
 * released the record; else, NOT_HELD included (the statement whose
 * outcome was unknown may still be queued on the server and run later),
 * tried again after a backoff until the record has expired anyway. Called
 * and returns with c->mu held. */
static void io_forget_locked (io_slot_t *slot, pid_t me)
{
   leaselock_client_t *c = slot->client;
   ll_forget_t *f = slot->forget;
   pthread_mutex_unlock (&c->mu);
   leaselock_error_t err;
   bool sent;
   bool done = ll_owner_call (c, f->key, f->key_len, f->owner, false, 0, me, &sent, &err);
   if (done)
      LL_LOG (&c->obs, LEASELOCK_LOG_INFO, "unknown_outcome_released", f->key, f->key_len, 0,
              LEASELOCK_OK, "an acquire whose outcome was unknown had taken the key: released");
   pthread_mutex_lock (&c->mu);
   slot->forget = NULL;
   f->busy = false;
   int64_t now = ll_now_ms ();
   if (done || now >= f->until) {
      forget_end_locked (c, f);
   } else {
      f->next_ms = now + f->wait;
      f->wait = f->wait * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : f->wait * 2;
   }
   ll_renewal_wake_locked (c, -1); /* a thread free, the forget's next try */
}

/* An I/O thread: renews the leases the renewal thread hands it, one at a
 * time, and records the outcome; or sends a forget's release. */
static void *io_main (void *arg)
{
   io_slot_t *slot = arg;
   leaselock_client_t *c = slot->client;
   pid_t me = ll_getpid (); /* the thread lives in one process only */
   pthread_mutex_lock (&c->mu);
   for (;;) {
      while (!slot->job && !slot->forget && !c->stopping)
         ll_cond_wait_until (&c->io_cond, &c->mu, -1);
      leaselock_lease_t *due = slot->job;
      if (c->stopping) {
         slot->forget = NULL; /* ll_stop_renewal frees it */
         if (due) {
            slot->job = NULL;
            pthread_mutex_unlock (&c->mu);
            ll_lease_unref (due);
            pthread_mutex_lock (&c->mu);
         }
         break;
      }
      if (!due) {
         io_forget_locked (slot, me);
         continue;
      }
      leaselock_error_t err;
      renew_op_t r = { .l = due, .ttl = due->ttl_ms, .sent = ll_now_ms (), .err = &err };
      ll_deadline_renew_sent (&due->dl, r.sent, r.ttl);
      pthread_mutex_unlock (&c->mu);

      renew_send (&r, me);

      pthread_mutex_lock (&c->mu);
      int64_t left = renew_outcome_locked (&r);
      slot->job = NULL;
      ll_renewal_wake_locked (c, -1); /* a thread free, the lease's next renewal */
      pthread_mutex_unlock (&c->mu);
      log_renew (&r, left, retry_interval (r.ttl));
      ll_lease_unref (due);
      pthread_mutex_lock (&c->mu);
   }
   pthread_mutex_unlock (&c->mu);
   return NULL;
}

/* Starts the renewal thread in this process unless it runs. Its I/O
 * threads start when a renewal or a forget first falls due (io_free_slot):
 * a short-lived process whose lease never comes due, a cron run's,
 * starts one thread, not two. Called with c->mu held. */
static bool threads_start_locked (leaselock_client_t *c, leaselock_error_t *err)
{
   if (!c->thread_running) {
      c->stopping = false;
      int rc = pthread_create (&c->thread, NULL, renew_main, c);
      if (rc != 0)
         return ll_error_set (err, LEASELOCK_NOMEM, "cannot start the renewal thread: %s",
                              strerror (rc));
      c->thread_running = true;
   }
   return true;
}

/* Only when the thread sleeps past at: a wake-up per acquire (or per
 * release) would cost a context switch on every lock. A thread that plans
 * an earlier wake-up than it needs just plans again then; one that sleeps
 * until signalled (no lease then) is woken by the first lease after. */
void ll_renewal_wake_locked (leaselock_client_t *c, int64_t at)
{
   if (c->sleeping && (at < 0 || c->sleep_until < 0 || at < c->sleep_until))
      pthread_cond_signal (&c->renew_cond); /* the renewal thread alone waits on it */
}

/* Adds l to the renewal list, starting the threads in this process if
 * needed. Called with c->mu held. */
bool ll_schedule_locked (leaselock_client_t *c, leaselock_lease_t *l, leaselock_error_t *err)
{
   if (!threads_start_locked (c, err))
      return false;
   LL_LIST_PUSH (c->renewing, l, prev, next);
   l->in_list = true;
   if (c->added_due == 0 || l->next_renew_ms < c->added_due)
      c->added_due = l->next_renew_ms;
   ll_renewal_wake_locked (c, l->next_renew_ms);
   return true;
}

void ll_forget_locked (leaselock_client_t *c, ll_forget_t *f)
{
   leaselock_error_t ignored;
   if (atomic_load (&c->closing) || !threads_start_locked (c, &ignored)) {
      free (f);
      return;
   }
   f->next_ms = ll_now_ms ();
   f->wait = RETRY_MIN_MS;
   f->busy = false;
   f->next = c->forgets;
   c->forgets = f;
   ll_renewal_wake_locked (c, -1);
}

void ll_forgets_drop_locked (leaselock_client_t *c)
{
   for (int i = 0; i < IO_MAX; i++)
      c->io[i].forget = NULL;
   while (c->forgets) {
      ll_forget_t *f = c->forgets;
      c->forgets = f->next;
      free (f);
   }
}

/* The minimum hold that keeps l's record taken until at least min_hold_ms
 * after a renew whose reply came at done_ms (local). The database adds the
 * release's minimum hold to the record's acquired_at, which the acquire
 * set after it was sent (l->acquired_ms), and the renew ran before its
 * reply came: so the database's clock moved by at most done_ms -
 * acquired_ms between the two, plus its rate error (deadline.c's 1000
 * ppm) and 1 ms of rounding. Only ever raised. */
static int64_t hold_after_renew (const leaselock_lease_t *l, int64_t done_ms, int64_t min_hold_ms)
{
   int64_t since = done_ms - l->acquired_ms;
   int64_t hold = since + since / LL_DEADLINE_RATE_DIV + 1 + min_hold_ms;
   return hold > l->min_hold_ms ? hold : l->min_hold_ms;
}

bool leaselock_lease_renew (leaselock_lease_t *l, int64_t ttl_ms, leaselock_error_t *error)
{
   return leaselock_lease_extend (l, ttl_ms, -1, error);
}

bool leaselock_lease_extend (leaselock_lease_t *l, int64_t ttl_ms, int64_t min_hold_ms,
                             leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   pid_t me = ll_getpid ();
   if (!ll_lease_usable (l, me, err))
      return false;
   if (ttl_ms != 0 && !ll_check_ttl (ttl_ms, "ttl", err))
      return false;
   if (min_hold_ms != -1 && !ll_check_duration (min_hold_ms, "min_hold", err))
      return false;
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   if (ttl_ms == 0)
      ttl_ms = l->ttl_ms;
   int64_t sent = ll_now_ms ();
   ll_check_deadline_locked (c, l, sent);
   leaselock_state_t st = l->state;
   bool closed = atomic_load (&c->closing);
   if (!closed && st == LEASELOCK_STATE_HELD)
      ll_deadline_renew_sent (&l->dl, sent, ttl_ms);
   pthread_mutex_unlock (&c->mu);
   ll_log_flush (&c->obs); /* a loss the deadline check above found */
   if (closed)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the client of this lease is closed");
   if (st == LEASELOCK_STATE_RELEASED)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease on \"%s\" was released",
                           LL_KEY_SHOWN (l->key, l->key_len));
   if (st == LEASELOCK_STATE_LOST)
      return ll_error_set (err, LEASELOCK_LOST,
                           "the lease on \"%s\" was lost (its local deadline passed)",
                           LL_KEY_SHOWN (l->key, l->key_len));

   renew_op_t r = { .l = l, .ttl = ttl_ms, .sent = sent, .err = err };
   renew_send (&r, me);

   pthread_mutex_lock (&c->mu);
   bool renewed = renew_done_locked (&r);
   if (renewed) {
      l->ttl_ms = ttl_ms;
      if (min_hold_ms >= 0)
         l->min_hold_ms = hold_after_renew (l, ll_now_ms (), min_hold_ms);
   } else if (r.ok && l->state == LEASELOCK_STATE_CLOSED) {
      r.ok =
        ll_error_set (err, LEASELOCK_NOT_HELD, "the client of this lease was closed meanwhile");
   } else if (r.ok) {
      r.ok = ll_error_set (err, LEASELOCK_LOST, "the lease on \"%s\" was lost meanwhile",
                           LL_KEY_SHOWN (l->key, l->key_len));
   }
   int64_t left = l->state == LEASELOCK_STATE_HELD ? l->dl.at_ms - ll_now_ms () : -1;
   /* Its next renewal moved, or a shorter TTL pulled its deadline in. */
   if (l->in_list && l->state == LEASELOCK_STATE_HELD)
      ll_renewal_wake_locked (c, l->next_renew_ms < l->dl.at_ms ? l->next_renew_ms : l->dl.at_ms);
   pthread_mutex_unlock (&c->mu);
   if (renewed || left >= 0)
      log_renew (&r, left, 0); /* r.ok is renewed now */
   ll_log_flush (&c->obs);
   return r.ok;
}
