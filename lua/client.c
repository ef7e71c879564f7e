/*
 * client.c - leaselock.client, the handle of a leaselock_client_t:
 * leaselock.connect, the admin calls (info, locks, force_release, prune,
 * durability), set_log, stats, prometheus, and its close paths. The lock
 * objects it makes (client:lock, :semaphore, :rwlock) are lock.c's.
 */
#include "lleaselock.h"

#include <math.h>
#include <string.h>

/* leaselock.connect([uri [, {label=}]]) -> client | nil, msg, code */
int ll_lua_connect (lua_State *L)
{
   static const char *const allowed[] = { "label", NULL };
   const char *uri = NULL, *label = NULL;
   leaselock_error_t err;
   ll_lua_client_t *c;

   if (!lua_isnoneornil (L, 1)) {
      if (lua_type (L, 1) != LUA_TSTRING) {
         ll_lua_arg_error (L, 1, "connect", 1, "uri: string expected, got %s",
                           luaL_typename (L, 1));
      }
      uri = lua_tostring (L, 1);
      if (strlen (uri) != lua_rawlen (L, 1)) {
         ll_lua_arg_error (L, 1, "connect", 1, "uri must not contain a NUL byte");
      }
   }
   ll_lua_check_opts (L, 2, 1, "connect", 2, allowed);
   if (lua_istable (L, 2)) {
      lua_getfield (L, 2, "label");
      if (!lua_isnil (L, -1)) {
         size_t len;
         if (lua_type (L, -1) != LUA_TSTRING) {
            ll_lua_arg_error (L, 1, "connect", 2, "label must be a string, got %s",
                              luaL_typename (L, -1));
         }
         label = lua_tolstring (L, -1, &len); /* stays on the stack */
         /* The core takes a C string: check here what it would cut at a
          * NUL or refuse later, so that a bad label is a clean error. */
         if (len > LL_LABEL_MAX) {
            ll_lua_arg_error (L, 1, "connect", 2, "label must be at most %d bytes, got %d",
                              (int)LL_LABEL_MAX, (int)(len > 100000 ? 100000 : len));
         }
         if (memchr (label, '\0', len)) {
            ll_lua_arg_error (L, 1, "connect", 2, "label must not contain a NUL byte");
         }
         if (!ll_lua_utf8_valid (label, len)) {
            ll_lua_arg_error (L, 1, "connect", 2, "label is not valid UTF-8");
         }
      }
   }
   /* The handle exists (closed) before the client does: a memory error
    * here leaks nothing. */
   c = lua_newuserdata (L, sizeof *c);
   c->client = NULL;
   c->log = NULL;
   c->shared = NULL;
   c->open_holds = 0;
   luaL_setmetatable (L, CLIENT_MT);
   lua_createtable (L, 1, 0);
   lua_setuservalue (L, -2);
   c->client = leaselock_client_new (uri, label, &err);
   if (!c->client) {
      return ll_lua_push_failure (L, &err);
   }
   return 1;
}

ll_lua_client_t *ll_lua_check_client (lua_State *L, int idx, int level, const char *fname)
{
   return ll_lua_check_udata (L, idx, level, fname, CLIENT_MT);
}

leaselock_client_t *ll_lua_check_open_client (lua_State *L, int idx, int level, const char *fname)
{
   ll_lua_client_t *c = ll_lua_check_client (L, idx, level, fname);
   if (leaselock_client_closed (c->client)) {
      ll_lua_raise_at (L, level, "attempt to use a closed " CLIENT_MT " (in '%s')", fname);
   }
   return c->client;
}

leaselock_client_t *ll_lua_open_client_at (lua_State *L, int idx, int level, const char *fname)
{
   ll_lua_client_t *c = lua_touserdata (L, idx);
   if (leaselock_client_closed (c->client)) {
      ll_lua_raise_at (L, level, "attempt to use a closed " CLIENT_MT " (in '%s')", fname);
   }
   return c->client;
}

/* ---- client:set_log, :stats, :prometheus ---------------------------- */

/* client:set_log(fn [, level]) -> true. fn(event) receives the events of
 * level >= level (default 20, INFO; DEBUG 10, WARNING 30, ERROR 40); nil
 * turns it off. */
static int client_set_log (lua_State *L)
{
   ll_lua_client_t *c = ll_lua_check_client (L, 1, 1, "set_log");
   lua_Integer level = LEASELOCK_LOG_INFO;
   ll_lua_check_open_client (L, 1, 1, "set_log");
   if (!lua_isnil (L, 2) && lua_type (L, 2) != LUA_TFUNCTION) {
      ll_lua_arg_error (L, 1, "set_log", 1, "function or nil expected, got %s",
                        luaL_typename (L, 2));
   }
   if (!lua_isnoneornil (L, 3)) {
      if (lua_type (L, 3) != LUA_TNUMBER) {
         ll_lua_arg_error (L, 1, "set_log", 2, "level must be a number, got %s",
                           luaL_typename (L, 3));
      }
      level = (lua_Integer)lua_tonumber (L, 3);
   }
   lua_settop (L, 2);
   if (!c->log && !lua_isnil (L, 2)) {
      c->log = ll_lua_log_new ();
      if (!c->log) {
         return luaL_error (L, "set_log: out of memory");
      }
   }
   lua_getuservalue (L, 1);
   lua_pushvalue (L, 2);
   lua_rawseti (L, -2, UV_LOG_FN);
   if (lua_isnil (L, 2)) {
      leaselock_client_set_log (c->client, LEASELOCK_LOG_OFF, NULL, NULL);
   } else {
      leaselock_client_set_log (c->client, (int)level, ll_lua_log_hook, c->log);
   }
   lua_pushboolean (L, 1);
   return 1;
}

/* Fills *st from the client handle at 1; raises on a collected client. */
static void stats_of (lua_State *L, const char *fname, leaselock_stats_t *st)
{
   ll_lua_client_t *c = ll_lua_check_client (L, 1, 1, fname);
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
      F (acquires),
      F (busy),
      F (waits),
      F (timeouts),
      F (renewals),
      F (renewal_failures),
      F (losses),
      F (releases),
      F (release_failures),
      F (backend_errors),
      F (requests),
      F (leases_held),
      F (failovers),
      F (durability_warnings),
#undef F
   };
   leaselock_stats_t st;
   stats_of (L, "stats", &st);
   ll_lua_drain_log (L, 1);
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

/* ---- close paths ---------------------------------------------------- */

/* client:close() -> true | nil, msg, code (also __close). Releases the
 * leases the client still holds (the core's close), then the client
 * refuses every call; its leases answer NOT_HELD. Idempotent. A failed
 * release is reported once the client is closed all the same. */
static int client_close (lua_State *L)
{
   ll_lua_client_t *c = ll_lua_check_client (L, 1, 1, "close");
   leaselock_error_t err;
   bool ok = !c->client || leaselock_client_close (c->client, true, &err);
   if (c->shared) {
      ll_lua_pool_reap (c->shared, 0); /* the close released them */
   }
   ll_lua_drain_log (L, 1);
   if (!ok) {
      return ll_lua_push_failure (L, &err);
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
   ll_lua_client_t *c = ll_lua_check_client (L, 1, 1, "__gc");
   /* No hook call runs once set_log returns: the queue can go. */
   leaselock_client_set_log (c->client, LEASELOCK_LOG_OFF, NULL, NULL);
   if (c->shared) {
      ll_lua_pool_drop_handle (c);
   } else {
      leaselock_client_destroy (c->client);
   }
   c->client = NULL;
   ll_lua_log_free (c->log);
   c->log = NULL;
   return 0;
}

static int client_tostring (lua_State *L)
{
   ll_lua_client_t *c = ll_lua_check_client (L, 1, 1, "__tostring");
   if (!leaselock_client_closed (c->client)) {
      lua_pushfstring (L, CLIENT_MT " (%s, %s): %p", leaselock_client_backend (c->client),
                       leaselock_client_uri (c->client), (void *)c);
   } else {
      lua_pushfstring (L, CLIENT_MT " (closed): %p", (void *)c);
   }
   return 1;
}

/* ---- admin calls ---------------------------------------------------- */

/* t.name = v / 1000 (seconds), unless v is -1 (not known). */
static void set_seconds (lua_State *L, const char *name, int64_t v)
{
   if (v >= 0) {
      lua_pushnumber (L, (lua_Number)v / 1000.0);
      lua_setfield (L, -2, name);
   }
}

/* A record as a Lua table: key, owner (nil when released), fence,
 * expires_in (seconds by the database clock, <= 0 when expired), holder =
 * {host, pid, label}, holds (reentrant holds, 0 when released), held_for
 * (seconds; nil when released or not known), next_owner (the reserved
 * waiter, nil when none), queued (the fair queue's length, nil when not
 * known). */
static void push_record (lua_State *L, const leaselock_record_t *r)
{
   lua_createtable (L, 0, 9);
   set_seconds (L, "held_for", r->held_ms);
   if (r->next_owner[0]) {
      lua_pushstring (L, r->next_owner);
      lua_setfield (L, -2, "next_owner");
   }
   if (r->queued >= 0) {
      lua_pushinteger (L, (lua_Integer)r->queued);
      lua_setfield (L, -2, "queued");
   }
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
   ll_lua_set_holder_id (L, r->host, r->pid, r->label);
   lua_setfield (L, -2, "holder");
   ll_lua_set_record_mt (L); /* its __tostring */
}

/* A lock, a mode's records as one (leaselock_lock_info_t): the fields of
 * its own record (a read-write lock's writer, else its first holder;
 * fence 0 when none), key the lock's, next_owner and queued its waiters,
 * and mode ("lock", "semaphore", "rwlock"), state ("held", "min-hold",
 * "free"), live, holders = {record...}, slots (a semaphore's), readers and
 * writer (a read-write lock's). */
static void push_lock (lua_State *L, const leaselock_lock_info_t *l)
{
   static const leaselock_record_t none = { .queued = -1, .held_ms = -1 };
   const leaselock_record_t *lead =
     l->mode != LEASELOCK_MODE_LOCK && l->n_holders ? l->holders[0] : l->record;
   push_record (L, lead ? lead : &none);
   lua_pushlstring (L, l->key, l->key_len);
   lua_setfield (L, -2, "key");
   lua_pushstring (L, l->next_owner[0] ? l->next_owner : NULL);
   lua_setfield (L, -2, "next_owner");
   if (l->queued >= 0)
      lua_pushinteger (L, (lua_Integer)l->queued);
   else
      lua_pushnil (L);
   lua_setfield (L, -2, "queued");
   lua_pushstring (L, l->mode == LEASELOCK_MODE_SEMAPHORE ? "semaphore"
                      : l->mode == LEASELOCK_MODE_RWLOCK  ? "rwlock"
                                                          : "lock");
   lua_setfield (L, -2, "mode");
   lua_pushstring (L, l->state);
   lua_setfield (L, -2, "state");
   lua_pushinteger (L, (lua_Integer)l->live);
   lua_setfield (L, -2, "live");
   lua_createtable (L, (int)l->n_holders, 0);
   for (size_t i = 0; i < l->n_holders; i++) {
      push_record (L, l->holders[i]);
      lua_rawseti (L, -2, (int)i + 1);
   }
   lua_setfield (L, -2, "holders");
   if (l->mode == LEASELOCK_MODE_SEMAPHORE) {
      lua_pushinteger (L, (lua_Integer)l->slots);
      lua_setfield (L, -2, "slots");
   } else if (l->mode == LEASELOCK_MODE_RWLOCK) {
      lua_pushinteger (L, (lua_Integer)l->readers);
      lua_setfield (L, -2, "readers");
      lua_pushboolean (L, l->writer);
      lua_setfield (L, -2, "writer");
   }
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

/* append_lock(list, lock) with the lock a light userdata. */
static int append_lock (lua_State *L)
{
   push_lock (L, lua_touserdata (L, 2));
   lua_rawseti (L, 1, (int)lua_rawlen (L, 1) + 1);
   return 0;
}

static bool list_append (const leaselock_lock_info_t *lock, void *user_data)
{
   ll_lua_list_t *x = user_data;
   lua_pushvalue (x->L, x->append);
   lua_pushvalue (x->L, x->list);
   lua_pushlightuserdata (x->L, (void *)lock);
   /* On failure the error stays on top, raised once the core returns. */
   x->failed = lua_pcall (x->L, 2, 0, 0) != 0;
   return !x->failed;
}

/* client:locks([prefix]) -> {lock...} | nil, msg, code, and client:info(key)
 * -> lock | nil (no record) | nil, msg, code: with the list at index 4. */
static int locks_call (lua_State *L, const char *what, bool inspect)
{
   leaselock_client_t *client = ll_lua_check_open_client (L, 1, 1, what);
   size_t len = 0;
   const char *arg = "";
   ll_lua_list_t x = { L, 3, 4, false };
   leaselock_error_t err;
   bool ok, found = false;

   if (inspect)
      arg = ll_lua_check_key (L, 2, what, 1, &len);
   else if (!lua_isnoneornil (L, 2))
      arg = ll_lua_check_prefix (L, 2, what, 1, &len);
   lua_settop (L, 2);
   lua_pushcfunction (L, append_lock); /* 3 */
   lua_newtable (L);                   /* 4 */
   luaL_checkstack (L, 4, "leaselock: locks");
   if (inspect)
      ok = leaselock_lock_inspect (client, arg, len, list_append, &x, &found, &err);
   else
      ok = leaselock_locks (client, arg, len, list_append, &x, &err);
   if (!x.failed) {
      ll_lua_drain_log (L, 1);
   }
   if (x.failed) {
      return lua_error (L);
   }
   if (!ok) {
      return ll_lua_fail (L, 1, what, &err);
   }
   if (inspect)
      lua_rawgeti (L, 4, 1); /* nil when none */
   return 1;
}

/* client:info(key) */
static int client_info (lua_State *L)
{
   return locks_call (L, "info", true);
}

/* client:locks([prefix]) */
static int client_locks (lua_State *L)
{
   return locks_call (L, "locks", false);
}

/* client:force_release(key) -> true, took | nil, msg, code */
static int client_force_release (lua_State *L)
{
   leaselock_client_t *client = ll_lua_check_open_client (L, 1, 1, "force_release");
   size_t len;
   const char *key = ll_lua_check_key (L, 2, "force_release", 1, &len);
   leaselock_error_t err;
   bool took = false;

   bool ok = leaselock_force_release (client, key, len, &took, &err);
   ll_lua_drain_log (L, 1);
   if (!ok) {
      return ll_lua_fail (L, 1, "force_release", &err);
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
   leaselock_client_t *client = ll_lua_check_open_client (L, 1, 1, "prune");
   size_t len = 0;
   const char *prefix = "";
   int64_t older_ms = 0, count = 0;
   leaselock_error_t err;

   if (!lua_isnoneornil (L, 2)) {
      prefix = ll_lua_check_prefix (L, 2, "prune", 1, &len);
   }
   if (!lua_isnoneornil (L, 3)) {
      older_ms = ll_lua_check_seconds (L, 3, "prune", 2, "older_than", SECONDS_NONNEGATIVE);
   }
   if (!leaselock_prune (client, prefix, len, older_ms, &count, &err)) {
      return ll_lua_fail (L, 1, "prune", &err);
   }
   lua_pushinteger (L, (lua_Integer)count);
   return 1;
}

/* client:durability() -> {level=, policy=, detail=, primary=, fence_floor=,
 * lock_delay=, max_ttl=} | nil, msg, code: how the database makes a grant
 * survive a failover (leaselock_client_durability), seconds as numbers;
 * primary and max_ttl are absent when there is none. May connect. */
static int client_durability (lua_State *L)
{
   leaselock_client_t *client = ll_lua_check_open_client (L, 1, 1, "durability");
   leaselock_durability_t d;
   leaselock_error_t err;

   bool ok = leaselock_client_durability (client, &d, &err);
   ll_lua_drain_log (L, 1);
   if (!ok) {
      return ll_lua_fail (L, 1, "durability", &err);
   }
   lua_createtable (L, 0, 7);
   lua_pushstring (L, d.level);
   lua_setfield (L, -2, "level");
   lua_pushstring (L, d.policy);
   lua_setfield (L, -2, "policy");
   lua_pushstring (L, d.detail);
   lua_setfield (L, -2, "detail");
   if (d.primary[0]) {
      lua_pushstring (L, d.primary);
      lua_setfield (L, -2, "primary");
   }
   lua_pushinteger (L, (lua_Integer)d.fence_floor);
   lua_setfield (L, -2, "fence_floor");
   lua_pushnumber (L, (lua_Number)d.lock_delay_ms / 1000.0);
   lua_setfield (L, -2, "lock_delay");
   if (d.max_ttl_ms > 0) {
      lua_pushnumber (L, (lua_Number)d.max_ttl_ms / 1000.0);
      lua_setfield (L, -2, "max_ttl");
   }
   return 1;
}

/* client.uri, client.backend, then the methods. */
static int client_index (lua_State *L)
{
   ll_lua_client_t *c = ll_lua_check_client (L, 1, 1, "__index");
   lua_pushvalue (L, 2);
   lua_rawget (L, lua_upvalueindex (1));
   if (!lua_isnil (L, -1) || lua_type (L, 2) != LUA_TSTRING) {
      return 1;
   }
   if (c->client && strcmp (lua_tostring (L, 2), "uri") == 0) {
      lua_pushstring (L, leaselock_client_uri (c->client));
   } else if (c->client && strcmp (lua_tostring (L, 2), "backend") == 0) {
      lua_pushstring (L, leaselock_client_backend (c->client));
   } else if (c->client) {
      return ll_lua_no_field (L, CLIENT_MT);
   } else {
      lua_pushnil (L);
   }
   return 1;
}

/* ---- registration --------------------------------------------------- */

static const luaL_Reg client_methods[] = { { "lock", ll_lua_client_lock },
                                           { "semaphore", ll_lua_client_semaphore },
                                           { "rwlock", ll_lua_client_rwlock },
                                           { "info", client_info },
                                           { "locks", client_locks },
                                           { "force_release", client_force_release },
                                           { "prune", client_prune },
                                           { "close", client_close },
                                           { "set_log", client_set_log },
                                           { "stats", client_stats },
                                           { "prometheus", client_prometheus },
                                           { "durability", client_durability },
                                           { NULL, NULL } };

void ll_lua_client_setup (lua_State *L)
{
   ll_lua_new_type (L, CLIENT_MT, client_methods, client_index, client_tostring, client_gc,
                    client_close);
}
