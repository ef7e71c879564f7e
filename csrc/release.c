/*
 * release.c - letting a lease go: release (the last hold) and its resend,
 * reentrant holds (reenter, a release that is not the last, the hold
 * count), and destroy, which releases a lease still held.
 */
#include "engine_private.h"

#include <string.h>
#include <unistd.h>

/* Records the outcome of a release (or its resend) of l. Called with
 * c->mu held. */
static void release_done_locked (leaselock_client_t *c, leaselock_lease_t *l, bool ok,
                                 bool was_sent, bool resent, const leaselock_error_t *err)
{
   if (ok || err->code == LEASELOCK_NOT_HELD) {
      ll_lease_ended_locked (c, l, ll_now_ms ());
      if (l->state == LEASELOCK_STATE_HELD || ok)
         l->state = LEASELOCK_STATE_RELEASED;
      if (!l->lost_notify)
         ll_list_remove_locked (c, l);
   } else if (!was_sent && !resent && l->state == LEASELOCK_STATE_HELD && l->auto_renew &&
              !l->in_list && !atomic_load (&c->closing)) {
      ll_schedule_locked (c, l, NULL); /* nothing was sent: surely still ours */
   } else if (l->state == LEASELOCK_STATE_HELD) {
      /* Maybe released, maybe not. The holder has let go either way, so
       * RELEASED, never renewed again (renewing a record that may be
       * released would report a loss that is not one); if the release did
       * not land, the database expires the record by its TTL. */
      ll_lease_ended_locked (c, l, ll_now_ms ());
      l->state = LEASELOCK_STATE_RELEASED;
      l->lost_notify = false;
      ll_list_remove_locked (c, l);
   }
}

/* Counts and logs a release of l that reached the database. */
static void log_release (leaselock_client_t *c, leaselock_lease_t *l, bool ok,
                         const leaselock_error_t *err)
{
   ll_count (&c->obs, ok ? LL_ST_RELEASES : LL_ST_RELEASE_FAILURES, 1);
   if (ok)
      LL_LOG (&c->obs, LEASELOCK_LOG_DEBUG, "release", l->key, l->key_len, l->fence, LEASELOCK_OK,
              "released");
   else
      LL_LOG (&c->obs, LEASELOCK_LOG_WARNING, "release_failed", l->key, l->key_len, l->fence,
              err->code, "release failed: %s", err->message);
   ll_log_flush (&c->obs);
}

/* Whether the client's state refuses a release by its user: once it is
 * closing, unless that close releases held leases and has not finished (a
 * lease released or destroyed by its user meanwhile must still be
 * released: the close skips the leases whose release is under way, and
 * forgets destroyed ones). Called with c->mu held. */
static bool refuses_release_locked (const leaselock_client_t *c)
{
   return atomic_load (&c->closing) && !(c->close_releases && !c->closed);
}

/* The release of leaselock_lease_release, also made by
 * leaselock_client_close (by_close), which alone may release once the
 * client is closing. */
bool ll_release_lease (leaselock_lease_t *l, pid_t me, bool by_close, leaselock_error_t *err)
{
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   /* A release of l already in flight (the user's, or a releasing
    * close's) decides for this one too: sending a second would be answered
    * "not yours" once the first landed. Bounded: that call is. */
   bool waited = false;
   for (; l->releasing > 0; waited = true)
      ll_cond_wait_until (&c->cond, &c->mu, -1);
   leaselock_state_t st = l->state;
   bool by_other_close = waited && l->released_by_close && !by_close;
   bool closed = !by_close && !by_other_close && refuses_release_locked (c);
   /* No renewal may start from now on; one in flight is harmless: the
    * owner check makes it fail once the release lands. */
   if (!closed && st != LEASELOCK_STATE_RELEASED && !l->lost_notify)
      ll_list_remove_locked (c, l);
   l->releasing += !closed && st != LEASELOCK_STATE_RELEASED;
   pthread_mutex_unlock (&c->mu);
   if (closed)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the client of this lease is closed");
   /* Released meanwhile by the close the user raced with: done, as asked.
    * A close finds a lease its user released meanwhile: nothing to do. */
   if (st == LEASELOCK_STATE_RELEASED && (by_other_close || by_close))
      return true;
   if (st == LEASELOCK_STATE_RELEASED)
      return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease on \"%s\" was already released",
                           LL_KEY_SHOWN (l->key, l->key_len));

   bool was_sent, resent = false;
   bool ok = ll_release_call (c, l, me, &was_sent, err);
   if (!ok && was_sent && err->code == LEASELOCK_BACKEND) {
      resent = true;
      /* It may have been applied: ask once more, on a fresh connection.
       * "Not ours" then most likely means the first one landed; either way
       * the key is no longer this owner's, which is what release is for. */
      ok = ll_release_call (c, l, me, &was_sent, err) || err->code == LEASELOCK_NOT_HELD;
      if (ok)
         ll_error_clear (err);
   }

   pthread_mutex_lock (&c->mu);
   release_done_locked (c, l, ok, was_sent, resent, err);
   l->released_by_close = by_close && l->state == LEASELOCK_STATE_RELEASED;
   l->releasing--;
   bool drop = ok && l->drop_on_release && l->min_hold_ms == 0;
   pthread_cond_broadcast (&c->cond); /* a release waiting for this one */
   pthread_mutex_unlock (&c->mu);
   if (ok) {
      ll_bucket_wake (l->key, l->key_len);
      /* Best effort: a record left (a failed statement, a closing client)
       * is pruned later (modes.c). */
      if (drop)
         leaselock_prune (c, l->key, l->key_len, 0, NULL, NULL);
   } else if (err->code == LEASELOCK_NOT_HELD) {
      ll_error_set (err, LEASELOCK_NOT_HELD,
                    "the lease on \"%s\" is no longer held by this owner (it expired and was "
                    "taken, or was force-released)",
                    LL_KEY_SHOWN (l->key, l->key_len));
   }
   log_release (c, l, ok, err);
   return ok;
}

/* One hold statement (delta +1 or -1) for owner of key. */
static bool hold_call (leaselock_client_t *c, const char *key, size_t key_len, const char *owner,
                       int delta, pid_t me, int64_t *holds, leaselock_error_t *err)
{
   if (!c->backend->hold)
      return ll_error_set (err, LEASELOCK_UNSUPPORTED,
                           "reentrant locks: the %s backend keeps no "
                           "hold count",
                           c->backend->name);
   void *conn = ll_pool_get (c, me, err);
   if (!conn)
      return false;
   int64_t t0 = ll_real_now_us ();
   bool ok = c->backend->hold (conn, &(ll_op_t){ key, key_len, owner }, delta, holds, err);
   ll_obs_request (&c->obs, t0, ok, err);
   ll_pool_put (c, conn, me, !ok && ll_conn_failed (err));
   if (!ok && err->code == LEASELOCK_NOT_HELD)
      ll_error_set (err, LEASELOCK_NOT_HELD,
                    "\"%s\" is no longer held by this owner (it expired and was taken, was "
                    "released, or was force-released)",
                    LL_KEY_SHOWN (key, key_len));
   return ok;
}

/* The lease's holds, or a failure when it is not HELD. */
static bool lease_holds (leaselock_lease_t *l, int64_t *holds, leaselock_error_t *err)
{
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   ll_check_deadline_locked (c, l, ll_now_ms ());
   leaselock_state_t st = l->state;
   *holds = l->holds;
   pthread_mutex_unlock (&c->mu);
   if (st == LEASELOCK_STATE_HELD)
      return true;
   if (st == LEASELOCK_STATE_LOST)
      return ll_error_set (err, LEASELOCK_LOST, "the lease on \"%s\" was lost",
                           LL_KEY_SHOWN (l->key, l->key_len));
   return ll_error_set (err, LEASELOCK_NOT_HELD, "the lease on \"%s\" is no longer held",
                        LL_KEY_SHOWN (l->key, l->key_len));
}

void ll_lease_drop_on_release (leaselock_lease_t *l)
{
   pthread_mutex_lock (&l->client->mu);
   l->drop_on_release = true;
   pthread_mutex_unlock (&l->client->mu);
}

bool leaselock_lease_reenter (leaselock_lease_t *l, leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   pid_t me = ll_getpid ();
   int64_t holds;
   if (!ll_lease_usable (l, me, err) || !lease_holds (l, &holds, err))
      return false;
   int64_t stored;
   /* A lost reply leaves the stored count one higher at most: only shown,
    * never used to decide the last release. */
   if (!hold_call (l->client, l->key, l->key_len, l->owner, +1, me, &stored, err))
      return false;
   pthread_mutex_lock (&l->client->mu);
   l->holds++;
   pthread_mutex_unlock (&l->client->mu);
   LL_LOG (&l->client->obs, LEASELOCK_LOG_DEBUG, "reenter", l->key, l->key_len, l->fence,
           LEASELOCK_OK, "entered again (%lld holds)", (long long)stored);
   return true;
}

int64_t leaselock_lease_holds (leaselock_lease_t *l)
{
   if (!l)
      return 0;
   int64_t holds;
   leaselock_error_t ignored;
   return lease_holds (l, &holds, &ignored) ? holds : 0;
}

bool leaselock_hold (leaselock_client_t *c, const char *key, size_t key_len, const char *owner,
                     int delta, int64_t *holds, leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   if (holds)
      *holds = 0;
   if (!ll_client_usable (c, err) || !ll_check_key (key, key_len, "key", false, err))
      return false;
   if (!holds)
      return ll_error_set (err, LEASELOCK_INVALID, "holds (the out parameter) is NULL");
   if (delta != 1 && delta != -1)
      return ll_error_set (err, LEASELOCK_INVALID, "delta must be +1 or -1 (got %d)", delta);
   if (!owner || strlen (owner) != LEASELOCK_OWNER_LEN ||
       strspn (owner, "0123456789abcdef") != LEASELOCK_OWNER_LEN)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "owner must be %d lower-case hex characters (an owner token)",
                           LEASELOCK_OWNER_LEN);
   return hold_call (c, key, key_len, owner, delta, ll_getpid (), holds, err);
}

bool leaselock_lease_release (leaselock_lease_t *l, leaselock_error_t *error)
{
   leaselock_error_t *err = LL_ERROR_START (error);
   pid_t me = ll_getpid ();
   if (!ll_lease_usable (l, me, err))
      return false;
   int64_t holds = 0;
   leaselock_error_t not_held;
   if (lease_holds (l, &holds, &not_held) && holds > 1) {
      /* Not the last hold: one goes, the key stays this owner's. A failed
       * statement leaves the lease's own count as it was. */
      int64_t stored;
      if (!hold_call (l->client, l->key, l->key_len, l->owner, -1, me, &stored, err))
         return false;
      pthread_mutex_lock (&l->client->mu);
      l->holds--;
      pthread_mutex_unlock (&l->client->mu);
      return true;
   }
   return ll_release_lease (l, me, false, err);
}

void leaselock_lease_destroy (leaselock_lease_t *l)
{
   if (!l)
      return;
   leaselock_client_t *c = l->client;
   pid_t me = ll_getpid (); /* once: a system call, and this thread's process stays */
   if (l->pid == me) {
      pthread_mutex_lock (&c->mu);
      bool release = !refuses_release_locked (c) && l->state != LEASELOCK_STATE_RELEASED;
      pthread_mutex_unlock (&c->mu);
      if (release && ll_lease_usable (l, me, &(leaselock_error_t){ 0 }))
         ll_release_lease (l, me, false, &(leaselock_error_t){ 0 }); /* every hold */
   }
   pthread_mutex_lock (&c->mu);
   /* In a child forked while on_lost ran, in_callback is the parent's. */
   ll_reset_after_fork_locked (c, me);
   ll_all_remove_locked (c, l);
   if (l->pid == c->pid) {
      l->lost_notify = false; /* the user is gone: no callback after destroy */
      ll_list_remove_locked (c, l);
      /* The callback's data may be freed once we return. */
      while (l->in_callback && !(c->thread_running && pthread_equal (c->thread, pthread_self ())))
         ll_cond_wait_until (&c->cond, &c->mu, -1);
   }
   pthread_mutex_unlock (&c->mu);
   ll_lease_unref (l);
}
