/*
 * deadline.c - a holder's local deadline (contract invariant 3), as pure
 * logic: no locks, no I/O, no clock of its own. The engine calls it under
 * its client's mutex; the simulator (tests/test_sim.c) drives it directly
 * against a model database, so both run this same code.
 *
 * The deadline must never be later than the database's expiry. Two things
 * would otherwise break that:
 *
 *  - Rounding and rate. SQLite and MongoDB store milliseconds, so an expiry
 *    can sit up to 1 ms before (send time + TTL) on the monotonic clock;
 *    and the database's clock may run faster than ours (NTP slews each
 *    clock by at most 500 ppm). The margin covers both.
 *
 *  - Renews in flight together. Whichever of them the database runs last
 *    sets the expiry, and their replies say nothing of that order: a renew
 *    with a short TTL may run after one with a long TTL and answer first.
 *    So a renew pulls the deadline in as soon as it is sent, if its TTL
 *    is shorter; while renews overlap, they form a group, and a reply can
 *    move the deadline no later than the earliest expiry any member could
 *    have set.
 *    A renew whose outcome is unknown (its reply was lost) may have been
 *    applied: it can only pull the deadline in.
 *
 *  - Requests that run late. A renew whose outcome is unknown may still be
 *    waiting in the server (a stalled server reads it from its socket when
 *    it wakes) and run after any later renew, setting the expiry to its
 *    own, shorter TTL from then. So every later renew is counted with the
 *    shortest TTL still unaccounted for.
 */
#include "ll_internal.h"

int64_t ll_deadline_margin_ms (int64_t ttl_ms)
{
   return LL_DEADLINE_MARGIN_MS + ttl_ms / LL_DEADLINE_RATE_DIV;
}

static int64_t candidate (int64_t sent_ms, int64_t ttl_ms)
{
   return sent_ms + ttl_ms - ll_deadline_margin_ms (ttl_ms);
}

void ll_deadline_start (ll_deadline_t *d, int64_t sent_ms, int64_t ttl_ms)
{
   d->at_ms = candidate (sent_ms, ttl_ms);
   d->inflight = 0;
   d->group_min = INT64_MAX;
   d->unknown_ttl = INT64_MAX;
}

void ll_deadline_renew_sent (ll_deadline_t *d, int64_t sent_ms, int64_t ttl_ms)
{
   int64_t at = candidate (sent_ms, ttl_ms < d->unknown_ttl ? ttl_ms : d->unknown_ttl);
   if (d->inflight++ == 0 || at < d->group_min)
      d->group_min = at;
   /* It may run at any moment from now: a shorter TTL counts at once. */
   if (at < d->at_ms)
      d->at_ms = at;
}

void ll_deadline_may_rerun (ll_deadline_t *d, int64_t ttl_ms)
{
   if (ttl_ms < d->unknown_ttl)
      d->unknown_ttl = ttl_ms;
}

void ll_deadline_renew_done (ll_deadline_t *d, ll_outcome_t outcome, int64_t ttl_ms)
{
   if (d->inflight <= 0)
      return; /* not sent through renew_sent: nothing to account for */
   if (outcome == LL_OUTCOME_APPLIED)
      d->at_ms = d->group_min; /* this one ran, so earlier renews are superseded */
   if (outcome == LL_OUTCOME_UNKNOWN) {
      if (d->group_min < d->at_ms)
         d->at_ms = d->group_min;
      ll_deadline_may_rerun (d, ttl_ms);
   }
   if (--d->inflight == 0)
      d->group_min = INT64_MAX;
}
