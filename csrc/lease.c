/*
 * lease.c - a lease's bookkeeping (its client's lists, the local deadline
 * rule, HELD -> LOST), the statements sent for its owner (renew,
 * release), and its getters.
 */
#include "engine_private.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Under AddressSanitizer every lease is a malloc of its own, so that a use
 * after leaselock_lease_destroy is caught rather than landing in the next
 * lease. */
#if defined(__SANITIZE_ADDRESS__)
#define LL_SPARE_LEASE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LL_SPARE_LEASE 0
#endif
#endif
#ifndef LL_SPARE_LEASE
#define LL_SPARE_LEASE 1
#endif

leaselock_lease_t *ll_lease_alloc (leaselock_client_t *c)
{
   leaselock_lease_t *l = LL_SPARE_LEASE ? atomic_exchange (&c->spare_lease, NULL) : NULL;
   if (!l)
      return calloc (1, sizeof *l);
   memset (l, 0, sizeof *l);
   return l;
}

void ll_lease_free (leaselock_client_t *c, leaselock_lease_t *l)
{
   leaselock_lease_t *none = NULL;
   if (!l || !LL_SPARE_LEASE || !atomic_compare_exchange_strong (&c->spare_lease, &none, l))
      free (l);
}

void ll_lease_unref (leaselock_lease_t *l)
{
   if (atomic_fetch_sub (&l->refs, 1) != 1)
      return;
   leaselock_client_t *c = l->client;
   ll_lease_free (c, l);
   ll_client_unref (c);
}

void ll_list_remove_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   if (!l->in_list)
      return;
   LL_LIST_UNLINK (c->renewing, l, prev, next); /* no wake-up: the thread finds it gone */
   l->in_list = false;
}

/* Every lease of a client, from its acquire to its destroy (close goes
 * through them). Called with c->mu held. */
void ll_all_add_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   LL_LIST_PUSH (c->leases, l, prev_all, next_all);
}

void ll_all_remove_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   LL_LIST_UNLINK (c->leases, l, prev_all, next_all);
}

/* A HELD lease ends (released, lost or closed): counts the time it was
 * held. Called with c->mu held, before its state changes. */
void ll_lease_ended_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now)
{
   if (l->state == LEASELOCK_STATE_HELD && now > l->acquired_ms)
      ll_count (&c->obs, LL_ST_HELD_MS, (uint64_t)(now - l->acquired_ms));
}

/* HELD -> LOST, once. The renewal thread calls on_lost for leases it
 * renews; a lease that is not auto-renewed has no callback. The "lost"
 * event is delivered once c->mu is let go (ll_log_flush). */
void ll_mark_lost_locked (leaselock_client_t *c, leaselock_lease_t *l)
{
   if (l->state != LEASELOCK_STATE_HELD)
      return;
   int64_t now = ll_now_ms ();
   ll_lease_ended_locked (c, l, now);
   ll_count (&c->obs, LL_ST_LOSSES, 1);
   if (ll_log_on (&c->obs, LEASELOCK_LOG_ERROR))
      ll_log_emit (
        &c->obs, true,
        LL_LOG_EVENT (LEASELOCK_LOG_ERROR, "lost", l->key, l->key_len, l->fence, LEASELOCK_LOST),
        "lease lost: %s",
        now >= l->dl.at_ms ? "its local deadline passed before a renewal succeeded"
                           : "the database says it is no longer this owner's");
   l->state = LEASELOCK_STATE_LOST;
   if (l->on_lost && l->auto_renew && l->in_list) {
      l->lost_notify = true;
      ll_renewal_wake_locked (c, -1); /* it calls on_lost */
   } else {
      ll_list_remove_locked (c, l);
   }
}

/* The local deadline rule (contract invariant 3). */
void ll_check_deadline_locked (leaselock_client_t *c, leaselock_lease_t *l, int64_t now)
{
   if (l->state == LEASELOCK_STATE_HELD && now >= l->dl.at_ms)
      ll_mark_lost_locked (c, l);
}

bool ll_owner_call (leaselock_client_t *c, const char *key, size_t key_len, const char *owner,
                    bool renew, int64_t ms, pid_t me, bool *was_sent, leaselock_error_t *err)
{
   ll_error_clear (err);
   *was_sent = false;
   void *conn = ll_pool_get (c, me, err);
   if (!conn)
      return false;
   *was_sent = true;
   int64_t t0 = ll_real_now_us ();
   const ll_op_t op = { key, key_len, owner };
   bool ok =
     renew ? c->backend->renew (conn, &op, ms, err) : c->backend->release (conn, &op, ms, err);
   ll_obs_request (&c->obs, t0, ok, err);
   ll_pool_put (c, conn, me, !ok && ll_conn_failed (err));
   return ok;
}

bool ll_release_call (leaselock_client_t *c, leaselock_lease_t *l, pid_t me, bool *was_sent,
                      leaselock_error_t *err)
{
   return ll_owner_call (c, l->key, l->key_len, l->owner, false, l->min_hold_ms, me, was_sent, err);
}

/* The lease can be acted on by this process: given, not a parent's
 * lease. Fills err otherwise. */
bool ll_lease_usable (leaselock_lease_t *l, pid_t me, leaselock_error_t *err)
{
   if (!l)
      return ll_error_set (err, LEASELOCK_INVALID, "lease is NULL");
   if (l->pid != me)
      return ll_error_set (err, LEASELOCK_NOT_HELD,
                           "the lease on \"%s\" belongs to process %d; this process (%d) is a "
                           "fork of it and does not hold it",
                           LL_KEY_SHOWN (l->key, l->key_len), (int)l->pid, (int)me);
   ll_check_fork (l->client, me);
   return true;
}

const char *leaselock_lease_key (const leaselock_lease_t *l)
{
   return l ? l->key : "";
}

size_t leaselock_lease_key_len (const leaselock_lease_t *l)
{
   return l ? l->key_len : 0;
}

const char *leaselock_lease_owner (const leaselock_lease_t *l)
{
   return l ? l->owner : "";
}

int64_t leaselock_lease_fence (const leaselock_lease_t *l)
{
   return l ? l->fence : 0;
}

int64_t leaselock_lease_ttl_ms (const leaselock_lease_t *l)
{
   if (!l)
      return 0;
   pthread_mutex_lock (&l->client->mu);
   int64_t t = l->ttl_ms;
   pthread_mutex_unlock (&l->client->mu);
   return t;
}

leaselock_state_t leaselock_lease_state (leaselock_lease_t *l)
{
   if (!l)
      return LEASELOCK_STATE_RELEASED;
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   if (l->pid == ll_getpid ())
      ll_check_deadline_locked (c, l, ll_now_ms ());
   leaselock_state_t st = l->state;
   pthread_mutex_unlock (&c->mu);
   ll_log_flush (&c->obs);
   return st;
}

int64_t leaselock_lease_remaining_ms (leaselock_lease_t *l)
{
   if (!l)
      return 0;
   leaselock_client_t *c = l->client;
   pthread_mutex_lock (&c->mu);
   int64_t left = l->state == LEASELOCK_STATE_HELD ? l->dl.at_ms - ll_now_ms () : 0;
   pthread_mutex_unlock (&c->mu);
   return left > 0 ? left : 0;
}

const char *leaselock_state_name (leaselock_state_t state)
{
   switch (state) {
      case LEASELOCK_STATE_HELD:
         return "held";
      case LEASELOCK_STATE_LOST:
         return "lost";
      case LEASELOCK_STATE_CLOSED:
         return "closed";
      case LEASELOCK_STATE_RELEASED:
      default:
         return "released";
   }
}
