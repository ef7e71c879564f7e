/*
 * acquire_nb.c - lock:acquire_nb, the waiting acquire for OpenResty: the
 * C halves of a try that its Lua wait loop (acquire_nb.lua) is closed
 * over, and the module functions a pool thread runs for it
 * (leaselock.pool._pool_try, ._pool_reap). A try on SQLite, or
 * outside nginx, is made in the worker (lock_try_nb); else lock_plan_nb
 * gives the arguments of _pool_try, run in a thread of an nginx thread
 * pool, which parks the lease in the registry (pool.c) for lock_adopt_nb.
 * The halves are called from the loop's `try`, two Lua frames below
 * acquire_nb's caller: their errors point three levels up.
 */
#include "lleaselock.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* acquire_nb takes plain locks only: a mode's acquire is several
 * statements (and, for a writer, a wait for the readers) that one try in
 * a pool thread would not cover. */
static ll_lua_lock_t *check_plain_nb (lua_State *L)
{
   ll_lua_lock_t *k = ll_lua_check_lock (L, 1, 3, "acquire_nb");
   if (k->mode != LL_PLAIN) {
      ll_lua_raise_at (L, 3,
                       "acquire_nb: not offered for semaphores and read-write locks (use "
                       "acquire or try_acquire)");
   }
   return k;
}

static int lock_try_nb (lua_State *L)
{
   ll_lua_lock_t *k = check_plain_nb (L);
   lua_settop (L, 1);
   return ll_lua_do_acquire (L, k, 3, "acquire_nb", 0);
}

/* A registry id: an integer 1 .. 2^53, exact in a Lua number on every
 * version. */
static uint64_t check_id (lua_State *L,
                          int idx,
                          int level,
                          const char *fname,
                          int arg,
                          const char *what)
{
   double v;
   if (lua_type (L, idx) != LUA_TNUMBER) {
      ll_lua_arg_error (L, level, fname, arg, "%s: number expected, got %s", what,
                        luaL_typename (L, idx));
   }
   v = (double)lua_tonumber (L, idx);
   if (!(v >= 1 && v <= 9007199254740992.0) || v != floor (v)) {
      ll_lua_arg_error (L, level, fname, arg, "%s must be an integer from 1 to 2^53", what);
   }
   return (uint64_t)v;
}

/* Milliseconds as _pool_try takes them: an integer lo .. 30 days. */
static int64_t check_ms (lua_State *L, int idx, int arg, const char *what, int64_t lo)
{
   double v;
   if (lua_type (L, idx) != LUA_TNUMBER) {
      ll_lua_arg_error (L, 1, "_pool_try", arg, "%s: number expected, got %s", what,
                        luaL_typename (L, idx));
   }
   v = (double)lua_tonumber (L, idx);
   if (!(v >= (double)lo && v <= (double)LEASELOCK_TTL_MAX_MS) || v != floor (v)) {
      /* lua_pushfstring's %d is an int: 30 days in ms is not. */
      char max[32];
      snprintf (max, sizeof max, "%lld", (long long)LEASELOCK_TTL_MAX_MS);
      ll_lua_arg_error (L, 1, "_pool_try", arg, "%s must be an integer from %d to %s", what,
                        (int)lo, max);
   }
   return (int64_t)v;
}

static bool check_bool (lua_State *L, int idx, int arg, const char *what)
{
   if (lua_type (L, idx) != LUA_TBOOLEAN) {
      ll_lua_arg_error (L, 1, "_pool_try", arg, "%s: boolean expected, got %s", what,
                        luaL_typename (L, idx));
   }
   return lua_toboolean (L, idx);
}

/*
 * acquire_nb's plan for one try of the lock at 1: nothing when the try is
 * made here (SQLite: one short local statement), else the arguments of
 * leaselock.pool._pool_try for a pool thread: client id, key, ttl_ms,
 * min_hold_ms, auto_renew, on_renew_failed (whether the lock has one).
 * Registers the client on first use.
 */
static int lock_plan_nb (lua_State *L)
{
   ll_lua_lock_t *k = check_plain_nb (L);
   ll_lua_client_t *c;
   ll_shared_client_t *sc;
   lua_settop (L, 1);
   lua_getuservalue (L, 1);
   lua_rawgeti (L, 2, UV_CLIENT); /* 3 */
   ll_lua_check_open_client (L, 3, 3, "acquire_nb");
   c = lua_touserdata (L, 3);
   /* SQLite (instant), and a lock this coroutine holds already (entered
    * again, or refused, by the one try on the worker): no pool thread. */
   if (strcmp (leaselock_client_backend (c->client), "sqlite") == 0 || ll_lua_push_my_lease (L)) {
      return 0;
   }
   sc = ll_lua_pool_share (c);
   if (!sc) {
      return luaL_error (L, "acquire_nb: out of memory");
   }
   lua_pushinteger (L, (lua_Integer)sc->id);
   lua_pushlstring (L, k->key, k->key_len);
   lua_pushinteger (L, (lua_Integer)k->opts.ttl_ms);
   lua_pushinteger (L, (lua_Integer)k->opts.min_hold_ms);
   lua_pushboolean (L, k->opts.auto_renew);
   lua_pushboolean (L, ll_lua_wants_renew_failed (L, k));
   return 6;
}

/*
 * leaselock.pool._pool_try(client_id, key, ttl_ms, min_hold_ms, auto_renew,
 * on_renew_failed) -> parked_id | nil, msg, code. What lock:acquire_nb
 * runs in a pool thread (ngx.run_worker_thread): one one-try acquire on
 * the registered client (blocking this thread only), the lease parked for
 * the request to adopt. First it reaps the parked leases nobody adopted.
 * Not for direct use; arguments are checked all the same.
 */
int ll_lua_pool_try (lua_State *L)
{
   uint64_t cid = check_id (L, 1, 1, "_pool_try", 1, "client id"), id;
   size_t len;
   const char *key = ll_lua_check_key (L, 2, "_pool_try", 2, &len);
   leaselock_acquire_opts_t o;
   ll_shared_client_t *sc;
   ll_lua_renew_failed_t *rf = NULL;
   leaselock_lease_t *lease = NULL;
   leaselock_error_t err;
   bool want_rf;

   leaselock_acquire_opts_init (&o);
   o.ttl_ms = check_ms (L, 3, 3, "ttl_ms", 1);
   o.min_hold_ms = check_ms (L, 4, 4, "min_hold_ms", 0);
   o.auto_renew = check_bool (L, 5, 5, "auto_renew");
   want_rf = check_bool (L, 6, 6, "on_renew_failed");
   o.timeout_ms = 0;
   o.no_holder = true; /* a poll: its busy try names nobody (no read) */
   ll_lua_pool_reap (NULL, PARKED_MAX_MS);
   sc = ll_lua_pool_get (cid);
   if (!sc) {
      ll_lua_arg_error (L, 1, "_pool_try", 1, "no " CLIENT_MT " has this id");
   }
   if (want_rf && o.auto_renew) {
      if (!(rf = ll_lua_rf_new ())) {
         ll_lua_pool_put (sc);
         return luaL_error (L, "_pool_try: out of memory");
      }
      o.on_renew_failed = ll_lua_rf_hook;
      o.on_renew_failed_data = rf;
   }
   ll_lua_pool_trying (true);
   if (!leaselock_acquire (sc->client, key, len, &o, &lease, &err)) {
      ll_lua_pool_trying (false);
      ll_lua_rf_free (rf);
      ll_lua_pool_put (sc);
      return ll_lua_push_failure (L, &err);
   }
   id = ll_lua_pool_park (sc, lease, rf, &err);
   ll_lua_pool_trying (false);
   ll_lua_pool_put (sc);
   if (!id) {
      return ll_lua_push_failure (L, &err);
   }
   lua_pushinteger (L, (lua_Integer)id);
   return 1;
}

/* leaselock.pool._pool_reap() -> the count of leases still parked or about to
 * be (ll_lua_pool_parked), which keeps the timer going. What
 * acquire_nb's timer runs in a pool thread: releases the parked leases
 * nobody adopted once PARKED_MAX_MS old. Not for direct use. */
int ll_lua_pool_reap_old (lua_State *L)
{
   ll_lua_pool_reap (NULL, PARKED_MAX_MS);
   lua_pushinteger (L, (lua_Integer)ll_lua_pool_parked ());
   return 1;
}

/*
 * acquire_nb's end of a try in the pool: adopt(lock, parked_id) -> the
 * parked lease in a lease handle, as ll_lua_do_acquire makes it, | nil,
 * "busy", "BUSY" if it is no longer there (reaped while the worker was too busy to
 * adopt it, or released by a close: a busy try, the wait goes on).
 */
static int lock_adopt_nb (lua_State *L)
{
   ll_lua_check_lock (L, 1, 3, "acquire_nb");
   uint64_t id = check_id (L, 2, 3, "acquire_nb", 1, "parked lease id");
   ll_lua_client_t *c;
   ll_lua_lease_t *ls;
   leaselock_client_t *client;
   leaselock_lease_t *lease;
   ll_lua_renew_failed_t *rf;
   int client_idx;

   lua_settop (L, 1);
   ls = ll_lua_push_lease_handle (L, 3, "acquire_nb", &client_idx, &client);
   c = lua_touserdata (L, client_idx);
   if (!c->shared || !ll_lua_pool_unpark (id, c->shared, &lease, &rf)) {
      leaselock_error_t busy = { .code = LEASELOCK_BUSY };
      return ll_lua_push_failure (L, &busy);
   }
   ls->rf = rf;
   ll_lua_lease_handle_set (ls, lease);
   ll_lua_drain_log (L, client_idx);
   lua_settop (L, client_idx + 1);
   ll_lua_set_my_lease (L);
   return 1;
}

/* lock:acquire_nb: acquire_nb.lua's function, closed over the halves. */
void ll_lua_push_acquire_nb (lua_State *L)
{
   ll_lua_load_chunk (L, "acquire_nb");
   lua_pushcfunction (L, lock_try_nb);
   lua_pushcfunction (L, lock_plan_nb);
   lua_pushcfunction (L, lock_adopt_nb);
   lua_call (L, 3, 1);
}
