/*
 * lbench.c - the Lua module `leaselock_bench`, for bench/lua/bench_with.lua
 * only (built by `make bench-lua`, never shipped):
 *
 *   bench.monotonic() -> seconds on CLOCK_MONOTONIC
 *   bench.core(uri) -> a handle with its own leaselock client
 *   handle:pairs(key, n [, ttl]) -> seconds | nil, msg, code: n acquire +
 *     release pairs through the C core alone, with the options a lock of
 *     the leaselock module has by default (TTL 30 s, auto-renewal) and no
 *     timeout
 *   handle:close()
 */
#include "leaselock.h"

#include <lauxlib.h>
#include <lua.h>
#include <time.h>

#define CORE_MT "leaselock_bench.core"

typedef struct
{
   leaselock_client_t *client; /* NULL once closed */
} bench_core_t;

static double now_s (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int b_monotonic (lua_State *L)
{
   lua_pushnumber (L, (lua_Number)now_s ());
   return 1;
}

static int b_core (lua_State *L)
{
   const char *uri = luaL_checkstring (L, 1);
   leaselock_error_t err;
   bench_core_t *b = lua_newuserdata (L, sizeof *b);
   b->client = NULL;
   luaL_getmetatable (L, CORE_MT);
   lua_setmetatable (L, -2);
   b->client = leaselock_client_new (uri, "bench", &err);
   if (!b->client) {
      lua_pushnil (L);
      lua_pushstring (L, err.message);
      lua_pushstring (L, leaselock_code_name (err.code));
      return 3;
   }
   return 1;
}

static int b_pairs (lua_State *L)
{
   bench_core_t *b = luaL_checkudata (L, 1, CORE_MT);
   size_t key_len;
   const char *key = luaL_checklstring (L, 2, &key_len);
   lua_Integer n = luaL_checkinteger (L, 3);
   leaselock_acquire_opts_t o;
   leaselock_error_t err;
   luaL_argcheck (L, b->client != NULL, 1, "closed");
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = (int64_t)(luaL_optnumber (L, 4, 30) * 1000);
   o.timeout_ms = -1;
   double t0 = now_s ();
   for (lua_Integer i = 0; i < n; i++) {
      leaselock_lease_t *lease = NULL;
      if (!leaselock_acquire (b->client, key, key_len, &o, &lease, &err) ||
          !leaselock_lease_release (lease, &err)) {
         leaselock_lease_destroy (lease);
         lua_pushnil (L);
         lua_pushstring (L, err.message);
         lua_pushstring (L, leaselock_code_name (err.code));
         return 3;
      }
      leaselock_lease_destroy (lease);
   }
   lua_pushnumber (L, (lua_Number)(now_s () - t0));
   return 1;
}

static int b_close (lua_State *L)
{
   bench_core_t *b = luaL_checkudata (L, 1, CORE_MT);
   leaselock_client_destroy (b->client);
   b->client = NULL;
   return 0;
}

__attribute__ ((visibility ("default"))) int luaopen_leaselock_bench (lua_State *L)
{
   luaL_newmetatable (L, CORE_MT);
   lua_newtable (L);
   lua_pushcfunction (L, b_pairs);
   lua_setfield (L, -2, "pairs");
   lua_pushcfunction (L, b_close);
   lua_setfield (L, -2, "close");
   lua_setfield (L, -2, "__index");
   lua_pushcfunction (L, b_close);
   lua_setfield (L, -2, "__gc");
   lua_pop (L, 1);
   lua_newtable (L);
   lua_pushcfunction (L, b_monotonic);
   lua_setfield (L, -2, "monotonic");
   lua_pushcfunction (L, b_core);
   lua_setfield (L, -2, "core");
   return 1;
}
