/*
 * failover.c - what every replicated backend does alike about failover
 * (ll_primary_t in ll_internal.h): the URI options max_ttl= and
 * durability=, the lock-delay after a new primary, the TTL bound. Each
 * backend reads its server's identity and durability its own way and
 * records them in its table's meta record; this file holds the rules.
 */
#include "ll_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* max_ttl: at least 1 s (a lock-delay shorter than a round trip protects
 * nothing), at most the TTL bound itself. */
#define MIN_MAX_TTL_MS 1000

static bool max_ttl_option (ll_primary_t *p, const char *backend, const char *value,
                            leaselock_error_t *err)
{
   int64_t ms = 0;
   leaselock_error_t e;
   if (!leaselock_parse_duration (value, &ms, &e) || ms < MIN_MAX_TTL_MS ||
       ms > LEASELOCK_TTL_MAX_MS)
      return ll_error_set (err, LEASELOCK_INVALID,
                           "%s URI option max_ttl=\"%.32s\": expected a duration from 1s to 30d "
                           "such as 60s (the longest TTL granted, and the lock-delay after a "
                           "failover)",
                           backend, value);
   p->want_max_ttl_ms = ms;
   return true;
}

static bool durability_option (ll_primary_t *p, const char *backend, const char *value,
                               leaselock_error_t *err)
{
   static const char *const names[] = { [LL_DURABILITY_REPORT] = "report",
                                        [LL_DURABILITY_REQUIRE] = "require",
                                        [LL_DURABILITY_OFF] = "off" };
   for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      if (!strcmp (value, names[i])) {
         p->policy = (ll_durability_policy_t)i;
         return true;
      }
   return ll_error_set (err, LEASELOCK_INVALID,
                        "%s URI option durability=\"%.32s\": expected report, require or off",
                        backend, value);
}

bool ll_primary_option (ll_primary_t *p, const char *backend, const char *name, const char *value,
                        bool *taken, leaselock_error_t *err)
{
   *taken = true;
   if (!strcmp (name, "max_ttl"))
      return max_ttl_option (p, backend, value, err);
   if (!strcmp (name, "durability"))
      return durability_option (p, backend, value, err);
   *taken = false;
   return true;
}

void ll_primary_seen (ll_primary_t *p, int64_t fence_floor, int64_t wait_us, int64_t max_ttl_ms)
{
   p->fence_floor = fence_floor > 0 ? fence_floor : 0;
   snprintf (p->floor_text, sizeof p->floor_text, "%" PRId64, p->fence_floor);
   /* Rounded up, and counted from now, after the reply: never shorter
    * than the database's own lock-delay. */
   p->paused_until = wait_us > 0 ? ll_now_ms () + (wait_us + 999) / 1000 : 0;
   p->max_ttl_ms = max_ttl_ms;
   p->generation++;
}

bool ll_primary_grant_ok (const ll_primary_t *p, const char *backend, leaselock_error_t *err)
{
   if (p->policy == LL_DURABILITY_REQUIRE && p->durability != LL_DURABILITY_DURABLE)
      return ll_error_set (err, LEASELOCK_BACKEND,
                           "%s: durability=require, but a grant would not survive a failover: %s",
                           backend, p->durability_text[0] ? p->durability_text : "unknown");
   if (p->paused_until == 0)
      return true;
   int64_t left = p->paused_until - ll_now_ms ();
   if (left <= 0)
      return true;
   return ll_error_set (err, LEASELOCK_BUSY,
                        "no grant for %" PRId64 " ms more: the lock-delay after a new primary "
                        "(leases the old one granted may still be live)",
                        left);
}

bool ll_primary_ttl_ok (const ll_primary_t *p, const char *backend, int64_t ttl_ms,
                        leaselock_error_t *err)
{
   if (p->max_ttl_ms <= 0 || ttl_ms <= p->max_ttl_ms)
      return true;
   return ll_error_set (err, LEASELOCK_INVALID,
                        "%s: a TTL of %" PRId64 " ms is over this table's max_ttl of %" PRId64
                        " ms (the lock-delay after a failover; the URI option max_ttl raises it)",
                        backend, ttl_ms, p->max_ttl_ms);
}
