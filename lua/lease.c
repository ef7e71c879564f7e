/*
 * lease.c - leaselock.lease, the handle of a leaselock_lease_t: its
 * making (for lock.c and acquire_nb.c), its methods, its close paths
 * (__gc, __close, the end of lock:with), and the Lua callbacks on_lost and
 * on_renew_failed.
 *
 * The core may declare a lease lost from its renewal thread, which never
 * touches a lua_State: the state is read (leaselock_lease_state) when Lua
 * next looks at the lease, and on_lost runs then, once, on the Lua
 * thread, protected (observe).
 */
#include "lleaselock.h"

#include <stdio.h>
#include <string.h>

/* ---- making a lease handle ------------------------------------------ */

/*
 * Pushes the lock's user value, its client handle (at *client_idx; its
 * client in *client) and a new lease handle, closed (it exists before the
 * lease does, so a memory error leaks nothing), whose user value is the
 * lock's (the client and the lock's callbacks: sharing it spares a table
 * per lease). The lock is at 1; raises if its client is closed.
 */
ll_lua_lease_t *ll_lua_push_lease_handle (lua_State *L, int level, const char *fname,
                                          int *client_idx, leaselock_client_t **client)
{
   ll_lua_lease_t *ls;
   lua_getuservalue (L, 1);
   lua_rawgeti (L, -1, UV_CLIENT);
   *client_idx = lua_gettop (L);
   *client = ll_lua_open_client_at (L, *client_idx, level, fname);

   const ll_lua_lock_t *k = lua_touserdata (L, 1);
   size_t key_cap = k->mode == LL_PLAIN ? k->key_len : LEASELOCK_KEY_MAX;
   ls = lua_newuserdata (L, sizeof *ls + key_cap);
   memset (ls, 0, sizeof *ls);
   ls->key_cap = key_cap;
   lua_rawgeti (L, -3, UV_LEASE_MT);
   lua_setmetatable (L, -2);
   lua_pushvalue (L, -3); /* the lock's user value */
   lua_setuservalue (L, -2);
   return ls;
}

/* The lease handle ls takes lease (owned from now on). */
void ll_lua_lease_handle_set (ll_lua_lease_t *ls, leaselock_lease_t *lease)
{
   ls->lease = lease;
   ls->fence = leaselock_lease_fence (lease);
   strncpy (ls->owner, leaselock_lease_owner (lease), LEASELOCK_OWNER_LEN);
   /* The record's key: a mode's holder holds key/.slot/<i> and the like. */
   ls->key_len = leaselock_lease_key_len (lease);
   if (ls->key_len > ls->key_cap) {
      ls->key_len = ls->key_cap; /* never: a plain lease's key is its lock's */
   }
   memcpy (ls->key, leaselock_lease_key (lease), ls->key_len);
}

/* ---- the state as Lua sees it, and the callbacks -------------------- */

static ll_lua_lease_t *check_lease (lua_State *L, int idx, int level, const char *fname,
                                    bool need_open)
{
   ll_lua_lease_t *ls = ll_lua_check_udata (L, idx, level, fname, LEASE_MT);
   if (need_open && !ls->lease) {
      ll_lua_raise_at (L, level, "attempt to use a closed " LEASE_MT " (in '%s')", fname);
   }
   return ls;
}

/* The state without side effects on the Lua side (no on_lost). */
static leaselock_state_t lease_state (ll_lua_lease_t *ls)
{
   if (!ls->lease) {
      return ls->closed_lost ? LEASELOCK_STATE_LOST : LEASELOCK_STATE_RELEASED;
   }
   return leaselock_lease_state (ls->lease);
}

/* Calls the lease's on_lost(lease), protected. */
static void call_on_lost (lua_State *L, int idx)
{
   idx = lua_absindex (L, idx);
   if (!ll_lua_push_uv_function (L, idx, UV_ON_LOST)) {
      return;
   }
   lua_pushvalue (L, idx);
   if (lua_pcall (L, 1, 0, 0) != 0) {
      ll_lua_report_callback_error (L, "on_lost");
   }
}

/* on_renew_failed's Lua half: on_renew_failed(lease, message, code,
 * seconds_left) for the last failure recorded since the last call,
 * protected. */
static void call_on_renew_failed (lua_State *L, int idx, ll_lua_lease_t *ls)
{
   ll_lua_renew_failed_t got;
   if (!ls->rf) {
      return;
   }
   ll_lua_rf_take (ls->rf, &got);
   idx = lua_absindex (L, idx);
   if (!got.pending || !ll_lua_push_uv_function (L, idx, UV_ON_RENEW_FAILED)) {
      return;
   }
   lua_pushvalue (L, idx);
   lua_pushstring (L, got.message);
   lua_pushstring (L, leaselock_code_name (got.code));
   lua_pushnumber (L, (lua_Number)got.remaining_ms / 1000.0);
   if (lua_pcall (L, 4, 0, 0) != 0) {
      ll_lua_report_callback_error (L, "on_renew_failed");
   }
}

/*
 * The lease state as Lua sees it. The first time LOST is seen, on_lost
 * runs here (when notify) on the Lua thread, once.
 */
static leaselock_state_t observe (lua_State *L, int idx, ll_lua_lease_t *ls, bool notify)
{
   leaselock_state_t st = lease_state (ls);
   if (notify && st == LEASELOCK_STATE_HELD) {
      call_on_renew_failed (L, idx, ls);
   }
   if (ls->lease && st == LEASELOCK_STATE_LOST && !ls->lost_seen) {
      ls->lost_seen = true;
      if (notify) {
         call_on_lost (L, idx);
      }
   }
   if (notify) {
      ll_lua_drain_from (L, idx);
   }
   return st;
}

/* The one close path of __gc, __close and lock:with: releases if still
 * held (errors ignored), stops renewal, frees, leaves its client's
 * open_holds. Idempotent. lost: whether the state is LOST (read once by
 * the caller that knows it, lease_close otherwise). */
static void lease_close_as (ll_lua_lease_t *ls, bool lost)
{
   if (ls->lease) {
      ls->closed_lost = lost;
      leaselock_lease_destroy (ls->lease); /* no callback runs after it */
      ls->lease = NULL;
   }
   if (ls->counted_in) {
      ls->counted_in->open_holds--;
      ls->counted_in = NULL;
   }
   ll_lua_rf_free (ls->rf);
   ls->rf = NULL;
}

static void lease_close (ll_lua_lease_t *ls)
{
   lease_close_as (ls, ls->lease && lease_state (ls) == LEASELOCK_STATE_LOST);
}

/* A reentered lease (more than one hold) at the end of an inner with or
 * <close>: lets that one hold go and keeps the lease open for the outer
 * ones. False (nothing done) for a lease with one hold or none; *holds:
 * the holds seen (0 unless held). */
static bool let_inner_hold_go (ll_lua_lease_t *ls, int64_t *holds, bool *ok, leaselock_error_t *err)
{
   *holds = ls->lease ? leaselock_lease_holds (ls->lease) : 0;
   if (*holds < 2)
      return false;
   *ok = leaselock_lease_release (ls->lease, err);
   return true;
}

/* Runs for every lease handle made: the type check without a registry
 * look-up (the metatable is the closure's upvalue). */
static int lease_gc (lua_State *L)
{
   ll_lua_lease_t *ls = ll_lua_check_udata_mt (L, 1, lua_upvalueindex (1), 1, "__gc", LEASE_MT);
   lease_close (ls);
   return 0;
}

/* __close: like __gc, but a loss first seen here still calls on_lost. */
static int lease_tbc_close (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "__close", false);
   bool seen = ls->lost_seen, newly_lost;
   if (!ls->lease) {
      return 0;
   }
   newly_lost = observe (L, 1, ls, false) == LEASELOCK_STATE_LOST && !seen;
   bool ok;
   leaselock_error_t err;
   int64_t holds;
   if (!newly_lost && let_inner_hold_go (ls, &holds, &ok, &err)) {
      return 0; /* errors ignored, as lease_close's */
   }
   lease_close (ls);
   if (newly_lost) {
      call_on_lost (L, 1);
   }
   return 0;
}

/*
 * with's close of the lease at 1: pushes nothing (0) when with may return
 * fn's results, else nil, msg, code (3). Closes the lease in every case.
 *  - fn released the lease itself (state RELEASED, whatever its release
 *    returned to it): nothing left to do; with returns fn's results.
 *  - the lease was lost while fn ran: nil, msg, "LOST".
 *  - otherwise with releases it, and a failed release is with's failure:
 *    NOT_HELD (taken over, or fn closed the client) or BACKEND. After a
 *    BACKEND error the lock's state is unknown (the release may or may not
 *    have landed; the lease expires by its TTL anyway), so with returns
 *    nil, msg, "BACKEND" rather than fn's results: a caller that needs
 *    them keeps them in an upvalue.
 */
static int with_close (lua_State *L, ll_lua_lease_t *ls)
{
   leaselock_error_t err;
   bool seen = ls->lost_seen, newly_lost = false, released = true;
   int64_t holds;

   if (let_inner_hold_go (ls, &holds, &released, &err)) {
      return released ? 0 : ll_lua_push_failure (L, &err);
   }
   if (ls->lease) {
      /* one hold: held (the core counts holds of a held lease only), so
       * the state needs no read of its own */
      leaselock_state_t st = holds == 1 ? LEASELOCK_STATE_HELD : observe (L, 1, ls, false);
      if (st == LEASELOCK_STATE_LOST) {
         newly_lost = !seen;
      } else if (st != LEASELOCK_STATE_RELEASED) {
         released = leaselock_lease_release (ls->lease, &err);
      }
      if (st == LEASELOCK_STATE_HELD && released) {
         lease_close_as (ls, false); /* released: not lost */
      } else {
         lease_close (ls);
      }
   }
   if (newly_lost) {
      call_on_lost (L, 1);
   }
   if (ls->closed_lost) {
      lua_pushnil (L);
      lua_pushliteral (L, "lease lost while held: ");
      lua_pushlstring (L, ls->key, ls->key_len);
      lua_concat (L, 2);
      lua_pushstring (L, leaselock_code_name (LEASELOCK_LOST));
      return 3;
   }
   return released ? 0 : ll_lua_push_failure (L, &err);
}

/*
 * The second half of lock:with, a C closure over LEASE_MT:
 * finish(lease, pcall's results) -> fn's results | nil, msg, code; fn's
 * error raised again, unchanged, once the lease is closed.
 */
int ll_lua_lease_with_finish (lua_State *L)
{
   ll_lua_lease_t *ls = ll_lua_check_udata_mt (L, 1, lua_upvalueindex (1), 2, "with", LEASE_MT);
   int top = lua_gettop (L);
   int failed = with_close (L, ls);
   if (!lua_toboolean (L, 2)) {
      lua_pushvalue (L, 3);
      return lua_error (L);
   }
   if (failed) {
      return failed;
   }
   lua_settop (L, top); /* fn's results, from 3 */
   return top - 2;
}

/* __tostring's: a handle still open says "client closed" for the core's
 * CLOSED; a closed handle (its state LOST or RELEASED) says it is closed. */
static const char *state_name (leaselock_state_t st, bool open)
{
   if (st == LEASELOCK_STATE_CLOSED) {
      return "client closed";
   }
   if (open) {
      return leaselock_state_name (st);
   }
   return st == LEASELOCK_STATE_LOST ? "lost, closed" : "closed";
}

static int lease_tostring (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "__tostring", false);
   /* No on_lost here: printing must not run user code. */
   leaselock_state_t st = observe (L, 1, ls, false);
   /* The fence as an integer without relying on %I (absent in 5.1). */
   {
      char buf[32];
      snprintf (buf, sizeof buf, "%lld", (long long)ls->fence);
      lua_pushliteral (L, LEASE_MT " (key=");
      lua_pushlstring (L, ls->key, ls->key_len);
      lua_pushfstring (L, ", fence=%s, %s): %p", buf, state_name (st, ls->lease != NULL),
                       (void *)ls);
      lua_concat (L, 3);
   }
   return 1;
}

/* The state of the lease handle at 1 (also in *out when out is not NULL)
 * as the field fname reads it: on_lost and the other callbacks may run. */
static leaselock_state_t observed (lua_State *L, const char *fname, ll_lua_lease_t **out)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, fname, false);
   if (out) {
      *out = ls;
   }
   return observe (L, 1, ls, true);
}

/*
 * The fields that read the lease's state, as Python's properties do
 * (lease.held, never lease:held(): a method read as a value would be a
 * function, always true): held (false once released, lost, or its client
 * closed), lost, state ("held", "released", "lost", "closed": held when
 * its client was closed without releasing it), holds (reentrant holds: 1
 * once acquired, one more per re-entry, 0 once released or lost),
 * expires_in (seconds to the local deadline, 0 unless held). Pushes the
 * value and returns true; false for another name.
 */
static bool push_state_field (lua_State *L, const char *name)
{
   ll_lua_lease_t *ls;
   leaselock_state_t st;
   if (strcmp (name, "held") && strcmp (name, "lost") && strcmp (name, "state") &&
       strcmp (name, "holds") && strcmp (name, "expires_in")) {
      return false;
   }
   st = observed (L, name, &ls);
   if (strcmp (name, "held") == 0) {
      lua_pushboolean (L, st == LEASELOCK_STATE_HELD);
   } else if (strcmp (name, "lost") == 0) {
      lua_pushboolean (L, st == LEASELOCK_STATE_LOST);
   } else if (strcmp (name, "state") == 0) {
      lua_pushstring (L, leaselock_state_name (st));
   } else if (strcmp (name, "holds") == 0) {
      lua_pushinteger (L, ls->lease ? (lua_Integer)leaselock_lease_holds (ls->lease) : 0);
   } else {
      int64_t left = st == LEASELOCK_STATE_HELD ? leaselock_lease_remaining_ms (ls->lease) : 0;
      lua_pushnumber (L, left > 0 ? (lua_Number)left / 1000.0 : 0.0);
   }
   return true;
}

/* lease:renew([ttl [, min_hold]]) -> true | nil, msg, code. With
 * min_hold, a release keeps the key taken until at least min_hold seconds
 * after this renew. */
static int lease_renew (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "renew", true);
   int64_t ttl_ms = 0, hold_ms = -1;
   leaselock_error_t err;
   bool ok;

   if (!lua_isnoneornil (L, 2)) {
      ttl_ms = ll_lua_check_seconds (L, 2, "renew", 1, "ttl", SECONDS_POSITIVE);
   }
   if (!lua_isnoneornil (L, 3)) {
      hold_ms = ll_lua_check_seconds (L, 3, "renew", 2, "min_hold", SECONDS_NONNEGATIVE);
   }
   ok = leaselock_lease_extend (ls->lease, ttl_ms, hold_ms, &err);
   observe (L, 1, ls, true);
   if (!ok) {
      return ll_lua_fail (L, 1, "renew", &err);
   }
   lua_pushboolean (L, 1);
   return 1;
}

/* lease:release() -> true | nil, msg, code (the handle stays usable for
 * its fields; closing it is left to __close/__gc). */
static int lease_release (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "release", true);
   leaselock_error_t err;
   bool ok;

   observe (L, 1, ls, true);
   ok = leaselock_lease_release (ls->lease, &err);
   if (!ok) {
      return ll_lua_push_failure (L, &err);
   }
   lua_pushboolean (L, 1);
   return 1;
}

/* The methods, then the fields: key, owner, fence, ttl (seconds; 0 once
 * closed) and the state's (push_state_field); any other name raises. */
static int lease_index (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "__index", false);
   const char *name;
   lua_pushvalue (L, 2);
   lua_rawget (L, lua_upvalueindex (1));
   if (!lua_isnil (L, -1)) {
      return 1;
   }
   if (lua_type (L, 2) != LUA_TSTRING) {
      return ll_lua_no_field (L, LEASE_MT);
   }
   name = lua_tostring (L, 2);
   if (strcmp (name, "key") == 0) {
      lua_pushlstring (L, ls->key, ls->key_len);
   } else if (strcmp (name, "owner") == 0) {
      lua_pushstring (L, ls->owner);
   } else if (strcmp (name, "fence") == 0) {
      lua_pushinteger (L, (lua_Integer)ls->fence);
   } else if (strcmp (name, "ttl") == 0) {
      lua_pushnumber (L, ls->lease ? (lua_Number)leaselock_lease_ttl_ms (ls->lease) / 1000.0 : 0);
   } else if (!push_state_field (L, name)) {
      return ll_lua_no_field (L, LEASE_MT);
   }
   return 1;
}

/* ---- registration --------------------------------------------------- */

static const luaL_Reg lease_methods[] = { { "renew", lease_renew },
                                          { "release", lease_release },
                                          { NULL, NULL } };

void ll_lua_lease_setup (lua_State *L)
{
   ll_lua_new_type (L, LEASE_MT, lease_methods, lease_index, lease_tostring, lease_gc,
                    lease_tbc_close);
}
