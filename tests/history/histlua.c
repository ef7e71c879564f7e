/*
 * histlua.c - the Lua workers' helper module `histlua` (test only).
 *
 * Lua has no monotonic clock, no sleep, and the leaselock module does not
 * expose a lease's remaining time; the history needs all three:
 *
 *   histlua.now_ns()            CLOCK_MONOTONIC in nanoseconds (the clock of
 *                               the C and Python workers)
 *   histlua.sleep_ns(ns)
 *   histlua.remaining_ms(lease) leaselock_lease_remaining_ms of a
 *                               leaselock.lease handle (<= 0 once it is not
 *                               held or closed)
 *
 * remaining_ms reads the core lease from the handle: the handle
 * (ll_lua_lease_t in lua/lleaselock.h) starts with the
 * leaselock_lease_t pointer, NULL once closed. That is a private layout, so
 * fence(lease) returns leaselock_lease_fence of the same pointer for the
 * worker to compare with lease.fence before it trusts remaining_ms.
 * This module carries its own copy of the core (libleaselock.a, its
 * symbols kept local): the lease's struct and mutex are the same memory.
 */
#include "../../lua/ll_lua_compat.h"

#include "leaselock.h"

#include <errno.h>
#include <time.h>

static int64_t now_ns (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int l_now_ns (lua_State *L)
{
   lua_pushinteger (L, (lua_Integer)now_ns ());
   return 1;
}

static int l_sleep_ns (lua_State *L)
{
   lua_Integer ns = luaL_checkinteger (L, 1);
   if (ns > 0) {
      struct timespec ts = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };
      while (nanosleep (&ts, &ts) != 0 && errno == EINTR)
         ;
   }
   return 0;
}

static leaselock_lease_t *check_lease (lua_State *L)
{
   leaselock_lease_t **p = luaL_checkudata (L, 1, "leaselock.lease");
   return *p;
}

static int l_remaining_ms (lua_State *L)
{
   leaselock_lease_t *lease = check_lease (L);
   lua_pushinteger (L, lease ? (lua_Integer)leaselock_lease_remaining_ms (lease) : 0);
   return 1;
}

static int l_fence (lua_State *L)
{
   leaselock_lease_t *lease = check_lease (L);
   lua_pushinteger (L, lease ? (lua_Integer)leaselock_lease_fence (lease) : -1);
   return 1;
}

__attribute__ ((visibility ("default"))) int luaopen_histlua (lua_State *L)
{
   static const luaL_Reg fns[] = { { "now_ns", l_now_ns },
                                   { "sleep_ns", l_sleep_ns },
                                   { "remaining_ms", l_remaining_ms },
                                   { "fence", l_fence },
                                   { NULL, NULL } };
   luaL_newlib (L, fns);
   return 1;
}
