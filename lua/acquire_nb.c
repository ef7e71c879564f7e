/*
 * acquire_nb.c - lock:acquire_nb, the waiting acquire for OpenResty: the
 * C halves of its Lua wait loop (acquire_nb.lua), and the module
 * functions a pool thread runs for it (leaselock.pool._pool_try,
 * leaselock.pool._pool_reap). The loop drives one waiter of the core
 * (leaselock_wait_new / _try / _destroy), registered in pool.c: its tries
 * claim the key's reservation and keep a fair place as a blocking
 * acquire's do. A try on SQLite, or outside nginx, is made in the worker
 * (lock_try_wait_nb); else in a thread of an nginx thread pool
 * (_pool_try), which parks the lease in the registry for lock_adopt_nb.
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
static uint64_t check_id (lua_State *L, int idx, int level, const char *fname, int arg,
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

/*
 * begin(lock, under_nginx, one_try) -> wait id, here | nothing. The wait
 * of one acquire_nb (no I/O): the lock's options (fair included), no
 * timeout of its own (the Lua loop counts the time; one_try: timeout 0,
 * its one try ends it). here: its tries are made in the worker (SQLite:
 * one short local statement, a moment at most on the file's lock; or no
 * nginx). Nothing when this coroutine holds the lock already: the one try
 * in the worker enters it again, or refuses.
 */
static int lock_begin_nb (lua_State *L)
{
   ll_lua_lock_t *k = check_plain_nb (L);
   bool nginx = lua_toboolean (L, 2), one_try = lua_toboolean (L, 3);
   ll_lua_renew_failed_t *rf = NULL;
   leaselock_error_t err;
   lua_settop (L, 1);
   lua_getuservalue (L, 1);
   lua_rawgeti (L, 2, UV_CLIENT); /* 3 */
   ll_lua_check_open_client (L, 3, 3, "acquire_nb");
   ll_lua_client_t *c = lua_touserdata (L, 3);
   if (ll_lua_push_my_lease (L)) {
      return 0;
   }
   ll_shared_client_t *sc = ll_lua_pool_share (c);
   if (!sc) {
      return luaL_error (L, "acquire_nb: out of memory");
   }
   leaselock_acquire_opts_t o = k->opts;
   o.timeout_ms = one_try ? 0 : -1;
   if (ll_lua_wants_renew_failed (k)) {
      if (!(rf = ll_lua_rf_new ())) {
         return luaL_error (L, "acquire_nb: out of memory");
      }
      o.on_renew_failed = ll_lua_rf_hook;
      o.on_renew_failed_data = rf;
   }
   leaselock_wait_t *w = leaselock_wait_new (c->client, k->key, k->key_len, &o, &err);
   if (!w) {
      ll_lua_rf_free (rf);
      return ll_lua_fail (L, 3, "acquire_nb", &err);
   }
   uint64_t id = ll_lua_pool_wait_add (sc, w, rf, one_try);
   if (!id) {
      return luaL_error (L, "acquire_nb: out of memory");
   }
   lua_pushinteger (L, (lua_Integer)id);
   lua_pushboolean (L, !nginx || strcmp (leaselock_client_backend (c->client), "sqlite") == 0);
   return 2;
}

/* One try of the wait w (taken out of the registry): true with *lease
 * (w destroyed, its rf in *rf); false with err, w back in the registry
 * when it waits on (BUSY of a wait with a timeout: *sleep_ms), else
 * destroyed (over: no round trip). */
static bool wait_try (ll_nbwait_t *w, leaselock_lease_t **lease, ll_lua_renew_failed_t **rf,
                      int64_t *sleep_ms, leaselock_error_t *err)
{
   if (leaselock_wait_try (w->wait, lease, sleep_ms, err)) {
      *rf = w->rf;
      w->rf = NULL;
      ll_lua_pool_wait_free (w);
      return true;
   }
   if (err->code == LEASELOCK_BUSY && !w->one_try) {
      ll_lua_pool_wait_back (w);
   } else {
      ll_lua_pool_wait_free (w);
   }
   return false;
}

/* nil, msg, code[, sleep (s)]: a failed try; the sleep the core chose
 * when the wait goes on (BUSY). */
static int push_try_failure (lua_State *L, const leaselock_error_t *err, int64_t sleep_ms)
{
   int n = ll_lua_push_failure (L, err);
   if (err->code == LEASELOCK_BUSY) {
      lua_pushnumber (L, (lua_Number)sleep_ms / 1000);
      n++;
   }
   return n;
}

static int push_gone (lua_State *L)
{
   lua_pushnil (L);
   lua_pushliteral (L, "the wait was given up (idle too long)");
   lua_pushliteral (L, "GONE");
   return 3;
}

/*
 * leaselock.pool._pool_try(wait_id) -> parked_id | nil, msg, code[, sleep].
 * What lock:acquire_nb runs in a pool thread (ngx.run_worker_thread): one
 * try of its wait (blocking this thread only), the lease parked for the
 * request to adopt. First it reaps what nobody will adopt or use. Not for
 * direct use; its argument is checked all the same.
 */
int ll_lua_pool_try (lua_State *L)
{
   uint64_t wid = check_id (L, 1, 1, "_pool_try", 1, "wait id");
   leaselock_lease_t *lease = NULL;
   ll_lua_renew_failed_t *rf = NULL;
   leaselock_error_t err;
   int64_t sleep_ms = 0;
   ll_lua_pool_reap (NULL, PARKED_MAX_MS);
   ll_nbwait_t *w = ll_lua_pool_wait_take (wid);
   if (!w) {
      return push_gone (L);
   }
   ll_shared_client_t *sc = w->sc;
   /* The wait's reference to sc goes with it: park needs one of its own. */
   ll_shared_client_t *ref = ll_lua_pool_get (sc->id);
   bool ok = wait_try (w, &lease, &rf, &sleep_ms, &err);
   uint64_t id = 0;
   if (ok && ref) {
      id = ll_lua_pool_park (ref, lease, rf, &err);
   } else if (ok) {
      leaselock_lease_destroy (lease); /* the handle was collected meanwhile */
      ll_lua_rf_free (rf);
      err = (leaselock_error_t){ .code = LEASELOCK_INVALID };
      snprintf (err.message, sizeof err.message, "the client was closed while acquiring");
   }
   if (ref) {
      ll_lua_pool_put (ref);
   }
   if (!id) {
      return push_try_failure (L, &err, sleep_ms);
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

/* The lease handle ls (pushed by ll_lua_push_lease_handle, its client at
 * client_idx) takes lease and rf, as ll_lua_do_acquire's does; returns 1
 * with it on top. */
static int adopt_lease (lua_State *L, ll_lua_lease_t *ls, int client_idx, leaselock_lease_t *lease,
                        ll_lua_renew_failed_t *rf)
{
   ls->rf = rf;
   ll_lua_lease_handle_set (ls, lease);
   ll_lua_drain_log (L, client_idx);
   lua_settop (L, client_idx + 1);
   ll_lua_set_my_lease (L);
   return 1;
}

/*
 * acquire_nb's end of a try in the pool: adopt(lock, parked_id) -> the
 * parked lease in a lease handle, as ll_lua_do_acquire makes it, | nil,
 * "busy", "BUSY" if it is no longer there (reaped while the worker was too
 * busy to adopt it, or released by a close: a busy try, the wait goes on).
 */
static int lock_adopt_nb (lua_State *L)
{
   ll_lua_check_lock (L, 1, 3, "acquire_nb");
   uint64_t id = check_id (L, 2, 3, "acquire_nb", 1, "parked lease id");
   leaselock_client_t *client;
   leaselock_lease_t *lease;
   ll_lua_renew_failed_t *rf;
   int client_idx;

   lua_settop (L, 1);
   ll_lua_lease_t *ls = ll_lua_push_lease_handle (L, 3, "acquire_nb", &client_idx, &client);
   ll_lua_client_t *c = lua_touserdata (L, client_idx);
   if (!c->shared || !ll_lua_pool_unpark (id, c->shared, &lease, &rf)) {
      leaselock_error_t busy = { .code = LEASELOCK_BUSY };
      return ll_lua_push_failure (L, &busy);
   }
   return adopt_lease (L, ls, client_idx, lease, rf);
}

/*
 * try_wait(lock, wait_id) -> lease | nil, msg, code[, sleep (s)]: one try
 * of the wait made here (SQLite, or outside nginx), the lease in a lease
 * handle; code "GONE" when the wait was reaped.
 */
static int lock_try_wait_nb (lua_State *L)
{
   check_plain_nb (L);
   uint64_t wid = check_id (L, 2, 3, "acquire_nb", 1, "wait id");
   leaselock_client_t *client;
   leaselock_lease_t *lease = NULL;
   ll_lua_renew_failed_t *rf = NULL;
   leaselock_error_t err;
   int64_t sleep_ms = 0;
   int client_idx;

   lua_settop (L, 1);
   ll_lua_lease_t *ls = ll_lua_push_lease_handle (L, 3, "acquire_nb", &client_idx, &client);
   ll_nbwait_t *w = ll_lua_pool_wait_take (wid);
   if (!w) {
      return push_gone (L);
   }
   if (wait_try (w, &lease, &rf, &sleep_ms, &err)) {
      return adopt_lease (L, ls, client_idx, lease, rf);
   }
   ll_lua_drain_log (L, client_idx);
   if (err.code == LEASELOCK_INVALID) {
      return ll_lua_fail (L, 3, "acquire_nb", &err);
   }
   return push_try_failure (L, &err, sleep_ms);
}

/* give_up(wait_id, here): acquire_nb ends its wait without the lock. Made
 * here (here: SQLite or no nginx, where leaving a fair queue may take its
 * round trip), else left to the reaper in a pool thread. */
static int lock_give_up_nb (lua_State *L)
{
   uint64_t wid = check_id (L, 1, 3, "acquire_nb", 1, "wait id");
   if (!lua_toboolean (L, 2)) {
      ll_lua_pool_wait_give_up (wid);
      return 0;
   }
   ll_nbwait_t *w = ll_lua_pool_wait_take (wid);
   if (w) {
      ll_lua_pool_wait_free (w);
   }
   return 0;
}

/* lock:acquire_nb: acquire_nb.lua's function, closed over the halves. */
void ll_lua_push_acquire_nb (lua_State *L)
{
   ll_lua_load_chunk (L, "acquire_nb");
   lua_pushcfunction (L, lock_begin_nb);
   lua_pushcfunction (L, lock_try_wait_nb);
   lua_pushcfunction (L, lock_give_up_nb);
   lua_pushcfunction (L, lock_try_nb);
   lua_pushcfunction (L, lock_adopt_nb);
   lua_call (L, 5, 1);
}
