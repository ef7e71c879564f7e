/*
 * lleaselock.c - the Lua module `leaselock` (Lua 5.4 and LuaJIT 2.1).
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
 *    lease (lease:held(), lease:lost(), lease:renew(), lease:release(), the
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
 *    (see "the registry of acquire_nb's tries" below).
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
#include "ll_lua_compat.h"

#include "leaselock.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLIENT_MT "leaselock.client"
#define LOCK_MT "leaselock.lock"
#define LEASE_MT "leaselock.lease"

/* The longest label the core stores (holder info, leaselock_record_t). */
#define LL_LABEL_MAX (sizeof ((leaselock_record_t *)0)->label - 1)

/* User value slots (a table, as the 5.1 API requires). */
#define UV_CLIENT 1
#define UV_ON_LOST 2
#define UV_ON_RENEW_FAILED 3
#define UV_HELD 4 /* a lock's: coroutine -> the lease it took through the lock (weak keys) */
/* The client handle's user value: its log function. */
#define UV_LOG_FN 1

/* One log event, copied by the core's hook. event and code are static. */
typedef struct
{
   int level;
   const char *event;
   const char *code;
   size_t key_len;
   int64_t fence;
   char key[LEASELOCK_KEY_MAX + 1];
   char message[LEASELOCK_ERROR_MAX];
} ll_lua_event_t;

#define LOG_QUEUE_MAX 64

/* The events the hook queued for the Lua thread (client:set_log). */
typedef struct
{
   pthread_mutex_t mu;
   int head, n;
   unsigned dropped; /* events lost to a full queue since the last drain */
   ll_lua_event_t ev[LOG_QUEUE_MAX];
} ll_lua_log_t;

typedef struct ll_shared_client ll_shared_client_t;

typedef struct
{
   /* owned; NULL once collected. Once shared is set, the registry entry
    * owns the client and this is a borrowed copy, valid while the handle
    * holds its reference. */
   leaselock_client_t *client;
   ll_lua_log_t *log;          /* owned; NULL until set_log */
   ll_shared_client_t *shared; /* one reference; NULL until acquire_nb needs it */
} ll_lua_client_t;

/* The last renewal failure of a lease, written by on_renew_failed on the
 * renewal thread, read on the Lua thread. */
typedef struct
{
   pthread_mutex_t mu;
   int pending; /* failures not yet reported to Lua */
   leaselock_code_t code;
   int64_t remaining_ms;
   char message[LEASELOCK_ERROR_MAX];
} ll_lua_renew_failed_t;

/* What a lock object takes: the key itself, a slot of a counting
 * semaphore, or one side of a read-write lock (modes.c). */
typedef enum
{
   LL_PLAIN,
   LL_SEMAPHORE,
   LL_SHARED,
   LL_EXCLUSIVE
} ll_lock_mode_t;

typedef struct
{
   int64_t ttl_ms;
   int64_t min_hold_ms;
   bool auto_renew;
   bool fair;      /* waiters get the key in order of arrival */
   bool reentrant; /* its holder (a coroutine) may take it again */
   ll_lock_mode_t mode;
   int64_t limit; /* LL_SEMAPHORE: the number of slots */
   size_t key_len;
   char key[LEASELOCK_KEY_MAX + 1];
} ll_lua_lock_t;

typedef struct
{
   leaselock_lease_t *lease;  /* owned; NULL once closed */
   ll_lua_renew_failed_t *rf; /* owned; NULL without on_renew_failed */
   bool lost_seen;            /* on_lost already called (or due) */
   bool closed_lost;          /* the state was LOST when it was closed */
   int64_t fence;
   char owner[LEASELOCK_OWNER_LEN + 1];
   size_t key_len;
   char key[LEASELOCK_KEY_MAX + 1];
} ll_lua_lease_t;

/* ---- errors --------------------------------------------------------- */

/*
 * Raises "bad argument #arg to 'fname' (message)" with the position of the
 * Lua code `level` frames up (1: the caller of the running C function).
 * arg 0 is the method's receiver. Never returns.
 */
static int arg_error (lua_State *L, int level, const char *fname, int arg, const char *fmt, ...)
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
static int push_failure (lua_State *L, const leaselock_error_t *err)
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

/* The core's validator: strict UTF-8 (no overlong form, no surrogate). */
static bool utf8_valid (const char *s, size_t n)
{
   return leaselock_utf8_valid_len (s, n) == n;
}

/* A key (or, with allow_empty, a prefix) as the contract defines it: a
 * string of 1..255 bytes of UTF-8 without NUL. The core checks again; this
 * makes the refusal a Lua error at the call that passed it. */
static const char *check_key (lua_State *L,
                              int idx,
                              int level,
                              const char *fname,
                              int arg,
                              const char *what,
                              bool allow_empty,
                              size_t *len)
{
   const char *s;
   if (lua_type (L, idx) != LUA_TSTRING) {
      arg_error (L, level, fname, arg, "%s: string expected, got %s", what, luaL_typename (L, idx));
   }
   s = lua_tolstring (L, idx, len);
   if ((*len == 0 && !allow_empty) || *len > LEASELOCK_KEY_MAX) {
      arg_error (L, level, fname, arg, "%s must be %d to %d bytes, got %d", what,
                 allow_empty ? 0 : 1, LEASELOCK_KEY_MAX, (int)(*len > 100000 ? 100000 : *len));
   }
   if (memchr (s, '\0', *len)) {
      arg_error (L, level, fname, arg, "%s must not contain a NUL byte", what);
   }
   if (!utf8_valid (s, *len)) {
      arg_error (L, level, fname, arg, "%s is not valid UTF-8", what);
   }
   return s;
}

/* opts at idx must be nil or a table whose keys are all in allowed. */
static void check_opts (lua_State *L,
                        int idx,
                        int level,
                        const char *fname,
                        int arg,
                        const char *const *allowed)
{
   if (lua_isnoneornil (L, idx)) {
      return;
   }
   if (!lua_istable (L, idx)) {
      arg_error (L, level, fname, arg, "options: table expected, got %s", luaL_typename (L, idx));
   }
   lua_pushnil (L);
   while (lua_next (L, idx)) {
      const char *const *a;
      lua_pop (L, 1);
      if (lua_type (L, -1) != LUA_TSTRING) {
         arg_error (L, level, fname, arg, "option names must be strings, got %s",
                    luaL_typename (L, -1));
      }
      for (a = allowed; *a; a++) {
         if (strcmp (*a, lua_tostring (L, -1)) == 0) {
            break;
         }
      }
      if (!*a) {
         arg_error (L, level, fname, arg, "unknown option '%s'", lua_tostring (L, -1));
      }
   }
}

enum
{
   SECONDS_POSITIVE,
   SECONDS_NONNEGATIVE,
   SECONDS_TIMEOUT
};

/*
 * Converts seconds (a Lua number) at idx to milliseconds, rounding up so
 * that a positive value never becomes 0. kind: SECONDS_POSITIVE (a TTL:
 * > 0, at most 30 days), SECONDS_NONNEGATIVE (min_hold: 0 .. 30 days),
 * SECONDS_TIMEOUT (0 .. 30 days, or math.huge: -1, wait forever; any
 * other value above 30 days is refused here like the core refuses it,
 * rather than read as "forever").
 */
static int64_t check_seconds (lua_State *L,
                              int idx,
                              int level,
                              const char *fname,
                              int arg,
                              const char *what,
                              int kind)
{
   double s, ms;
   char num[64];
   if (lua_type (L, idx) != LUA_TNUMBER) {
      arg_error (L, level, fname, arg, "%s must be a number of seconds, got %s", what,
                 luaL_typename (L, idx));
   }
   s = (double)lua_tonumber (L, idx);
   /* The same text on every Lua version (5.4 would print -1.0, 5.1 -1). */
   snprintf (num, sizeof num, "%.14g", s);
   if (isnan (s)) {
      arg_error (L, level, fname, arg, "%s must be a number of seconds, got nan", what);
   }
   if (kind == SECONDS_TIMEOUT) {
      if (s < 0) {
         arg_error (L, level, fname, arg, "%s must be >= 0 seconds (nil waits forever), got %s",
                    what, num);
      }
      if (isinf (s)) {
         return -1;
      }
      ms = ceil (s * 1000.0);
      if (ms > (double)LEASELOCK_TTL_MAX_MS) {
         arg_error (L, level, fname, arg,
                    "%s must be at most 30 days (%d s), or math.huge to wait forever, got %s", what,
                    (int)(LEASELOCK_TTL_MAX_MS / 1000), num);
      }
      return (int64_t)ms;
   }
   if (s < 0 || (s == 0 && kind == SECONDS_POSITIVE) || s * 1000.0 > (double)LEASELOCK_TTL_MAX_MS) {
      arg_error (L, level, fname, arg, "%s must be %s 0 and at most 30 days (%d s), got %s", what,
                 kind == SECONDS_POSITIVE ? ">" : ">=", (int)(LEASELOCK_TTL_MAX_MS / 1000), num);
   }
   return (int64_t)ceil (s * 1000.0);
}

static ll_lua_client_t *check_client (lua_State *L, int idx, int level, const char *fname)
{
   ll_lua_client_t *c = luaL_testudata (L, idx, CLIENT_MT);
   if (!c) {
      arg_error (L, level, fname, 0, CLIENT_MT " expected, got %s", luaL_typename (L, idx));
   }
   return c;
}

static leaselock_client_t *check_open_client (lua_State *L, int idx, int level, const char *fname)
{
   ll_lua_client_t *c = check_client (L, idx, level, fname);
   if (leaselock_client_closed (c->client)) {
      luaL_where (L, level);
      lua_pushfstring (L, "attempt to use a closed " CLIENT_MT " (in '%s')", fname);
      lua_concat (L, 2);
      lua_error (L);
   }
   return c->client;
}

static ll_lua_lock_t *check_lock (lua_State *L, int idx, int level, const char *fname)
{
   ll_lua_lock_t *k = luaL_testudata (L, idx, LOCK_MT);
   if (!k) {
      arg_error (L, level, fname, 0, LOCK_MT " expected, got %s", luaL_typename (L, idx));
   }
   return k;
}

static ll_lua_lease_t *check_lease (lua_State *L,
                                    int idx,
                                    int level,
                                    const char *fname,
                                    bool need_open)
{
   ll_lua_lease_t *ls = luaL_testudata (L, idx, LEASE_MT);
   if (!ls) {
      arg_error (L, level, fname, 0, LEASE_MT " expected, got %s", luaL_typename (L, idx));
   }
   if (need_open && !ls->lease) {
      luaL_where (L, level);
      lua_pushfstring (L, "attempt to use a closed " LEASE_MT " (in '%s')", fname);
      lua_concat (L, 2);
      lua_error (L);
   }
   return ls;
}

/* Raises the core's INVALID message as a misuse error. */
static int raise_invalid (lua_State *L, int level, const char *fname, const leaselock_error_t *err)
{
   luaL_where (L, level);
   lua_pushfstring (L, "%s: %s", fname, err->message);
   lua_concat (L, 2);
   return lua_error (L);
}

/* The state without side effects on the Lua side (no on_lost). */
static leaselock_state_t lease_state (ll_lua_lease_t *ls)
{
   if (!ls->lease) {
      return ls->closed_lost ? LEASELOCK_STATE_LOST : LEASELOCK_STATE_RELEASED;
   }
   return leaselock_lease_state (ls->lease);
}

/* ---- module functions ----------------------------------------------- */

/* leaselock.connect([uri [, {label=}]]) -> client | nil, msg, code */
static int l_connect (lua_State *L)
{
   static const char *const allowed[] = { "label", NULL };
   const char *uri = NULL, *label = NULL;
   leaselock_error_t err;
   ll_lua_client_t *c;

   if (!lua_isnoneornil (L, 1)) {
      if (lua_type (L, 1) != LUA_TSTRING) {
         arg_error (L, 1, "connect", 1, "uri: string expected, got %s", luaL_typename (L, 1));
      }
      uri = lua_tostring (L, 1);
      if (strlen (uri) != lua_rawlen (L, 1)) {
         arg_error (L, 1, "connect", 1, "uri must not contain a NUL byte");
      }
   }
   check_opts (L, 2, 1, "connect", 2, allowed);
   if (lua_istable (L, 2)) {
      lua_getfield (L, 2, "label");
      if (!lua_isnil (L, -1)) {
         size_t len;
         if (lua_type (L, -1) != LUA_TSTRING) {
            arg_error (L, 1, "connect", 2, "label must be a string, got %s", luaL_typename (L, -1));
         }
         label = lua_tolstring (L, -1, &len); /* stays on the stack */
         /* The core takes a C string: check here what it would cut at a
          * NUL or refuse later, so that a bad label is a clean error. */
         if (len > LL_LABEL_MAX) {
            arg_error (L, 1, "connect", 2, "label must be at most %d bytes, got %d",
                       (int)LL_LABEL_MAX, (int)(len > 100000 ? 100000 : len));
         }
         if (memchr (label, '\0', len)) {
            arg_error (L, 1, "connect", 2, "label must not contain a NUL byte");
         }
         if (!utf8_valid (label, len)) {
            arg_error (L, 1, "connect", 2, "label is not valid UTF-8");
         }
      }
   }
   /* The handle exists (closed) before the client does: a memory error
    * here leaks nothing. */
   c = lua_newuserdata (L, sizeof *c);
   c->client = NULL;
   c->log = NULL;
   c->shared = NULL;
   luaL_setmetatable (L, CLIENT_MT);
   lua_createtable (L, 1, 0);
   lua_setuservalue (L, -2);
   c->client = leaselock_client_new (uri, label, &err);
   if (!c->client) {
      return push_failure (L, &err);
   }
   return 1;
}

/* The registry key of the function that receives the module's warnings
 * (leaselock.on_warning). */
static const char warning_sink_key = 'w';

/* leaselock.on_warning([fn]) -> the previous fn or nil. fn(message)
 * receives the warnings the module would otherwise print (an error raised
 * by on_lost); nil restores printing them. */
static int l_on_warning (lua_State *L)
{
   if (!lua_isnoneornil (L, 1) && lua_type (L, 1) != LUA_TFUNCTION) {
      arg_error (L, 1, "on_warning", 1, "function or nil expected, got %s", luaL_typename (L, 1));
   }
   lua_settop (L, 1);
   lua_pushlightuserdata (L, (void *)&warning_sink_key);
   lua_rawget (L, LUA_REGISTRYINDEX); /* 2: the previous one */
   lua_pushlightuserdata (L, (void *)&warning_sink_key);
   lua_pushvalue (L, 1);
   lua_rawset (L, LUA_REGISTRYINDEX);
   return 1;
}

/* ---- the log function (client:set_log) and client:stats() ---------- */

static void report_callback_error (lua_State *L, const char *what);

/* The core's log hook (any thread): queues a copy of the event. */
static void log_hook (const leaselock_log_event_t *ev, void *data)
{
   ll_lua_log_t *q = data;
   pthread_mutex_lock (&q->mu);
   if (q->n == LOG_QUEUE_MAX) {
      q->dropped++;
   } else {
      ll_lua_event_t *e = &q->ev[(q->head + q->n++) % LOG_QUEUE_MAX];
      e->level = ev->level;
      e->event = ev->event;
      e->code = leaselock_code_name (ev->code);
      e->key_len = ev->key ? ev->key_len : 0;
      memcpy (e->key, ev->key ? ev->key : "", e->key_len);
      e->fence = ev->fence;
      snprintf (e->message, sizeof e->message, "%s", ev->message);
   }
   pthread_mutex_unlock (&q->mu);
}

/* {level=, levelname=, event=, key= (absent when none), fence=, code=,
 * message=, dropped= (events lost before this one, when any)} */
static void push_event (lua_State *L, const ll_lua_event_t *e, unsigned dropped)
{
   lua_createtable (L, 0, 8);
   lua_pushinteger (L, e->level);
   lua_setfield (L, -2, "level");
   lua_pushstring (L, leaselock_log_level_name (e->level));
   lua_setfield (L, -2, "levelname");
   lua_pushstring (L, e->event);
   lua_setfield (L, -2, "event");
   if (e->key_len) {
      lua_pushlstring (L, e->key, e->key_len);
      lua_setfield (L, -2, "key");
   }
   lua_pushinteger (L, (lua_Integer)e->fence);
   lua_setfield (L, -2, "fence");
   lua_pushstring (L, e->code);
   lua_setfield (L, -2, "code");
   lua_pushstring (L, e->message);
   lua_setfield (L, -2, "message");
   if (dropped) {
      lua_pushinteger (L, (lua_Integer)dropped);
      lua_setfield (L, -2, "dropped");
   }
}

/* Calls the log function of the client handle at idx for each queued
 * event, protected, on this (the Lua) thread. */
static void drain_log (lua_State *L, int idx)
{
   ll_lua_client_t *c = luaL_testudata (L, idx, CLIENT_MT);
   ll_lua_event_t e;
   if (!c || !c->log) {
      return;
   }
   idx = lua_absindex (L, idx);
   for (;;) {
      unsigned dropped;
      pthread_mutex_lock (&c->log->mu);
      if (c->log->n == 0) {
         pthread_mutex_unlock (&c->log->mu);
         return;
      }
      e = c->log->ev[c->log->head];
      c->log->head = (c->log->head + 1) % LOG_QUEUE_MAX;
      c->log->n--;
      dropped = c->log->dropped;
      c->log->dropped = 0;
      pthread_mutex_unlock (&c->log->mu);
      lua_getuservalue (L, idx);
      lua_rawgeti (L, -1, UV_LOG_FN);
      lua_remove (L, -2);
      if (!lua_isfunction (L, -1)) {
         lua_pop (L, 1);
         continue;
      }
      push_event (L, &e, dropped);
      if (lua_pcall (L, 1, 0, 0) != 0) {
         report_callback_error (L, "the log function");
      }
   }
}

/* drain_log for the client of the lock or lease handle at idx. */
static void drain_from (lua_State *L, int idx)
{
   lua_getuservalue (L, idx);
   lua_rawgeti (L, -1, UV_CLIENT);
   drain_log (L, -1);
   lua_pop (L, 2);
}

/* on_renew_failed's C half (renewal thread): records the failure. */
static void renew_failed_hook (leaselock_lease_t *lease,
                               const leaselock_error_t *err,
                               int64_t remaining_ms,
                               void *data)
{
   ll_lua_renew_failed_t *rf = data;
   (void)lease;
   pthread_mutex_lock (&rf->mu);
   rf->pending++;
   rf->code = err->code;
   rf->remaining_ms = remaining_ms;
   snprintf (rf->message, sizeof rf->message, "%s", err->message);
   pthread_mutex_unlock (&rf->mu);
}

static void rf_free (ll_lua_renew_failed_t *rf)
{
   if (rf) {
      pthread_mutex_destroy (&rf->mu);
      free (rf);
   }
}

/* A new record of renewal failures (owned by the caller), or NULL when out
 * of memory. */
static ll_lua_renew_failed_t *rf_new (void)
{
   ll_lua_renew_failed_t *rf = calloc (1, sizeof *rf);
   if (rf) {
      pthread_mutex_init (&rf->mu, NULL);
   }
   return rf;
}

static void renew_failed_free (ll_lua_lease_t *ls)
{
   rf_free (ls->rf);
   ls->rf = NULL;
}

/* client:set_log(fn [, level]) -> true. fn(event) receives the events of
 * level >= level (default 20, INFO; DEBUG 10, WARNING 30, ERROR 40); nil
 * turns it off. */
static int client_set_log (lua_State *L)
{
   ll_lua_client_t *c = check_client (L, 1, 1, "set_log");
   lua_Integer level = LEASELOCK_LOG_INFO;
   check_open_client (L, 1, 1, "set_log");
   if (!lua_isnil (L, 2) && lua_type (L, 2) != LUA_TFUNCTION) {
      arg_error (L, 1, "set_log", 1, "function or nil expected, got %s", luaL_typename (L, 2));
   }
   if (!lua_isnoneornil (L, 3)) {
      if (lua_type (L, 3) != LUA_TNUMBER) {
         arg_error (L, 1, "set_log", 2, "level must be a number, got %s", luaL_typename (L, 3));
      }
      level = (lua_Integer)lua_tonumber (L, 3);
   }
   lua_settop (L, 2);
   if (!c->log && !lua_isnil (L, 2)) {
      c->log = calloc (1, sizeof *c->log);
      if (!c->log) {
         return luaL_error (L, "set_log: out of memory");
      }
      pthread_mutex_init (&c->log->mu, NULL);
   }
   lua_getuservalue (L, 1);
   lua_pushvalue (L, 2);
   lua_rawseti (L, -2, UV_LOG_FN);
   if (lua_isnil (L, 2)) {
      leaselock_client_set_log (c->client, LEASELOCK_LOG_OFF, NULL, NULL);
   } else {
      leaselock_client_set_log (c->client, (int)level, log_hook, c->log);
   }
   lua_pushboolean (L, 1);
   return 1;
}

/* Fills *st from the client handle at 1; raises on a collected client. */
static void stats_of (lua_State *L, const char *fname, leaselock_stats_t *st)
{
   ll_lua_client_t *c = check_client (L, 1, 1, fname);
   leaselock_error_t err;
   if (!c->client || !leaselock_client_stats (c->client, st, &err)) {
      luaL_error (L, "%s: the client is gone", fname);
   }
}

/* client:stats() -> {acquires=, busy=, ..., latency_buckets = {{le=, count=}...}}
 * (the keys of Python's client.stats(); works on a closed client). */
static int client_stats (lua_State *L)
{
   static const struct
   {
      const char *name;
      size_t offset;
   } fields[] = {
#define F(f) { #f, offsetof (leaselock_stats_t, f) }
      F (acquires),         F (busy),        F (waits),    F (timeouts),         F (renewals),
      F (renewal_failures), F (losses),      F (releases), F (release_failures), F (backend_errors),
      F (requests),         F (leases_held),
#undef F
   };
   leaselock_stats_t st;
   stats_of (L, "stats", &st);
   drain_log (L, 1);
   lua_createtable (L, 0, 20);
   for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
      uint64_t v = *(const uint64_t *)((const char *)&st + fields[i].offset);
      lua_pushinteger (L, (lua_Integer)v);
      lua_setfield (L, -2, fields[i].name);
   }
   lua_pushnumber (L, (lua_Number)st.wait_ms / 1000.0);
   lua_setfield (L, -2, "wait_seconds");
   lua_pushnumber (L, (lua_Number)st.held_ms / 1000.0);
   lua_setfield (L, -2, "held_seconds");
   lua_pushnumber (L, (lua_Number)st.latency_sum_us / 1e6);
   lua_setfield (L, -2, "latency_sum_seconds");
   lua_createtable (L, LEASELOCK_LATENCY_BUCKETS, 0);
   for (int i = 0; i < LEASELOCK_LATENCY_BUCKETS; i++) {
      lua_createtable (L, 0, 2);
      lua_pushnumber (L, st.latency_le_us[i] == UINT64_MAX ? HUGE_VAL
                                                           : (lua_Number)st.latency_le_us[i] / 1e6);
      lua_setfield (L, -2, "le");
      lua_pushinteger (L, (lua_Integer)st.latency_count[i]);
      lua_setfield (L, -2, "count");
      lua_rawseti (L, -2, i + 1);
   }
   lua_setfield (L, -2, "latency_buckets");
   return 1;
}

/* client:prometheus([labels]) -> the stats in the Prometheus text format. */
static int client_prometheus (lua_State *L)
{
   leaselock_stats_t st;
   const char *labels = luaL_optstring (L, 2, "");
   luaL_Buffer b;
   size_t need;
   stats_of (L, "prometheus", &st);
   need = leaselock_stats_prometheus (&st, labels, NULL, 0);
   luaL_buffinit (L, &b);
   leaselock_stats_prometheus (&st, labels, luaL_prepbuffsize (&b, need + 1), need + 1);
   luaL_addsize (&b, need);
   luaL_pushresult (&b);
   return 1;
}

/* ---- the registry of acquire_nb's tries in a thread pool ------------ */

/*
 * Under OpenResty, lock:acquire_nb makes each try of a server backend in a
 * thread of an nginx thread pool (ngx.run_worker_thread), so that its
 * round trip never blocks the worker's event loop. That thread runs a Lua
 * VM of its own, and only strings, numbers, booleans and tables of them
 * cross between VMs; but every VM of the process runs this one copy of the
 * module (one dlopen), so the two sides meet here, in C:
 *  - the request's VM registers its client (an id for a refcounted
 *    leaselock_client_t) and passes the id, the key and the lock's options
 *    (lock_plan_nb);
 *  - the pool thread makes one one-try leaselock_acquire on that same
 *    client and parks the lease under a new id (l_pool_try);
 *  - back in the request's VM, the lock adopts the parked lease into an
 *    ordinary lease handle (lock_adopt_nb).
 * A parked lease that is never adopted (nginx drops the thread's results
 * when the request was aborted while the thread ran) is released, not
 * leaked: in a pool thread once it is PARKED_MAX_MS old, by the next pool
 * try or by acquire_nb's timer (l_pool_reap); else by client:close(), or
 * when the client handle is collected.
 */

/* Adoption normally follows parking within a turn of the event loop: 5 s
 * leaves room for a loaded worker while a dead request's key is not kept
 * long. */
#define PARKED_MAX_MS 5000

struct ll_shared_client
{
   uint64_t id;
   leaselock_client_t *client; /* owned: destroyed with the last reference */
   unsigned refs;              /* the Lua handle's, pool tries', parked leases' */
   bool handle_gone;           /* the Lua handle was collected: park no more */
   ll_shared_client_t *next;
};

typedef struct ll_parked
{
   uint64_t id;
   ll_shared_client_t *sc;    /* one reference */
   leaselock_lease_t *lease;  /* owned */
   ll_lua_renew_failed_t *rf; /* owned; NULL without on_renew_failed */
   int64_t parked_at_ms;      /* monotonic */
   struct ll_parked *next;
} ll_parked_t;

/* The registry, guarded by reg_mu. Nothing does I/O or calls Lua while
 * holding it. Ids count from 1 and stay below 2^53, exact in any Lua
 * number. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static ll_shared_client_t *reg_clients;
static ll_parked_t *reg_parked;
static uint64_t reg_next_id = 1;

static int64_t monotonic_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The registry entry of the client handle c, made on first use (it then
 * owns the client; c keeps one reference). NULL when out of memory. */
static ll_shared_client_t *shared_of (ll_lua_client_t *c)
{
   ll_shared_client_t *sc = c->shared;
   if (sc) {
      return sc;
   }
   sc = calloc (1, sizeof *sc);
   if (!sc) {
      return NULL;
   }
   sc->client = c->client;
   sc->refs = 1;
   pthread_mutex_lock (&reg_mu);
   sc->id = reg_next_id++;
   sc->next = reg_clients;
   reg_clients = sc;
   pthread_mutex_unlock (&reg_mu);
   c->shared = sc;
   return sc;
}

/* A new reference to the client registered as id whose handle is still
 * alive; NULL if there is none. */
static ll_shared_client_t *shared_get (uint64_t id)
{
   ll_shared_client_t *sc;
   pthread_mutex_lock (&reg_mu);
   for (sc = reg_clients; sc && (sc->id != id || sc->handle_gone); sc = sc->next) {
   }
   if (sc) {
      sc->refs++;
   }
   pthread_mutex_unlock (&reg_mu);
   return sc;
}

/* Drops a reference; the last one destroys the client. */
static void shared_put (ll_shared_client_t *sc)
{
   ll_shared_client_t **p;
   bool last;
   pthread_mutex_lock (&reg_mu);
   last = --sc->refs == 0;
   if (last) {
      for (p = &reg_clients; *p != sc; p = &(*p)->next) {
      }
      *p = sc->next;
   }
   pthread_mutex_unlock (&reg_mu);
   if (last) {
      leaselock_client_destroy (sc->client);
      free (sc);
   }
}

/*
 * Parks lease and rf (both owned by the registry from now on) for sc and
 * returns their new id. When nobody could adopt them any more (the client
 * handle is collected or the client closed) or out of memory, destroys the
 * lease instead (releasing it), fills *err and returns 0.
 */
static uint64_t park (ll_shared_client_t *sc,
                      leaselock_lease_t *lease,
                      ll_lua_renew_failed_t *rf,
                      leaselock_error_t *err)
{
   ll_parked_t *pk = calloc (1, sizeof *pk);
   uint64_t id = 0;
   if (pk) {
      pthread_mutex_lock (&reg_mu);
      /* Checked under reg_mu: a close or a collection marks the client
       * before it reaps, so a lease is either reaped or never parked. */
      if (!sc->handle_gone && !leaselock_client_closed (sc->client)) {
         pk->id = id = reg_next_id++;
         pk->sc = sc;
         sc->refs++;
         pk->lease = lease;
         pk->rf = rf;
         pk->parked_at_ms = monotonic_ms ();
         pk->next = reg_parked;
         reg_parked = pk;
      }
      pthread_mutex_unlock (&reg_mu);
   }
   if (!id) {
      err->code = pk ? LEASELOCK_INVALID : LEASELOCK_NOMEM;
      snprintf (err->message, sizeof err->message, "%s",
                pk ? "the client was closed while acquiring" : "out of memory");
      free (pk);
      leaselock_lease_destroy (lease);
      rf_free (rf);
   }
   return id;
}

/* Takes the lease parked as id for sc (and its rf); false if there is
 * none: it was reaped. */
static bool unpark (uint64_t id,
                    ll_shared_client_t *sc,
                    leaselock_lease_t **lease,
                    ll_lua_renew_failed_t **rf)
{
   ll_parked_t **p, *pk;
   pthread_mutex_lock (&reg_mu);
   for (p = &reg_parked; (pk = *p) && (pk->id != id || pk->sc != sc); p = &pk->next) {
   }
   if (pk) {
      *p = pk->next;
   }
   pthread_mutex_unlock (&reg_mu);
   if (!pk) {
      return false;
   }
   *lease = pk->lease;
   *rf = pk->rf;
   shared_put (sc); /* never the last: the caller's handle holds one */
   free (pk);
   return true;
}

/* Destroys the parked leases of sc (of every client when sc is NULL)
 * parked at least max_age_ms ago, which releases those still held (one
 * round trip each: never called on an nginx worker's event loop but from
 * a pool thread, a close or a collection). */
static void reap_parked (ll_shared_client_t *sc, int64_t max_age_ms)
{
   ll_parked_t *old = NULL, **p, *pk;
   int64_t now = monotonic_ms ();
   pthread_mutex_lock (&reg_mu);
   for (p = &reg_parked; (pk = *p);) {
      if ((!sc || pk->sc == sc) && now - pk->parked_at_ms >= max_age_ms) {
         *p = pk->next;
         pk->next = old;
         old = pk;
      } else {
         p = &pk->next;
      }
   }
   pthread_mutex_unlock (&reg_mu);
   while ((pk = old)) {
      old = pk->next;
      leaselock_lease_destroy (pk->lease); /* no hook runs after it */
      rf_free (pk->rf);
      shared_put (pk->sc);
      free (pk);
   }
}

/* The client handle has been collected: no more parking for it, its
 * parked leases are released, its reference dropped (the client goes
 * with the last one, maybe that of a pool try still running). */
static void shared_drop_handle (ll_lua_client_t *c)
{
   pthread_mutex_lock (&reg_mu);
   c->shared->handle_gone = true;
   pthread_mutex_unlock (&reg_mu);
   reap_parked (c->shared, 0);
   shared_put (c->shared);
   c->shared = NULL;
}

/* ---- client --------------------------------------------------------- */

/* client:close() -> true | nil, msg, code (also __close). Releases the
 * leases the client still holds (the core's close), then the client
 * refuses every call; its leases answer NOT_HELD. Idempotent. A failed
 * release is reported once the client is closed all the same. */
static int client_close (lua_State *L)
{
   ll_lua_client_t *c = check_client (L, 1, 1, "close");
   leaselock_error_t err;
   bool ok = !c->client || leaselock_client_close (c->client, true, &err);
   if (c->shared) {
      reap_parked (c->shared, 0); /* the close released them */
   }
   drain_log (L, 1);
   if (!ok) {
      return push_failure (L, &err);
   }
   lua_pushboolean (L, 1);
   return 1;
}

/* __gc: the core's destroy, which releases nothing (the lease handles,
 * collected first, released their own) but the leases parked for the
 * client; once registered, the client is destroyed with the registry's
 * last reference, maybe after a pool try still running on it. */
static int client_gc (lua_State *L)
{
   ll_lua_client_t *c = check_client (L, 1, 1, "__gc");
   /* No hook call runs once set_log returns: the queue can go. */
   leaselock_client_set_log (c->client, LEASELOCK_LOG_OFF, NULL, NULL);
   if (c->shared) {
      shared_drop_handle (c);
   } else {
      leaselock_client_destroy (c->client);
   }
   c->client = NULL;
   if (c->log) {
      pthread_mutex_destroy (&c->log->mu);
      free (c->log);
      c->log = NULL;
   }
   return 0;
}

static int client_tostring (lua_State *L)
{
   ll_lua_client_t *c = check_client (L, 1, 1, "__tostring");
   if (!leaselock_client_closed (c->client)) {
      lua_pushfstring (L, CLIENT_MT " (%s, %s): %p", leaselock_client_backend (c->client),
                       leaselock_client_uri (c->client), (void *)c);
   } else {
      lua_pushfstring (L, CLIENT_MT " (closed): %p", (void *)c);
   }
   return 1;
}

/* A boolean option name of the table at 3 (client:lock's, :semaphore's,
 * :rwlock's) into *out, when given; anything but a boolean raises. */
static void opt_bool (lua_State *L, const char *fname, const char *name, bool *out)
{
   lua_getfield (L, 3, name);
   if (!lua_isnil (L, -1)) {
      if (lua_type (L, -1) != LUA_TBOOLEAN) {
         arg_error (L, 1, fname, 2, "%s must be a boolean, got %s", name, luaL_typename (L, -1));
      }
      *out = lua_toboolean (L, -1);
   }
   lua_pop (L, 1);
}

/* A callback option of the table at 3 into the user value at uv. */
static void opt_callback (lua_State *L, const char *fname, const char *name, int uv, int slot)
{
   lua_getfield (L, 3, name);
   if (!lua_isnil (L, -1)) {
      if (lua_type (L, -1) != LUA_TFUNCTION) {
         arg_error (L, 1, fname, 2, "%s must be a function, got %s", name, luaL_typename (L, -1));
      }
      lua_pushvalue (L, -1);
      lua_rawseti (L, uv, slot);
   }
   lua_pop (L, 1);
}

/*
 * Pushes a new lock object of the client at 1 on key (len bytes, checked)
 * taken as mode says, with the options of the table at 3 (names checked)
 * or the defaults.
 */
static ll_lua_lock_t *new_lock (lua_State *L,
                                const char *fname,
                                const char *key,
                                size_t len,
                                ll_lock_mode_t mode,
                                int64_t limit)
{
   ll_lua_lock_t *k = lua_newuserdata (L, sizeof *k);
   int ud = lua_gettop (L);
   memset (k, 0, sizeof *k);
   memcpy (k->key, key, len);
   k->key_len = len;
   k->ttl_ms = 30000;
   k->min_hold_ms = 0;
   k->auto_renew = true;
   k->mode = mode;
   k->limit = limit;
   lua_createtable (L, 2, 0); /* ud + 1: user value */
   lua_pushvalue (L, 1);
   lua_rawseti (L, ud + 1, UV_CLIENT);
   if (lua_istable (L, 3)) {
      lua_getfield (L, 3, "ttl");
      if (!lua_isnil (L, -1)) {
         k->ttl_ms = check_seconds (L, -1, 1, fname, 2, "ttl", SECONDS_POSITIVE);
      }
      lua_getfield (L, 3, "min_hold");
      if (!lua_isnil (L, -1)) {
         k->min_hold_ms = check_seconds (L, -1, 1, fname, 2, "min_hold", SECONDS_NONNEGATIVE);
      }
      lua_settop (L, ud + 1);
      opt_bool (L, fname, "auto_renew", &k->auto_renew);
      opt_bool (L, fname, "fair", &k->fair);
      opt_bool (L, fname, "reentrant", &k->reentrant);
      opt_callback (L, fname, "on_lost", ud + 1, UV_ON_LOST);
      opt_callback (L, fname, "on_renew_failed", ud + 1, UV_ON_RENEW_FAILED);
   }
   lua_setuservalue (L, ud);
   luaL_setmetatable (L, LOCK_MT);
   return k;
}

/* client:lock(key [, {ttl=30, min_hold=0, auto_renew=true, on_lost=fn,
 *                     on_renew_failed=fn, fair=false, reentrant=false}]) */
static int client_lock (lua_State *L)
{
   static const char *const allowed[] = {
      "ttl", "min_hold", "auto_renew", "on_lost", "on_renew_failed", "fair", "reentrant", NULL
   };
   size_t len;
   const char *key;

   check_open_client (L, 1, 1, "lock");
   key = check_key (L, 2, 1, "lock", 1, "key", false, &len);
   check_opts (L, 3, 1, "lock", 2, allowed);
   lua_settop (L, 3);
   new_lock (L, "lock", key, len, LL_PLAIN, 0);
   return 1;
}

/* The options of client:semaphore and client:rwlock besides limit. */
#define MODE_OPTS "ttl", "min_hold", "auto_renew", "on_lost", "on_renew_failed", "fair"

/*
 * client:semaphore's and client:rwlock's key (at 2) and options (at 3):
 * the key must leave room for its records' longest suffix (max bytes in
 * all, modes.c), and reentrant is refused by name: each acquire is a
 * holder of its own, there is no hold to enter again.
 */
static const char *check_mode_args (lua_State *L,
                                    const char *fname,
                                    const char *what,
                                    size_t max,
                                    const char *const *allowed,
                                    size_t *len)
{
   const char *key;
   check_open_client (L, 1, 1, fname);
   key = check_key (L, 2, 1, fname, 1, "key", false, len);
   if (*len > max) {
      arg_error (L, 1, fname, 1,
                 "key must be at most %d bytes for a %s (its records add a suffix), got %d",
                 (int)max, what, (int)*len);
   }
   if (lua_istable (L, 3)) {
      lua_getfield (L, 3, "reentrant");
      if (!lua_isnil (L, -1)) {
         arg_error (L, 1, fname, 2,
                    "reentrant is not offered for a %s: each acquire is a holder of its own", what);
      }
      lua_pop (L, 1);
   }
   check_opts (L, 3, 1, fname, 2, allowed);
   lua_settop (L, 3);
   return key;
}

/* client:semaphore(key, {limit=N [, lock options but reentrant]}) -> a lock
 * object whose acquires each take one of N slots. */
static int client_semaphore (lua_State *L)
{
   static const char *const allowed[] = { "limit", MODE_OPTS, NULL };
   size_t len;
   const char *key =
     check_mode_args (L, "semaphore", "semaphore", LEASELOCK_KEY_MAX - 10, allowed, &len);
   lua_Number v;
   if (!lua_istable (L, 3)) {
      arg_error (L, 1, "semaphore", 2, "limit is required (an integer from 1 to %d)",
                 LEASELOCK_SEMAPHORE_MAX);
   }
   lua_getfield (L, 3, "limit");
   if (lua_type (L, -1) != LUA_TNUMBER) {
      arg_error (L, 1, "semaphore", 2, "limit must be an integer from 1 to %d, got %s",
                 LEASELOCK_SEMAPHORE_MAX, luaL_typename (L, -1));
   }
   v = lua_tonumber (L, -1);
   if (!(v >= 1 && v <= LEASELOCK_SEMAPHORE_MAX) || v != floor (v)) {
      arg_error (L, 1, "semaphore", 2, "limit must be an integer from 1 to %d, got %s",
                 LEASELOCK_SEMAPHORE_MAX, lua_tostring (L, -1));
   }
   lua_pop (L, 1);
   new_lock (L, "semaphore", key, len, LL_SEMAPHORE, (int64_t)v);
   return 1;
}

/* client:rwlock(key [, lock options but reentrant]) -> {key=, shared=lock,
 * exclusive=lock}: each side a lock object of its own. */
static int client_rwlock (lua_State *L)
{
   static const char *const allowed[] = { MODE_OPTS, NULL };
   size_t len;
   const char *key =
     check_mode_args (L, "rwlock", "read-write lock", LEASELOCK_KEY_MAX - 39, allowed, &len);
   lua_createtable (L, 0, 3); /* 4 */
   lua_pushlstring (L, key, len);
   lua_setfield (L, 4, "key");
   new_lock (L, "rwlock", key, len, LL_SHARED, 0);
   lua_setfield (L, 4, "shared");
   new_lock (L, "rwlock", key, len, LL_EXCLUSIVE, 0);
   lua_setfield (L, 4, "exclusive");
   return 1;
}

/* A record as a Lua table: key, owner (nil when released), fence,
 * expires_in (seconds by the database clock, <= 0 when expired), holder =
 * {host, pid, label}, holds (reentrant holds, 0 when released). */
static void push_record (lua_State *L, const leaselock_record_t *r)
{
   lua_createtable (L, 0, 6);
   lua_pushinteger (L, (lua_Integer)r->holds);
   lua_setfield (L, -2, "holds");
   lua_pushlstring (L, r->key, r->key_len);
   lua_setfield (L, -2, "key");
   if (r->owner[0]) {
      lua_pushstring (L, r->owner);
      lua_setfield (L, -2, "owner");
   }
   lua_pushinteger (L, (lua_Integer)r->fence);
   lua_setfield (L, -2, "fence");
   lua_pushnumber (L, (lua_Number)r->expires_in_ms / 1000.0);
   lua_setfield (L, -2, "expires_in");
   lua_createtable (L, 0, 3);
   lua_pushstring (L, r->host);
   lua_setfield (L, -2, "host");
   lua_pushinteger (L, (lua_Integer)r->pid);
   lua_setfield (L, -2, "pid");
   if (r->label[0]) {
      lua_pushstring (L, r->label);
      lua_setfield (L, -2, "label");
   }
   lua_setfield (L, -2, "holder");
}

/* client:info(key) -> record | nil (never used) | nil, msg, code */
static int client_info (lua_State *L)
{
   leaselock_client_t *client = check_open_client (L, 1, 1, "info");
   size_t len;
   const char *key = check_key (L, 2, 1, "info", 1, "key", false, &len);
   leaselock_record_t rec;
   leaselock_error_t err;
   bool found = false;

   bool ok = leaselock_inspect (client, key, len, &rec, &found, &err);
   drain_log (L, 1);
   if (!ok) {
      if (err.code == LEASELOCK_INVALID) {
         return raise_invalid (L, 1, "info", &err);
      }
      return push_failure (L, &err);
   }
   if (!found) {
      lua_pushnil (L);
      return 1;
   }
   push_record (L, &rec);
   return 1;
}

/* leaselock_list's callback runs on this thread with no connection held:
 * it appends each record to the list through a protected call, so that a
 * Lua error (out of memory) never unwinds through the core's frames. */
typedef struct
{
   lua_State *L;
   int append; /* stack index of append_record */
   int list;   /* stack index of the list */
   bool failed;
} ll_lua_list_t;

/* append_record(list, record) with the record a light userdata. */
static int append_record (lua_State *L)
{
   push_record (L, lua_touserdata (L, 2));
   lua_rawseti (L, 1, (int)lua_rawlen (L, 1) + 1);
   return 0;
}

static bool list_append (const leaselock_record_t *record, void *user_data)
{
   ll_lua_list_t *x = user_data;
   lua_pushvalue (x->L, x->append);
   lua_pushvalue (x->L, x->list);
   lua_pushlightuserdata (x->L, (void *)record);
   /* On failure the error stays on top, raised once the core returns. */
   x->failed = lua_pcall (x->L, 2, 0, 0) != 0;
   return !x->failed;
}

/* client:locks([prefix]) -> {record...} | nil, msg, code */
static int client_locks (lua_State *L)
{
   leaselock_client_t *client = check_open_client (L, 1, 1, "locks");
   size_t len = 0;
   const char *prefix = "";
   ll_lua_list_t x = { L, 3, 4, false };
   leaselock_error_t err;
   bool ok;

   if (!lua_isnoneornil (L, 2)) {
      prefix = check_key (L, 2, 1, "locks", 1, "prefix", true, &len);
   }
   lua_settop (L, 2);
   lua_pushcfunction (L, append_record); /* 3 */
   lua_newtable (L);                     /* 4 */
   luaL_checkstack (L, 4, "leaselock: locks");
   ok = leaselock_list (client, prefix, len, list_append, &x, &err);
   if (!x.failed) {
      drain_log (L, 1);
   }
   if (x.failed) {
      return lua_error (L);
   }
   if (!ok) {
      if (err.code == LEASELOCK_INVALID) {
         return raise_invalid (L, 1, "locks", &err);
      }
      return push_failure (L, &err);
   }
   return 1;
}

/* client:force_release(key) -> true, took | nil, msg, code */
static int client_force_release (lua_State *L)
{
   leaselock_client_t *client = check_open_client (L, 1, 1, "force_release");
   size_t len;
   const char *key = check_key (L, 2, 1, "force_release", 1, "key", false, &len);
   leaselock_error_t err;
   bool took = false;

   bool ok = leaselock_force_release (client, key, len, &took, &err);
   drain_log (L, 1);
   if (!ok) {
      if (err.code == LEASELOCK_INVALID) {
         return raise_invalid (L, 1, "force_release", &err);
      }
      return push_failure (L, &err);
   }
   lua_pushboolean (L, 1);
   lua_pushboolean (L, took);
   return 2;
}

/* client:prune([prefix [, older_than]]) -> count | nil, msg, code: deletes
 * the free records whose key starts with prefix, expired at least
 * older_than seconds ago (default 0) by the database clock. */
static int client_prune (lua_State *L)
{
   leaselock_client_t *client = check_open_client (L, 1, 1, "prune");
   size_t len = 0;
   const char *prefix = "";
   int64_t older_ms = 0, count = 0;
   leaselock_error_t err;

   if (!lua_isnoneornil (L, 2)) {
      prefix = check_key (L, 2, 1, "prune", 1, "prefix", true, &len);
   }
   if (!lua_isnoneornil (L, 3)) {
      older_ms = check_seconds (L, 3, 1, "prune", 2, "older_than", SECONDS_NONNEGATIVE);
   }
   if (!leaselock_prune (client, prefix, len, older_ms, &count, &err)) {
      if (err.code == LEASELOCK_INVALID) {
         return raise_invalid (L, 1, "prune", &err);
      }
      return push_failure (L, &err);
   }
   lua_pushinteger (L, (lua_Integer)count);
   return 1;
}

/* client.uri, client.backend, then the methods. */
static int client_index (lua_State *L)
{
   ll_lua_client_t *c = check_client (L, 1, 1, "__index");
   lua_pushvalue (L, 2);
   lua_rawget (L, lua_upvalueindex (1));
   if (!lua_isnil (L, -1) || lua_type (L, 2) != LUA_TSTRING) {
      return 1;
   }
   if (c->client && strcmp (lua_tostring (L, 2), "uri") == 0) {
      lua_pushstring (L, leaselock_client_uri (c->client));
   } else if (c->client && strcmp (lua_tostring (L, 2), "backend") == 0) {
      lua_pushstring (L, leaselock_client_backend (c->client));
   } else {
      lua_pushnil (L);
   }
   return 1;
}

/* ---- lock ----------------------------------------------------------- */

static int lock_tostring (lua_State *L)
{
   ll_lua_lock_t *k = check_lock (L, 1, 1, "__tostring");
   static const char *const kinds[] = { "", "semaphore, ", "shared, ", "exclusive, " };
   lua_pushliteral (L, LOCK_MT " (");
   lua_pushstring (L, kinds[k->mode]);
   lua_pushliteral (L, "key=");
   lua_pushlstring (L, k->key, k->key_len);
   if (k->mode == LL_SEMAPHORE)
      lua_pushfstring (L, ", limit=%d", (int)k->limit);
   else
      lua_pushliteral (L, "");
   lua_pushfstring (L, ", ttl=%f s): %p", (lua_Number)k->ttl_ms / 1000.0, (void *)k);
   lua_concat (L, 6);
   return 1;
}

static int lock_index (lua_State *L)
{
   ll_lua_lock_t *k = check_lock (L, 1, 1, "__index");
   lua_pushvalue (L, 2);
   lua_rawget (L, lua_upvalueindex (1));
   if (lua_isnil (L, -1) && lua_type (L, 2) == LUA_TSTRING) {
      static const char *const modes[] = { "lock", "semaphore", "shared", "exclusive" };
      const char *name = lua_tostring (L, 2);
      if (strcmp (name, "key") == 0) {
         lua_pushlstring (L, k->key, k->key_len);
      } else if (strcmp (name, "mode") == 0) {
         lua_pushstring (L, modes[k->mode]);
      } else if (strcmp (name, "limit") == 0 && k->mode == LL_SEMAPHORE) {
         lua_pushinteger (L, (lua_Integer)k->limit);
      }
   }
   return 1;
}

/*
 * Pushes the lock's user value, its client handle (at *client_idx; its
 * client in *client) and a new lease handle, closed (it exists before the
 * lease does, so a memory error leaks nothing), whose user value holds the
 * client and the lock's callbacks. The lock is at 1; raises if its client
 * is closed.
 */
static ll_lua_lease_t *push_lease_handle (lua_State *L,
                                          int level,
                                          const char *fname,
                                          int *client_idx,
                                          leaselock_client_t **client)
{
   ll_lua_lease_t *ls;
   lua_getuservalue (L, 1);
   lua_rawgeti (L, -1, UV_CLIENT);
   *client_idx = lua_gettop (L);
   *client = check_open_client (L, *client_idx, level, fname);

   ls = lua_newuserdata (L, sizeof *ls);
   memset (ls, 0, sizeof *ls);
   luaL_setmetatable (L, LEASE_MT);
   lua_createtable (L, 2, 0);
   lua_pushvalue (L, -3); /* the client */
   lua_rawseti (L, -2, UV_CLIENT);
   lua_rawgeti (L, -4, UV_ON_LOST);
   lua_rawseti (L, -2, UV_ON_LOST);
   lua_rawgeti (L, -4, UV_ON_RENEW_FAILED);
   lua_rawseti (L, -2, UV_ON_RENEW_FAILED);
   lua_setuservalue (L, -2);
   return ls;
}

/* The lease handle ls takes lease (owned from now on). */
static void lease_handle_set (ll_lua_lease_t *ls, leaselock_lease_t *lease)
{
   ls->lease = lease;
   ls->fence = leaselock_lease_fence (lease);
   strncpy (ls->owner, leaselock_lease_owner (lease), LEASELOCK_OWNER_LEN);
   /* The record's key: a mode's holder holds key/.slot/<i> and the like. */
   ls->key_len = leaselock_lease_key_len (lease);
   memcpy (ls->key, leaselock_lease_key (lease), ls->key_len);
}

/* Whether leases of the lock at 1 report renewal failures to Lua. */
static bool wants_renew_failed (lua_State *L, const ll_lua_lock_t *k)
{
   bool yes;
   lua_getuservalue (L, 1);
   lua_rawgeti (L, -1, UV_ON_RENEW_FAILED);
   yes = lua_isfunction (L, -1) && k->auto_renew;
   lua_pop (L, 2);
   return yes;
}

/*
 * The acquire shared by acquire, try_acquire and with. timeout_ms: the
 * wait. Leaves the lease handle on top and returns 1, or pushes
 * nil, msg, code and returns 3.
 */
/* The lease the running coroutine took through the lock at index 1 and
 * still holds, pushed; nothing pushed (0) when there is none. */
static int push_my_lease (lua_State *L)
{
   lua_getuservalue (L, 1);
   lua_rawgeti (L, -1, UV_HELD);
   if (!lua_istable (L, -1)) {
      lua_pop (L, 2);
      return 0;
   }
   lua_pushthread (L);
   lua_rawget (L, -2);
   ll_lua_lease_t *ls = luaL_testudata (L, -1, LEASE_MT);
   if (!ls || !ls->lease || leaselock_lease_state (ls->lease) != LEASELOCK_STATE_HELD) {
      lua_pop (L, 3);
      return 0;
   }
   lua_replace (L, -3);
   lua_pop (L, 1);
   return 1;
}

/* Remembers the lease at the top as the running coroutine's through the
 * lock at index 1 (a table with weak keys: a finished coroutine goes). */
static void set_my_lease (lua_State *L)
{
   lua_getuservalue (L, 1);
   lua_rawgeti (L, -1, UV_HELD);
   if (!lua_istable (L, -1)) {
      lua_pop (L, 1);
      lua_createtable (L, 0, 1);
      lua_createtable (L, 0, 1);
      lua_pushliteral (L, "k");
      lua_setfield (L, -2, "__mode");
      lua_setmetatable (L, -2);
      lua_pushvalue (L, -1);
      lua_rawseti (L, -3, UV_HELD);
   }
   lua_pushthread (L);
   lua_pushvalue (L, -4);
   lua_rawset (L, -3);
   lua_pop (L, 2);
}

/* The running coroutine asks again for a lock it holds: with reentrant,
 * one more hold of the same lease (pushed: 1 result, or 3 on failure);
 * without, an error (it would wait for itself). 0 when it holds none. */
static int acquire_again (lua_State *L, ll_lua_lock_t *k, int level, const char *fname)
{
   if (!push_my_lease (L))
      return 0;
   if (!k->reentrant) {
      luaL_where (L, level);
      lua_pushfstring (L, "%s: \"%s\" is already held by this coroutine through this lock (%s)",
                       fname, k->key,
                       k->mode == LL_PLAIN ? "pass reentrant = true to enter it again"
                                           : "the exclusive side of a read-write lock is not "
                                             "reentrant");
      lua_concat (L, 2);
      return lua_error (L);
   }
   ll_lua_lease_t *ls = lua_touserdata (L, -1);
   leaselock_error_t err;
   if (!leaselock_lease_reenter (ls->lease, &err)) {
      if (err.code == LEASELOCK_UNSUPPORTED)
         return luaL_error (L, "%s: %s", fname, err.message);
      lua_pop (L, 1);
      return push_failure (L, &err);
   }
   return 1;
}

/* The core's acquire for the lock's mode. */
static bool mode_acquire (leaselock_client_t *client,
                          const ll_lua_lock_t *k,
                          const leaselock_acquire_opts_t *o,
                          leaselock_lease_t **lease,
                          leaselock_error_t *err)
{
   switch (k->mode) {
      case LL_SEMAPHORE:
         return leaselock_semaphore_acquire (client, k->key, k->key_len, k->limit, o, lease, err);
      case LL_SHARED:
         return leaselock_rwlock_acquire (client, k->key, k->key_len, LEASELOCK_SHARED, o, lease,
                                          err);
      case LL_EXCLUSIVE:
         return leaselock_rwlock_acquire (client, k->key, k->key_len, LEASELOCK_EXCLUSIVE, o, lease,
                                          err);
      default:
         return leaselock_acquire (client, k->key, k->key_len, o, lease, err);
   }
}

static int do_acquire (lua_State *L,
                       ll_lua_lock_t *k,
                       int level,
                       const char *fname,
                       int64_t timeout_ms)
{
   ll_lua_lease_t *ls;
   leaselock_client_t *client;
   leaselock_acquire_opts_t o;
   leaselock_error_t err;
   leaselock_lease_t *lease = NULL;
   int client_idx;
   bool ok;

   /* A semaphore's slot and a shared hold are holders of their own: the
    * coroutine may take another, so only a plain or exclusive lock it
    * holds is asked again. */
   bool one_holder = k->mode == LL_PLAIN || k->mode == LL_EXCLUSIVE;
   int again = one_holder ? acquire_again (L, k, level, fname) : 0;
   if (again > 0)
      return again;
   ls = push_lease_handle (L, level, fname, &client_idx, &client);
   leaselock_acquire_opts_init (&o);
   o.ttl_ms = k->ttl_ms;
   o.min_hold_ms = k->min_hold_ms;
   o.auto_renew = k->auto_renew;
   o.fair = k->fair;
   o.timeout_ms = timeout_ms;
   /* No on_lost callback: the state is read on the Lua side (see top);
    * on_renew_failed only records (see renew_failed_hook). */
   if (wants_renew_failed (L, k)) {
      ls->rf = rf_new ();
      if (!ls->rf) {
         return luaL_error (L, "%s: out of memory", fname);
      }
      o.on_renew_failed = renew_failed_hook;
      o.on_renew_failed_data = ls->rf;
   }
   ok = mode_acquire (client, k, &o, &lease, &err);
   drain_log (L, client_idx);
   if (!ok) {
      renew_failed_free (ls);
      if (err.code == LEASELOCK_INVALID) {
         return raise_invalid (L, level, fname, &err);
      }
      return push_failure (L, &err);
   }
   lease_handle_set (ls, lease);
   lua_settop (L, client_idx + 1);
   if (one_holder)
      set_my_lease (L);
   return 1;
}

static int64_t acquire_timeout (lua_State *L, int idx, int level, const char *fname, int arg)
{
   static const char *const allowed[] = { "timeout", NULL };
   int64_t timeout_ms = -1;
   check_opts (L, idx, level, fname, arg, allowed);
   if (lua_istable (L, idx)) {
      lua_getfield (L, idx, "timeout");
      if (!lua_isnil (L, -1)) {
         timeout_ms = check_seconds (L, -1, level, fname, arg, "timeout", SECONDS_TIMEOUT);
      }
      lua_pop (L, 1);
   }
   return timeout_ms;
}

/* lock:acquire([{timeout=nil}]) -> lease | nil, msg, code */
static int lock_acquire (lua_State *L)
{
   ll_lua_lock_t *k = check_lock (L, 1, 1, "acquire");
   int64_t timeout_ms = acquire_timeout (L, 2, 1, "acquire", 1);
   lua_settop (L, 1);
   return do_acquire (L, k, 1, "acquire", timeout_ms);
}

/* lock:try_acquire() -> lease | nil, "busy", "BUSY" */
static int lock_try_acquire (lua_State *L)
{
   ll_lua_lock_t *k = check_lock (L, 1, 1, "try_acquire");
   lua_settop (L, 1);
   return do_acquire (L, k, 1, "try_acquire", 0);
}

/* The first half of lock:with, called by the Lua part below (so errors
 * point two levels up): with_begin(lock, fn, opts) -> lease | nil, msg, code */
static int lock_with_begin (lua_State *L)
{
   ll_lua_lock_t *k = check_lock (L, 1, 2, "with");
   int64_t timeout_ms;
   if (lua_type (L, 2) != LUA_TFUNCTION) {
      arg_error (L, 2, "with", 1, "function expected, got %s", luaL_typename (L, 2));
   }
   timeout_ms = acquire_timeout (L, 3, 2, "with", 2);
   lua_settop (L, 1);
   return do_acquire (L, k, 2, "with", timeout_ms);
}

/* ---- lease ---------------------------------------------------------- */

/*
 * Reports an error raised by on_lost (on top of the stack, popped): as a
 * warning on Lua 5.4 (like an error in __gc; shown once warnings are on,
 * `lua -W` or warn("@on")), on stderr on 5.1/LuaJIT (nginx: the error log).
 * on_lost runs from held(), lost(), renew(), release(), __close and the end
 * of lock:with: its error must not replace what those return or raise.
 * A function set with leaselock.on_warning receives the text instead.
 */
static void report_callback_error (lua_State *L, const char *what)
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

/* Calls the lease's on_lost(lease), protected. */
static void call_on_lost (lua_State *L, int idx)
{
   idx = lua_absindex (L, idx);
   lua_getuservalue (L, idx);
   lua_rawgeti (L, -1, UV_ON_LOST);
   lua_remove (L, -2);
   if (!lua_isfunction (L, -1)) {
      lua_pop (L, 1);
      return;
   }
   lua_pushvalue (L, idx);
   if (lua_pcall (L, 1, 0, 0) != 0) {
      report_callback_error (L, "on_lost");
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
   pthread_mutex_lock (&ls->rf->mu);
   got = *ls->rf;
   ls->rf->pending = 0;
   pthread_mutex_unlock (&ls->rf->mu);
   if (!got.pending) {
      return;
   }
   idx = lua_absindex (L, idx);
   lua_getuservalue (L, idx);
   lua_rawgeti (L, -1, UV_ON_RENEW_FAILED);
   lua_remove (L, -2);
   if (!lua_isfunction (L, -1)) {
      lua_pop (L, 1);
      return;
   }
   lua_pushvalue (L, idx);
   lua_pushstring (L, got.message);
   lua_pushstring (L, leaselock_code_name (got.code));
   lua_pushnumber (L, (lua_Number)got.remaining_ms / 1000.0);
   if (lua_pcall (L, 4, 0, 0) != 0) {
      report_callback_error (L, "on_renew_failed");
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
      drain_from (L, idx);
   }
   return st;
}

/* The one close path of __gc, __close and lock:with: releases if still
 * held (errors ignored), stops renewal, frees. Idempotent. */
static void lease_close (ll_lua_lease_t *ls)
{
   if (ls->lease) {
      ls->closed_lost = lease_state (ls) == LEASELOCK_STATE_LOST;
      leaselock_lease_destroy (ls->lease); /* no callback runs after it */
      ls->lease = NULL;
   }
   renew_failed_free (ls);
}

/* A reentered lease (more than one hold) at the end of an inner with or
 * <close>: lets that one hold go and keeps the lease open for the outer
 * ones. False (nothing done) for a lease with one hold or none. */
static bool let_inner_hold_go (ll_lua_lease_t *ls, bool *ok, leaselock_error_t *err)
{
   if (!ls->lease || leaselock_lease_holds (ls->lease) < 2)
      return false;
   *ok = leaselock_lease_release (ls->lease, err);
   return true;
}

static int lease_gc (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "__gc", false);
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
   if (!newly_lost && let_inner_hold_go (ls, &ok, &err)) {
      return 0; /* errors ignored, as lease_close's */
   }
   lease_close (ls);
   if (newly_lost) {
      call_on_lost (L, 1);
   }
   return 0;
}

/*
 * The second half of lock:with: finish(lease) -> true | nil, msg, code.
 * Closes the lease in every case.
 *  - fn released the lease itself (state RELEASED, whatever its release
 *    returned to it): nothing left to do; true, so with returns fn's results.
 *  - the lease was lost while fn ran: nil, msg, "LOST".
 *  - otherwise with releases it, and a failed release is with's failure:
 *    NOT_HELD (taken over, or fn closed the client) or BACKEND. After a
 *    BACKEND error the lock's state is unknown (the release may or may not
 *    have landed; the lease expires by its TTL anyway), so with returns
 *    nil, msg, "BACKEND" rather than fn's results: a caller that needs
 *    them keeps them in an upvalue.
 */
static int lease_with_finish (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 2, "with", false);
   leaselock_error_t err;
   bool seen = ls->lost_seen, newly_lost = false, released = true;

   if (let_inner_hold_go (ls, &released, &err)) {
      if (!released) {
         return push_failure (L, &err);
      }
      lua_pushboolean (L, 1);
      return 1;
   }
   if (ls->lease) {
      leaselock_state_t st = observe (L, 1, ls, false);
      if (st == LEASELOCK_STATE_LOST) {
         newly_lost = !seen;
      } else if (st != LEASELOCK_STATE_RELEASED) {
         released = leaselock_lease_release (ls->lease, &err);
      }
      lease_close (ls);
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
   if (!released) {
      return push_failure (L, &err);
   }
   lua_pushboolean (L, 1);
   return 1;
}

static const char *state_name (leaselock_state_t st, bool open)
{
   switch (st) {
      case LEASELOCK_STATE_HELD:
         return "held";
      case LEASELOCK_STATE_LOST:
         return open ? "lost" : "lost, closed";
      case LEASELOCK_STATE_CLOSED:
         return "client closed";
      case LEASELOCK_STATE_RELEASED:
      default:
         return open ? "released" : "closed";
   }
}

/* The core's state names: lease:state(). */
static const char *core_state_name (leaselock_state_t st)
{
   switch (st) {
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

/* lease:held() -> boolean (false once released, lost, or its client closed) */
static int lease_held (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "held", false);
   lua_pushboolean (L, observe (L, 1, ls, true) == LEASELOCK_STATE_HELD);
   return 1;
}

/* lease:holds() -> reentrant holds: 1 once acquired, one more per re-entry,
 * 0 once released or lost */
static int lease_holds (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "holds", false);
   observe (L, 1, ls, true);
   lua_pushinteger (L, ls->lease ? (lua_Integer)leaselock_lease_holds (ls->lease) : 0);
   return 1;
}

/* lease:state() -> "held" | "released" | "lost" | "closed" (held when its
 * client was closed without releasing it) */
static int lease_state_method (lua_State *L)
{
   ll_lua_lease_t *h = check_lease (L, 1, 1, "state", false);
   lua_pushstring (L, core_state_name (observe (L, 1, h, true)));
   return 1;
}

/* lease:lost() -> boolean */
static int lease_lost (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "lost", false);
   lua_pushboolean (L, observe (L, 1, ls, true) == LEASELOCK_STATE_LOST);
   return 1;
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
      ttl_ms = check_seconds (L, 2, 1, "renew", 1, "ttl", SECONDS_POSITIVE);
   }
   if (!lua_isnoneornil (L, 3)) {
      hold_ms = check_seconds (L, 3, 1, "renew", 2, "min_hold", SECONDS_NONNEGATIVE);
   }
   ok = leaselock_lease_extend (ls->lease, ttl_ms, hold_ms, &err);
   observe (L, 1, ls, true);
   if (!ok) {
      if (err.code == LEASELOCK_INVALID) {
         return raise_invalid (L, 1, "renew", &err);
      }
      return push_failure (L, &err);
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
      return push_failure (L, &err);
   }
   lua_pushboolean (L, 1);
   return 1;
}

/* lease.key, lease.owner, lease.fence, then the methods. */
static int lease_index (lua_State *L)
{
   ll_lua_lease_t *ls = check_lease (L, 1, 1, "__index", false);
   const char *name;
   lua_pushvalue (L, 2);
   lua_rawget (L, lua_upvalueindex (1));
   if (!lua_isnil (L, -1) || lua_type (L, 2) != LUA_TSTRING) {
      return 1;
   }
   name = lua_tostring (L, 2);
   if (strcmp (name, "key") == 0) {
      lua_pushlstring (L, ls->key, ls->key_len);
   } else if (strcmp (name, "owner") == 0) {
      lua_pushstring (L, ls->owner);
   } else if (strcmp (name, "fence") == 0) {
      lua_pushinteger (L, (lua_Integer)ls->fence);
   } else {
      lua_pushnil (L);
   }
   return 1;
}

/* ---- lock:with (Lua part) ------------------------------------------- */

/*
 * Written in Lua so that fn may yield (coroutine schedulers, OpenResty
 * cosockets after a try): pcall is yieldable in Lua 5.4 and LuaJIT, a
 * C-level lua_pcall is not. fn's error is re-raised unchanged after the
 * release; the lease handle is closed before with returns.
 */
static const char with_source[] = "local begin, finish = ...\n"
                                  "local pcall, error = pcall, error\n"
                                  "local function done(lease, ok, ...)\n"
                                  "  local fok, fmsg, fcode = finish(lease)\n"
                                  "  if not ok then error((...), 0) end\n"
                                  "  if not fok then return nil, fmsg, fcode end\n"
                                  "  return ...\n"
                                  "end\n"
                                  "return function(self, fn, opts)\n"
                                  "  local lease, msg, code = begin(self, fn, opts)\n"
                                  "  if not lease then return nil, msg, code end\n"
                                  "  return done(lease, pcall(fn, lease))\n"
                                  "end\n";

/*
 * lock:acquire_nb([opts]): the waiting acquire for OpenResty. Between
 * tries it sleeps with ngx.sleep (or opts.sleep), so a waiting request
 * yields to the worker's event loop. A try on SQLite (or outside nginx)
 * is a one-try acquire made here (one short local statement); under
 * OpenResty a try on a server backend runs in a thread of the pool
 * opts.pool (ngx.run_worker_thread; see the registry above), so its round
 * trip does not block the event loop either. A C function cannot yield
 * across ngx.sleep or ngx.run_worker_thread, so the loop is Lua
 * (acquire_nb_source below), closed over the C halves of a try:
 * lock_try_nb, lock_plan_nb and lock_adopt_nb. They are called from the
 * loop's `try`, two Lua frames below acquire_nb's caller: their errors
 * point three levels up.
 */
/* acquire_nb takes plain locks only: a mode's acquire is several
 * statements (and, for a writer, a wait for the readers) that one try in
 * a pool thread would not cover. */
static ll_lua_lock_t *check_plain_nb (lua_State *L)
{
   ll_lua_lock_t *k = check_lock (L, 1, 3, "acquire_nb");
   if (k->mode != LL_PLAIN) {
      luaL_where (L, 3);
      lua_pushstring (L, "acquire_nb: not offered for semaphores and read-write locks (use "
                         "acquire or try_acquire)");
      lua_concat (L, 2);
      lua_error (L);
   }
   return k;
}

static int lock_try_nb (lua_State *L)
{
   ll_lua_lock_t *k = check_plain_nb (L);
   lua_settop (L, 1);
   return do_acquire (L, k, 3, "acquire_nb", 0);
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
      arg_error (L, level, fname, arg, "%s: number expected, got %s", what, luaL_typename (L, idx));
   }
   v = (double)lua_tonumber (L, idx);
   if (!(v >= 1 && v <= 9007199254740992.0) || v != floor (v)) {
      arg_error (L, level, fname, arg, "%s must be an integer from 1 to 2^53", what);
   }
   return (uint64_t)v;
}

/* Milliseconds as _pool_try takes them: an integer lo .. 30 days. */
static int64_t check_ms (lua_State *L, int idx, int arg, const char *what, int64_t lo)
{
   double v;
   if (lua_type (L, idx) != LUA_TNUMBER) {
      arg_error (L, 1, "_pool_try", arg, "%s: number expected, got %s", what,
                 luaL_typename (L, idx));
   }
   v = (double)lua_tonumber (L, idx);
   if (!(v >= (double)lo && v <= (double)LEASELOCK_TTL_MAX_MS) || v != floor (v)) {
      /* lua_pushfstring's %d is an int: 30 days in ms is not. */
      char max[32];
      snprintf (max, sizeof max, "%lld", (long long)LEASELOCK_TTL_MAX_MS);
      arg_error (L, 1, "_pool_try", arg, "%s must be an integer from %d to %s", what, (int)lo, max);
   }
   return (int64_t)v;
}

static bool check_bool (lua_State *L, int idx, int arg, const char *what)
{
   if (lua_type (L, idx) != LUA_TBOOLEAN) {
      arg_error (L, 1, "_pool_try", arg, "%s: boolean expected, got %s", what,
                 luaL_typename (L, idx));
   }
   return lua_toboolean (L, idx);
}

/*
 * acquire_nb's plan for one try of the lock at 1: nothing when the try is
 * made here (SQLite: one short local statement), else the arguments of
 * leaselock._pool_try for a pool thread: client id, key, ttl_ms,
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
   check_open_client (L, 3, 3, "acquire_nb");
   c = lua_touserdata (L, 3);
   /* SQLite (instant), and a lock this coroutine holds already (entered
    * again, or refused, by the one try on the worker): no pool thread. */
   if (strcmp (leaselock_client_backend (c->client), "sqlite") == 0 || push_my_lease (L)) {
      return 0;
   }
   sc = shared_of (c);
   if (!sc) {
      return luaL_error (L, "acquire_nb: out of memory");
   }
   lua_pushinteger (L, (lua_Integer)sc->id);
   lua_pushlstring (L, k->key, k->key_len);
   lua_pushinteger (L, (lua_Integer)k->ttl_ms);
   lua_pushinteger (L, (lua_Integer)k->min_hold_ms);
   lua_pushboolean (L, k->auto_renew);
   lua_pushboolean (L, wants_renew_failed (L, k));
   return 6;
}

/*
 * leaselock._pool_try(client_id, key, ttl_ms, min_hold_ms, auto_renew,
 * on_renew_failed) -> parked_id | nil, msg, code. What lock:acquire_nb
 * runs in a pool thread (ngx.run_worker_thread): one one-try acquire on
 * the registered client (blocking this thread only), the lease parked for
 * the request to adopt. First it reaps the parked leases nobody adopted.
 * Not for direct use; arguments are checked all the same.
 */
static int l_pool_try (lua_State *L)
{
   uint64_t cid = check_id (L, 1, 1, "_pool_try", 1, "client id"), id;
   size_t len;
   const char *key = check_key (L, 2, 1, "_pool_try", 2, "key", false, &len);
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
   reap_parked (NULL, PARKED_MAX_MS);
   sc = shared_get (cid);
   if (!sc) {
      arg_error (L, 1, "_pool_try", 1, "no " CLIENT_MT " has this id");
   }
   if (want_rf && o.auto_renew) {
      if (!(rf = rf_new ())) {
         shared_put (sc);
         return luaL_error (L, "_pool_try: out of memory");
      }
      o.on_renew_failed = renew_failed_hook;
      o.on_renew_failed_data = rf;
   }
   if (!leaselock_acquire (sc->client, key, len, &o, &lease, &err)) {
      rf_free (rf);
      shared_put (sc);
      return push_failure (L, &err);
   }
   id = park (sc, lease, rf, &err);
   shared_put (sc);
   if (!id) {
      return push_failure (L, &err);
   }
   lua_pushinteger (L, (lua_Integer)id);
   return 1;
}

/* leaselock._pool_reap() -> the count of leases still parked. What
 * acquire_nb's timer runs in a pool thread: releases the parked leases
 * nobody adopted once PARKED_MAX_MS old. Not for direct use. */
static int l_pool_reap (lua_State *L)
{
   ll_parked_t *pk;
   lua_Integer n = 0;
   reap_parked (NULL, PARKED_MAX_MS);
   pthread_mutex_lock (&reg_mu);
   for (pk = reg_parked; pk; pk = pk->next) {
      n++;
   }
   pthread_mutex_unlock (&reg_mu);
   lua_pushinteger (L, n);
   return 1;
}

/*
 * acquire_nb's end of a try in the pool: adopt(lock, parked_id) -> the
 * parked lease in a lease handle, as do_acquire makes it, | nil, "busy",
 * "BUSY" if it is no longer there (reaped while the worker was too busy to
 * adopt it, or released by a close: a busy try, the wait goes on).
 */
static int lock_adopt_nb (lua_State *L)
{
   check_lock (L, 1, 3, "acquire_nb");
   uint64_t id = check_id (L, 2, 3, "acquire_nb", 1, "parked lease id");
   ll_lua_client_t *c;
   ll_lua_lease_t *ls;
   leaselock_client_t *client;
   leaselock_lease_t *lease;
   ll_lua_renew_failed_t *rf;
   int client_idx;

   lua_settop (L, 1);
   ls = push_lease_handle (L, 3, "acquire_nb", &client_idx, &client);
   c = lua_touserdata (L, client_idx);
   if (!c->shared || !unpark (id, c->shared, &lease, &rf)) {
      lua_pushnil (L);
      lua_pushliteral (L, "busy");
      lua_pushstring (L, leaselock_code_name (LEASELOCK_BUSY));
      return 3;
   }
   ls->rf = rf;
   lease_handle_set (ls, lease);
   drain_log (L, client_idx);
   lua_settop (L, client_idx + 1);
   set_my_lease (L);
   return 1;
}

/* The knobs are lua-resty-lock's: timeout (seconds slept in all, default
 * 5; 0 tries once; math.huge waits forever), step (the first sleep,
 * default 0.001), ratio (each sleep is the last times ratio, default 2),
 * max_step (the longest sleep, default 0.5); and pool, the nginx thread
 * pool of the tries on a server backend (default "default"). A pool with
 * no room for a try now (its queue full, or no free Lua VM) counts as a
 * busy try. */
static const char acquire_nb_source[] =
  "local try_here, plan, adopt = ...\n"
  /* ngx is read when called, not captured: a test outside nginx may set it */
  "local type, error, pairs, tostring = type, error, pairs, tostring\n"
  "local min, max, huge, fmt = math.min, math.max, math.huge, string.format\n"
  "local known = { timeout = true, step = true, ratio = true, max_step = true, sleep = true,\n"
  "                pool = true }\n"
  "local full = { ['no available Lua vm'] = true, ['ngx_thread_task_post failed'] = true }\n"
  "local function bad(msg, level) error(\"bad argument #1 to 'acquire_nb' (\" .. msg .. \")\", "
  "level or 3) end\n"
  "local function num(opts, name, default, lo, lo_ok, allow_huge)\n"
  "  local v = opts[name]\n"
  "  if v == nil then return default end\n"
  "  if type(v) ~= 'number' then bad(fmt('%s: number expected, got %s', name, type(v)), 4) end\n"
  "  if v ~= v or (v == huge and not allow_huge) or v == -huge\n"
  "     or v < lo or (v == lo and not lo_ok) then\n"
  "    bad(fmt('%s must be a finite number %s %s, got %s', name, lo_ok and '>=' or '>', lo,\n"
  "            tostring(v)), 4)\n"
  "  end\n"
  "  return v\n"
  "end\n"
  /* A parked lease nobody adopts waits for a pool thread to release it:
   * the next try's, else this timer's, armed before each try (an ended
   * request's never comes back) while leases stay parked; it stops when
   * the worker exits (the client's collection releases them then). */
  "local reaping = false\n"
  "local function reap(premature, pool)\n"
  "  if not premature then\n"
  "    local ok, left = ngx.run_worker_thread(pool, 'leaselock', '_pool_reap')\n"
  "    if (ok and left > 0 or not ok and full[left]) and ngx.timer.at(5, reap, pool) then\n"
  "      return\n"
  "    end\n"
  "  end\n"
  "  reaping = false\n"
  "end\n"
  "local function arm_reaper(pool)\n"
  "  if not reaping and type(ngx.timer) == 'table' then\n"
  "    reaping = ngx.timer.at(6, reap, pool) and true or false\n"
  "  end\n"
  "end\n"
  /* One try: lease | nil, msg, code; code 'FULL' when the pool had no
   * room for it. No tail calls: errors count their levels from here. */
  "local function try(self, pool)\n"
  "  local cid, key, ttl, hold, renew, rf\n"
  "  if pool then cid, key, ttl, hold, renew, rf = plan(self) end\n"
  "  if not cid then\n"
  "    local lease, msg, code = try_here(self)\n"
  "    return lease, msg, code\n"
  "  end\n"
  "  local run = ngx.run_worker_thread\n"
  "  if type(run) ~= 'function' then\n"
  "    error('acquire_nb: no ngx.run_worker_thread (lua-nginx-module >= 0.10.21, nginx with '\n"
  "          .. 'threads)', 3)\n"
  "  end\n"
  "  arm_reaper(pool)\n"
  "  local ok, id, msg, code = run(pool, 'leaselock', '_pool_try', cid, key, ttl, hold, renew, "
  "rf)\n"
  "  if not ok then\n"
  "    if full[id] then return nil, fmt('thread pool %q has no room (%s)', pool, id), 'FULL' end\n"
  "    if type(id) == 'string' and id:find('not found', 1, true) then\n"
  "      bad(fmt('pool: no thread pool %q (nginx.conf, main context: thread_pool %s threads=4;)',\n"
  "              pool, pool), 4)\n"
  "    end\n"
  "    error(fmt('acquire_nb: thread pool %q: %s', pool, tostring(id)), 3)\n"
  "  end\n"
  "  if id == nil then\n"
  "    if code == 'INVALID' then error('acquire_nb: ' .. tostring(msg), 3) end\n"
  "    return nil, msg, code\n"
  "  end\n"
  "  local lease, m, c = adopt(self, id)\n"
  "  return lease, m, c\n"
  "end\n"
  "local function waits(lease, code) return not lease and (code == 'BUSY' or code == 'FULL') end\n"
  "local function timed_out(self, waited, msg, code)\n"
  "  return nil, fmt('timed out after %.3f s waiting for %q (%s)', waited, self.key,\n"
  "                  code == 'FULL' and msg or 'held by another owner'), 'TIMEOUT'\n"
  "end\n"
  /* Under nginx the wait is bounded by the clock too: a try in the pool
   * takes a round trip, more when the pool is busy. */
  "local function clock()\n"
  "  if type(ngx) == 'table' and type(ngx.now) == 'function' then\n"
  "    ngx.update_time()\n"
  "    return ngx.now()\n"
  "  end\n"
  "end\n"
  "return function(self, opts)\n"
  "  if opts == nil then opts = {} end\n"
  "  if type(opts) ~= 'table' then bad('table expected, got ' .. type(opts)) end\n"
  "  for k in pairs(opts) do\n"
  "    if not known[k] then bad('unknown option ' .. fmt('%q', tostring(k))) end\n"
  "  end\n"
  "  local timeout = num(opts, 'timeout', 5, 0, true, true)\n"
  "  if timeout ~= huge and timeout > 30 * 86400 then\n"
  "    bad(fmt('timeout must be at most 30 days or math.huge, got %s', tostring(timeout)))\n"
  "  end\n"
  "  local step = num(opts, 'step', 0.001, 0, false)\n"
  "  local ratio = num(opts, 'ratio', 2, 1, true)\n"
  "  local max_step = num(opts, 'max_step', 0.5, 0, false)\n"
  "  local sleep = opts.sleep\n"
  "  if sleep == nil then sleep = type(ngx) == 'table' and ngx.sleep or nil end\n"
  "  if sleep == nil then\n"
  "    bad('sleep: no ngx.sleep outside OpenResty; pass a sleep function')\n"
  "  elseif type(sleep) ~= 'function' then\n"
  "    bad('sleep: function expected, got ' .. type(sleep))\n"
  "  end\n"
  "  local pool = opts.pool\n"
  "  if pool == nil then pool = 'default'\n"
  "  elseif type(pool) ~= 'string' then bad('pool: string expected, got ' .. type(pool)) end\n"
  "  if type(ngx) ~= 'table' then pool = nil end\n"
  "  local started = clock()\n"
  "  local lease, msg, code = try(self, pool)\n"
  "  if not waits(lease, code) then return lease, msg, code end\n"
  "  if timeout == 0 then return nil, msg, code == 'FULL' and 'TIMEOUT' or code end\n"
  "  local slept, waited = 0, started and clock() - started or 0\n"
  "  if waited >= timeout then return timed_out(self, waited, msg, code) end\n"
  "  step = min(step, max_step)\n"
  "  while true do\n"
  "    local s = min(step, timeout - waited)\n"
  /* ngx.sleep counts whole milliseconds: less would be a sleep(0), a
   * busy loop through the last millisecond of the wait. */
  "    if started and s < 0.001 then s = 0.001 end\n"
  "    sleep(s)\n"
  "    slept = slept + s\n"
  "    lease, msg, code = try(self, pool)\n"
  "    if not waits(lease, code) then return lease, msg, code end\n"
  "    waited = started and max(slept, clock() - started) or slept\n"
  "    if waited >= timeout then return timed_out(self, waited, msg, code) end\n"
  "    step = min(step * ratio, max_step)\n"
  "  end\n"
  "end\n";

/* ---- registration --------------------------------------------------- */

static const luaL_Reg client_methods[] = { { "lock", client_lock },
                                           { "semaphore", client_semaphore },
                                           { "rwlock", client_rwlock },
                                           { "info", client_info },
                                           { "locks", client_locks },
                                           { "force_release", client_force_release },
                                           { "prune", client_prune },
                                           { "close", client_close },
                                           { "set_log", client_set_log },
                                           { "stats", client_stats },
                                           { "prometheus", client_prometheus },
                                           { NULL, NULL } };

static const luaL_Reg lock_methods[] = { { "acquire", lock_acquire },
                                         { "try_acquire", lock_try_acquire },
                                         { NULL, NULL } };

static const luaL_Reg lease_methods[] = { { "held", lease_held },
                                          { "lost", lease_lost },
                                          { "state", lease_state_method },
                                          { "renew", lease_renew },
                                          { "release", lease_release },
                                          { "holds", lease_holds },
                                          { NULL, NULL } };

static const luaL_Reg module_functions[] = { { "connect", l_connect },
                                             { "on_warning", l_on_warning },
                                             { "_pool_try", l_pool_try },
                                             { "_pool_reap", l_pool_reap },
                                             { NULL, NULL } };

/* Creates metatable tname with __index = index_fn(methods), leaving the
 * methods table on the stack above it. */
static void new_type (lua_State *L,
                      const char *tname,
                      const luaL_Reg *methods,
                      lua_CFunction index_fn)
{
   luaL_newmetatable (L, tname);
   lua_pushstring (L, tname);
   lua_setfield (L, -2, "__name");
   lua_newtable (L);
   luaL_setfuncs (L, methods, 0);
   lua_pushvalue (L, -1);
   lua_pushcclosure (L, index_fn, 1);
   lua_setfield (L, -3, "__index");
   lua_pushliteral (L, "leaselock handles are read-only");
   lua_setfield (L, -3, "__metatable");
}

/*
 * The one symbol Lua needs. The core's leaselock_* API is declared with
 * default visibility in leaselock.h, so -fvisibility=hidden alone would
 * export it too: `make` links with lua/leaselock.map, which keeps only
 * this one. The rock (luarocks' builtin backend passes no linker flags)
 * exports the core's symbols as well.
 */
__attribute__ ((visibility ("default"))) int luaopen_leaselock (lua_State *L)
{
   new_type (L, CLIENT_MT, client_methods, client_index);
   lua_pop (L, 1);
   lua_pushcfunction (L, client_tostring);
   lua_setfield (L, -2, "__tostring");
   lua_pushcfunction (L, client_gc);
   lua_setfield (L, -2, "__gc");
   lua_pushcfunction (L, client_close);
   lua_setfield (L, -2, "__close");
   lua_pop (L, 1);

   new_type (L, LOCK_MT, lock_methods, lock_index);
   /* methods.with = the Lua part, closed over the C halves */
   if (luaL_loadbuffer (L, with_source, sizeof with_source - 1, "=leaselock.with") != 0) {
      return lua_error (L);
   }
   lua_pushcfunction (L, lock_with_begin);
   lua_pushcfunction (L, lease_with_finish);
   lua_call (L, 2, 1);
   lua_setfield (L, -2, "with");
   /* methods.acquire_nb = the Lua wait loop, closed over one try */
   if (luaL_loadbuffer (L, acquire_nb_source, sizeof acquire_nb_source - 1,
                        "=leaselock.acquire_nb") != 0) {
      return lua_error (L);
   }
   lua_pushcfunction (L, lock_try_nb);
   lua_pushcfunction (L, lock_plan_nb);
   lua_pushcfunction (L, lock_adopt_nb);
   lua_call (L, 3, 1);
   lua_setfield (L, -2, "acquire_nb");
   lua_pop (L, 1);
   lua_pushcfunction (L, lock_tostring);
   lua_setfield (L, -2, "__tostring");
   lua_pop (L, 1);

   new_type (L, LEASE_MT, lease_methods, lease_index);
   lua_pop (L, 1);
   lua_pushcfunction (L, lease_tostring);
   lua_setfield (L, -2, "__tostring");
   lua_pushcfunction (L, lease_gc);
   lua_setfield (L, -2, "__gc");
   lua_pushcfunction (L, lease_tbc_close);
   lua_setfield (L, -2, "__close");
   lua_pop (L, 1);

   luaL_newlib (L, module_functions);
   lua_pushliteral (L, LEASELOCK_VERSION);
   lua_setfield (L, -2, "_VERSION");
   return 1;
}
