/*
 * lleaselock.c - the Lua module `leaselock` (Lua 5.4 and LuaJIT 2.1):
 * luaopen_leaselock, the module table, and the helpers every file of the
 * module uses (argument checks, errors, warnings, the embedded Lua code).
 * lleaselock.h lists the files.
 *
 * A thin layer over leaselock.h: no lease logic lives here. Three handle
 * types, each a full userdata with its methods in their own table behind
 * __index (liolib.c shape):
 *
 *   leaselock.client  owns a leaselock_client_t (NULL once collected)
 *   leaselock.lock    a key plus acquire options; owns no C resource
 *   leaselock.lease   owns a leaselock_lease_t (NULL once closed)
 *
 * Conventions:
 *  - Expected failures return nil, message, code, where code is the core's
 *    error name ("BUSY", "TIMEOUT", "NOT_HELD", "LOST", "BACKEND", ...);
 *    BUSY answers nil, "busy", "BUSY".
 *  - Misuse (wrong types, out-of-range values, unknown options, use after
 *    close, a key the core refuses) raises "bad argument #N to 'fn' (...)"
 *    with the same text on every Lua version.
 *  - __gc and __close end in one idempotent close function per type.
 *  - The core may declare a lease lost from its renewal thread. That thread
 *    never touches a lua_State: the binding passes no C callback and reads
 *    the lease state (leaselock_lease_state) when Lua next looks at the
 *    lease (lease.held, lease.lost, lease:renew(), lease:release(), the
 *    end of lock:with, __close); the Lua on_lost callback runs then, once,
 *    on the Lua thread, protected (its error is reported, not raised).
 *  - The same holds for on_renew_failed and the log function
 *    (client:set_log): the core's C callbacks only queue what happened
 *    (under a mutex, in memory the handles own), and the Lua functions run
 *    on the Lua thread when Lua next calls the client, a lock or a lease of
 *    it (events of the renewal thread wait for that call).
 *  - Acquiring with a timeout blocks the OS thread (and so every coroutine
 *    of the lua_State) while the core waits. Coroutine schedulers use
 *    lock:try_acquire() between their own yields; OpenResty handlers run
 *    the blocking call through ngx.run_worker_thread, or wait with
 *    lock:acquire_nb, whose tries on a server backend run in a thread pool
 *    (see pool.c).
 *
 * Ownership: a lease handle keeps its client handle alive through its user
 * value, so a client is collected after its leases. Once acquire_nb has
 * made a try in a thread pool, the client belongs to its registry entry,
 * which the handle, the tries in flight and the parked leases share.
 * client:close() (and __close) is the core's close releasing what the
 * client holds; __gc is the core's destroy, which releases nothing but
 * the leases parked for the client. The states of the leases
 * are the core's (leaselock_lease_state): the module keeps no list of
 * them.
 */
#include "lleaselock.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- errors --------------------------------------------------------- */

/*
 * Raises "bad argument #arg to 'fname' (message)" with the position of the
 * Lua code `level` frames up (1: the caller of the running C function).
 * arg 0 is the method's receiver. Never returns.
 */
int ll_lua_arg_error (lua_State *L, int level, const char *fname, int arg, const char *fmt, ...)
{
   va_list ap;
   luaL_where (L, level);
   va_start (ap, fmt);
   lua_pushvfstring (L, fmt, ap);
   va_end (ap);
   if (arg == 0) {
      lua_pushfstring (L, "calling '%s' on bad self (%s)", fname, lua_tostring (L, -1));
   } else {
      lua_pushfstring (L, "bad argument #%d to '%s' (%s)", arg, fname, lua_tostring (L, -1));
   }
   lua_remove (L, -2);
   lua_concat (L, 2);
   return lua_error (L);
}

/* nil, message, code. BUSY is a result: nil, "busy", "BUSY". */
int ll_lua_push_failure (lua_State *L, const leaselock_error_t *err)
{
   lua_pushnil (L);
   if (err->code == LEASELOCK_BUSY) {
      lua_pushliteral (L, "busy");
   } else if (err->message[0]) {
      lua_pushstring (L, err->message);
   } else {
      lua_pushstring (L, leaselock_code_message (err->code));
   }
   lua_pushstring (L, leaselock_code_name (err->code));
   return 3;
}

/* ---- argument checks ------------------------------------------------ */

void *ll_lua_check_udata (lua_State *L, int idx, int level, const char *fname, const char *tname)
{
   void *p = luaL_testudata (L, idx, tname);
   if (!p) {
      ll_lua_arg_error (L, level, fname, 0, "%s expected, got %s", tname, luaL_typename (L, idx));
   }
   return p;
}

void *ll_lua_check_udata_mt (lua_State *L, int idx, int mt_idx, int level, const char *fname,
                             const char *tname)
{
   void *p = lua_touserdata (L, idx);
   if (p && lua_getmetatable (L, idx)) {
      bool same = lua_rawequal (L, -1, mt_idx);
      lua_pop (L, 1);
      if (same) {
         return p;
      }
   }
   return ll_lua_check_udata (L, idx, level, fname, tname); /* raises */
}

/* The core's validator: strict UTF-8 (no overlong form, no surrogate). */
bool ll_lua_utf8_valid (const char *s, size_t n)
{
   return leaselock_utf8_valid_len (s, n) == n;
}

/* A key (or, with allow_empty, a prefix) as the contract defines it: a
 * string of 1..255 bytes of UTF-8 without NUL. The core checks again; this
 * makes the refusal a Lua error at the call that passed it (level 1). */
static const char *check_key_text (lua_State *L, int idx, const char *fname, int arg,
                                   bool allow_empty, size_t *len)
{
   const char *what = allow_empty ? "prefix" : "key";
   const int level = 1;
   const char *s;
   if (lua_type (L, idx) != LUA_TSTRING) {
      ll_lua_arg_error (L, level, fname, arg, "%s: string expected, got %s", what,
                        luaL_typename (L, idx));
   }
   s = lua_tolstring (L, idx, len);
   if ((*len == 0 && !allow_empty) || *len > LEASELOCK_KEY_MAX) {
      ll_lua_arg_error (L, level, fname, arg, "%s must be %d to %d bytes, got %d", what,
                        allow_empty ? 0 : 1, LEASELOCK_KEY_MAX,
                        (int)(*len > 100000 ? 100000 : *len));
   }
   if (memchr (s, '\0', *len)) {
      ll_lua_arg_error (L, level, fname, arg, "%s must not contain a NUL byte", what);
   }
   if (!ll_lua_utf8_valid (s, *len)) {
      ll_lua_arg_error (L, level, fname, arg, "%s is not valid UTF-8", what);
   }
   return s;
}

const char *ll_lua_check_key (lua_State *L, int idx, const char *fname, int arg, size_t *len)
{
   return check_key_text (L, idx, fname, arg, false, len);
}

const char *ll_lua_check_prefix (lua_State *L, int idx, const char *fname, int arg, size_t *len)
{
   return check_key_text (L, idx, fname, arg, true, len);
}

/* opts at idx must be nil or a table whose keys are all in allowed. */
void ll_lua_check_opts (lua_State *L, int idx, int level, const char *fname, int arg,
                        const char *const *allowed)
{
   if (lua_isnoneornil (L, idx)) {
      return;
   }
   if (!lua_istable (L, idx)) {
      ll_lua_arg_error (L, level, fname, arg, "options: table expected, got %s",
                        luaL_typename (L, idx));
   }
   lua_pushnil (L);
   while (lua_next (L, idx)) {
      const char *const *a;
      lua_pop (L, 1);
      if (lua_type (L, -1) != LUA_TSTRING) {
         ll_lua_arg_error (L, level, fname, arg, "option names must be strings, got %s",
                           luaL_typename (L, -1));
      }
      for (a = allowed; *a; a++) {
         if (strcmp (*a, lua_tostring (L, -1)) == 0) {
            break;
         }
      }
      if (!*a) {
         ll_lua_arg_error (L, level, fname, arg, "unknown option '%s'", lua_tostring (L, -1));
      }
   }
}

/*
 * Converts seconds (a Lua number) at idx to milliseconds, rounding up so
 * that a positive value never becomes 0. kind: SECONDS_POSITIVE (a TTL:
 * > 0, at most 30 days), SECONDS_NONNEGATIVE (min_hold: 0 .. 30 days),
 * SECONDS_TIMEOUT (0 .. 30 days, or math.huge: -1, wait forever; any
 * other value above 30 days is refused here like the core refuses it,
 * rather than read as "forever").
 */
static int64_t check_seconds_at (lua_State *L, int idx, int level, const char *fname, int arg,
                                 const char *what, int kind)
{
   double s, ms;
   char num[64];
   if (lua_type (L, idx) != LUA_TNUMBER) {
      ll_lua_arg_error (L, level, fname, arg, "%s must be a number of seconds, got %s", what,
                        luaL_typename (L, idx));
   }
   s = (double)lua_tonumber (L, idx);
   /* The same text on every Lua version (5.4 would print -1.0, 5.1 -1). */
   snprintf (num, sizeof num, "%.14g", s);
   if (isnan (s)) {
      ll_lua_arg_error (L, level, fname, arg, "%s must be a number of seconds, got nan", what);
   }
   if (kind == SECONDS_TIMEOUT) {
      if (s < 0) {
         ll_lua_arg_error (L, level, fname, arg,
                           "%s must be >= 0 seconds (nil waits forever), got %s", what, num);
      }
      if (isinf (s)) {
         return -1;
      }
      ms = ceil (s * 1000.0);
      if (ms > (double)LEASELOCK_TTL_MAX_MS) {
         ll_lua_arg_error (
           L, level, fname, arg,
           "%s must be at most 30 days (%d s), or math.huge to wait forever, got %s", what,
           (int)(LEASELOCK_TTL_MAX_MS / 1000), num);
      }
      return (int64_t)ms;
   }
   if (s < 0 || (s == 0 && kind == SECONDS_POSITIVE) || s * 1000.0 > (double)LEASELOCK_TTL_MAX_MS) {
      ll_lua_arg_error (
        L, level, fname, arg, "%s must be %s 0 and at most 30 days (%d s), got %s", what,
        kind == SECONDS_POSITIVE ? ">" : ">=", (int)(LEASELOCK_TTL_MAX_MS / 1000), num);
   }
   return (int64_t)ceil (s * 1000.0);
}

int64_t ll_lua_check_seconds (lua_State *L, int idx, const char *fname, int arg, const char *what,
                              int kind)
{
   return check_seconds_at (L, idx, 1, fname, arg, what, kind);
}

int64_t ll_lua_check_timeout (lua_State *L, int idx, int level, const char *fname, int arg)
{
   return check_seconds_at (L, idx, level, fname, arg, "timeout", SECONDS_TIMEOUT);
}

int ll_lua_raise_at (lua_State *L, int level, const char *fmt, ...)
{
   va_list ap;
   luaL_where (L, level);
   va_start (ap, fmt);
   lua_pushvfstring (L, fmt, ap);
   va_end (ap);
   lua_concat (L, 2);
   return lua_error (L);
}

int ll_lua_fail (lua_State *L, int level, const char *fname, const leaselock_error_t *err)
{
   if (err->code == LEASELOCK_INVALID) {
      return ll_lua_raise_at (L, level, "%s: %s", fname, err->message);
   }
   return ll_lua_push_failure (L, err);
}

bool ll_lua_push_uv_function (lua_State *L, int idx, int slot)
{
   lua_getuservalue (L, idx);
   lua_rawgeti (L, -1, slot);
   lua_remove (L, -2);
   if (!lua_isfunction (L, -1)) {
      lua_pop (L, 1);
      return false;
   }
   return true;
}

/* ---- warnings ------------------------------------------------------- */

/* The registry key of the function that receives the module's warnings
 * (leaselock.on_warning). */
static const char warning_sink_key = 'w';

/* leaselock.on_warning([fn]) -> the previous fn or nil. fn(message)
 * receives the warnings the module would otherwise print (an error raised
 * by on_lost); nil restores printing them. */
static int l_on_warning (lua_State *L)
{
   if (!lua_isnoneornil (L, 1) && lua_type (L, 1) != LUA_TFUNCTION) {
      ll_lua_arg_error (L, 1, "on_warning", 1, "function or nil expected, got %s",
                        luaL_typename (L, 1));
   }
   lua_settop (L, 1);
   lua_pushlightuserdata (L, (void *)&warning_sink_key);
   lua_rawget (L, LUA_REGISTRYINDEX); /* 2: the previous one */
   lua_pushlightuserdata (L, (void *)&warning_sink_key);
   lua_pushvalue (L, 1);
   lua_rawset (L, LUA_REGISTRYINDEX);
   return 1;
}

/*
 * Reports an error raised by on_lost (on top of the stack, popped): as a
 * warning on Lua 5.4 (like an error in __gc; shown once warnings are on,
 * `lua -W` or warn("@on")), on stderr on 5.1/LuaJIT (nginx: the error log).
 * on_lost runs from lease.held, .lost, renew(), release(), __close and the end
 * of lock:with: its error must not replace what those return or raise.
 * A function set with leaselock.on_warning receives the text instead.
 */
void ll_lua_report_callback_error (lua_State *L, const char *what)
{
   const char *msg =
     lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : "error object is not a string";
   lua_pushlightuserdata (L, (void *)&warning_sink_key);
   lua_rawget (L, LUA_REGISTRYINDEX);
   if (lua_isfunction (L, -1)) { /* leaselock.on_warning */
      lua_pushfstring (L, "leaselock: error in %s (%s)", what, msg);
      if (lua_pcall (L, 1, 0, 0) != 0) {
         lua_pop (L, 1); /* a failing sink is not reported again */
      }
      lua_pop (L, 1);
      return;
   }
   lua_pop (L, 1);
#if LUA_VERSION_NUM >= 504
   lua_warning (L, "leaselock: error in ", 1);
   lua_warning (L, what, 1);
   lua_warning (L, " (", 1);
   lua_warning (L, msg, 1);
   lua_warning (L, ")", 0);
#else
   fprintf (stderr, "leaselock: error in %s (%s)\n", what, msg);
#endif
   lua_pop (L, 1);
}

/* ---- the embedded Lua code (lua/<name>.lua) ------------------------- */

/* One chunk: lua/<name>.lua, len bytes of source. */
typedef struct
{
   const char *name;
   const char *source;
   size_t len;
} ll_lua_chunk_t;

/* ll_lua_chunks[]: every lua/<name>.lua, generated by mk/lua.mk. */
#include "ll_lua_chunks.h"

void ll_lua_load_chunk (lua_State *L, const char *name)
{
   for (size_t i = 0; i < sizeof ll_lua_chunks / sizeof ll_lua_chunks[0]; i++) {
      if (strcmp (ll_lua_chunks[i].name, name) == 0) {
         lua_pushfstring (L, "=leaselock.%s", name);
         if (luaL_loadbuffer (L, ll_lua_chunks[i].source, ll_lua_chunks[i].len,
                              lua_tostring (L, -1)) != 0) {
            lua_error (L);
         }
         lua_remove (L, -2);
         return;
      }
   }
   luaL_error (L, "leaselock: no embedded chunk %s", name);
}

/* ---- registration --------------------------------------------------- */

/* Each type's metatable (the types' setup functions): the same shape for
 * the three, liolib.c's, plus __metatable so that Lua code cannot reach
 * or change it. */
void ll_lua_new_type (lua_State *L, const char *tname, const luaL_Reg *methods,
                      lua_CFunction index_fn, lua_CFunction tostring, lua_CFunction gc,
                      lua_CFunction close)
{
   const luaL_Reg meta[] = { { "__tostring", tostring }, { "__gc", gc }, { "__close", close } };
   luaL_newmetatable (L, tname);
   lua_pushstring (L, tname);
   lua_setfield (L, -2, "__name");
   for (size_t i = 0; i < sizeof meta / sizeof *meta; i++) {
      if (meta[i].func) {
         lua_pushvalue (L, -1);
         lua_pushcclosure (L, meta[i].func, 1);
         lua_setfield (L, -2, meta[i].name);
      }
   }
   lua_newtable (L);
   luaL_setfuncs (L, methods, 0);
   lua_pushvalue (L, -1);
   lua_setfield (L, -3, "__methods");
   lua_pushvalue (L, -1);
   lua_pushcclosure (L, index_fn, 1);
   lua_setfield (L, -3, "__index");
   lua_pushliteral (L, "leaselock handles are read-only");
   lua_setfield (L, -3, "__metatable");
   lua_pop (L, 2);
}

static const luaL_Reg module_functions[] = { { "connect", ll_lua_connect },
                                             { "on_warning", l_on_warning },
                                             { NULL, NULL } };

/* What lock:acquire_nb runs in an nginx thread pool's Lua VM
 * (ngx.run_worker_thread(pool, "leaselock.pool", "_pool_try", ...)):
 * internal, so not in the module table a user sees. */
static const luaL_Reg pool_functions[] = { { "_pool_try", ll_lua_pool_try },
                                           { "_pool_reap", ll_lua_pool_reap_old },
                                           { NULL, NULL } };

/*
 * The one symbol Lua needs. The core's leaselock_* API is declared with
 * default visibility in leaselock.h, so -fvisibility=hidden alone would
 * export it too: `make` links with lua/leaselock.map, which keeps only
 * this one (the rock links the same way, mk/luarock.mk).
 */
__attribute__ ((visibility ("default"))) int luaopen_leaselock (lua_State *L)
{
   ll_lua_client_setup (L);
   ll_lua_lease_setup (L); /* before the lock's: lock:with's finish closes over LEASE_MT */
   ll_lua_lock_setup (L);
   ll_lua_fields_setup (L);
   luaL_newlib (L, module_functions);
   ll_lua_fields_register (L);
   lua_pushliteral (L, LEASELOCK_VERSION);
   lua_setfield (L, -2, "_VERSION");
   return 1;
}

/* require "leaselock.pool": Lua's all-in-one C loader finds it in
 * leaselock.so (the same library, so the same registry of clients). */
__attribute__ ((visibility ("default"))) int luaopen_leaselock_pool (lua_State *L)
{
   luaL_newlib (L, pool_functions);
   return 1;
}
