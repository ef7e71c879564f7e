/*
 * lock.c - leaselock.lock, a key plus acquire options (it owns no C
 * resource): its constructors client:lock, :semaphore and :rwlock, and
 * its acquires (acquire, try_acquire, the C half of with that takes the
 * lease). A lock remembers, per coroutine, the lease taken through it,
 * and so does its client for all its locks (by key and mode), for
 * reentrant locks and for refusing a coroutine's wait on itself.
 */
#include "lleaselock.h"

#include <math.h>
#include <string.h>

/* ---- client:lock, :semaphore, :rwlock ------------------------------- */

/* A boolean option name of the table at 3 (client:lock's, :semaphore's,
 * :rwlock's) into *out, when given; anything but a boolean raises. */
static void opt_bool (lua_State *L, const char *fname, const char *name, bool *out)
{
   lua_getfield (L, 3, name);
   if (!lua_isnil (L, -1)) {
      if (lua_type (L, -1) != LUA_TBOOLEAN) {
         ll_lua_arg_error (L, 1, fname, 2, "%s must be a boolean, got %s", name,
                           luaL_typename (L, -1));
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
         ll_lua_arg_error (L, 1, fname, 2, "%s must be a function, got %s", name,
                           luaL_typename (L, -1));
      }
      lua_pushvalue (L, -1);
      lua_rawseti (L, uv, slot);
   }
   lua_pop (L, 1);
}

static void push_holds_of_client (lua_State *L, int client_idx);
static void push_hold_name (lua_State *L, const ll_lua_lock_t *k, ll_lock_mode_t mode);

/*
 * Pushes a new lock object of the client at 1 on key (len bytes, checked)
 * taken as mode says, with the options of the table at 3 (names checked)
 * or the defaults.
 */
static ll_lua_lock_t *new_lock (lua_State *L, const char *fname, const char *key, size_t len,
                                ll_lock_mode_t mode, int64_t limit)
{
   ll_lua_lock_t *k = lua_newuserdata (L, sizeof *k);
   int ud = lua_gettop (L);
   memset (k, 0, sizeof *k);
   memcpy (k->key, key, len);
   k->key_len = len;
   /* The core's defaults are the lock's: ttl 30 s, min_hold 0, auto_renew,
    * not fair. */
   leaselock_acquire_opts_init (&k->opts);
   k->mode = mode;
   k->limit = limit;
   k->client = lua_touserdata (L, 1);
   lua_createtable (L, UV_HOLD_NAME, 0); /* ud + 1: user value */
   lua_pushvalue (L, 1);
   lua_rawseti (L, ud + 1, UV_CLIENT);
   luaL_getmetatable (L, LEASE_MT);
   lua_rawseti (L, ud + 1, UV_LEASE_MT);
   push_holds_of_client (L, 1);
   lua_rawseti (L, ud + 1, UV_HOLDS_OF_CLIENT);
   push_hold_name (L, k, mode);
   lua_rawseti (L, ud + 1, UV_HOLD_NAME);
   if (lua_istable (L, 3)) {
      lua_getfield (L, 3, "ttl");
      if (!lua_isnil (L, -1)) {
         k->opts.ttl_ms = ll_lua_check_seconds (L, -1, fname, 2, "ttl", SECONDS_POSITIVE);
      }
      lua_getfield (L, 3, "min_hold");
      if (!lua_isnil (L, -1)) {
         k->opts.min_hold_ms =
           ll_lua_check_seconds (L, -1, fname, 2, "min_hold", SECONDS_NONNEGATIVE);
      }
      lua_settop (L, ud + 1);
      opt_bool (L, fname, "auto_renew", &k->opts.auto_renew);
      opt_bool (L, fname, "fair", &k->opts.fair);
      opt_bool (L, fname, "reentrant", &k->reentrant);
      opt_callback (L, fname, "on_lost", ud + 1, UV_ON_LOST);
      opt_callback (L, fname, "on_renew_failed", ud + 1, UV_ON_RENEW_FAILED);
      lua_rawgeti (L, ud + 1, UV_ON_RENEW_FAILED);
      k->renew_failed_fn = lua_isfunction (L, -1);
      lua_pop (L, 1);
   }
   lua_setuservalue (L, ud);
   luaL_setmetatable (L, LOCK_MT);
   return k;
}

/* client:lock(key [, {ttl=30, min_hold=0, auto_renew=true, on_lost=fn,
 *                     on_renew_failed=fn, fair=false, reentrant=false}]) */
int ll_lua_client_lock (lua_State *L)
{
   static const char *const allowed[] = {
      "ttl", "min_hold", "auto_renew", "on_lost", "on_renew_failed", "fair", "reentrant", NULL
   };
   size_t len;
   const char *key;

   ll_lua_check_open_client (L, 1, 1, "lock");
   key = ll_lua_check_key (L, 2, "lock", 1, &len);
   ll_lua_check_opts (L, 3, 1, "lock", 2, allowed);
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
static const char *check_mode_args (lua_State *L, const char *fname, const char *what, size_t max,
                                    const char *const *allowed, size_t *len)
{
   const char *key;
   ll_lua_check_open_client (L, 1, 1, fname);
   key = ll_lua_check_key (L, 2, fname, 1, len);
   if (*len > max) {
      ll_lua_arg_error (L, 1, fname, 1,
                        "key must be at most %d bytes for a %s (its records add a suffix), got %d",
                        (int)max, what, (int)*len);
   }
   if (lua_istable (L, 3)) {
      lua_getfield (L, 3, "reentrant");
      if (!lua_isnil (L, -1)) {
         ll_lua_arg_error (L, 1, fname, 2,
                           "reentrant is not offered for a %s: each acquire is a holder of its own",
                           what);
      }
      lua_pop (L, 1);
   }
   ll_lua_check_opts (L, 3, 1, fname, 2, allowed);
   lua_settop (L, 3);
   return key;
}

/* client:semaphore(key, {limit=N [, lock options but reentrant]}) -> a lock
 * object whose acquires each take one of N slots. */
int ll_lua_client_semaphore (lua_State *L)
{
   static const char *const allowed[] = { "limit", MODE_OPTS, NULL };
   size_t len;
   const char *key =
     check_mode_args (L, "semaphore", "semaphore", LEASELOCK_KEY_MAX - 10, allowed, &len);
   lua_Number v;
   if (!lua_istable (L, 3)) {
      ll_lua_arg_error (L, 1, "semaphore", 2, "limit is required (an integer from 1 to %d)",
                        LEASELOCK_SEMAPHORE_MAX);
   }
   lua_getfield (L, 3, "limit");
   if (lua_type (L, -1) != LUA_TNUMBER) {
      ll_lua_arg_error (L, 1, "semaphore", 2, "limit must be an integer from 1 to %d, got %s",
                        LEASELOCK_SEMAPHORE_MAX, luaL_typename (L, -1));
   }
   v = lua_tonumber (L, -1);
   if (!(v >= 1 && v <= LEASELOCK_SEMAPHORE_MAX) || v != floor (v)) {
      ll_lua_arg_error (L, 1, "semaphore", 2, "limit must be an integer from 1 to %d, got %s",
                        LEASELOCK_SEMAPHORE_MAX, lua_tostring (L, -1));
   }
   lua_pop (L, 1);
   new_lock (L, "semaphore", key, len, LL_SEMAPHORE, (int64_t)v);
   return 1;
}

/* client:rwlock(key [, lock options but reentrant]) -> {key=, shared=lock,
 * exclusive=lock}: each side a lock object of its own. */
int ll_lua_client_rwlock (lua_State *L)
{
   static const char *const allowed[] = { MODE_OPTS, NULL };
   size_t len;
   const char *key =
     check_mode_args (L, "rwlock", "read-write lock", LEASELOCK_KEY_MAX - 39, allowed, &len);
   lua_createtable (L, 0, 3); /* 4 */
   luaL_setmetatable (L, RWLOCK_MT);
   lua_pushlstring (L, key, len);
   lua_setfield (L, 4, "key");
   new_lock (L, "rwlock", key, len, LL_SHARED, 0);
   lua_setfield (L, 4, "shared");
   new_lock (L, "rwlock", key, len, LL_EXCLUSIVE, 0);
   lua_setfield (L, 4, "exclusive");
   return 1;
}

/* ---- lock ----------------------------------------------------------- */

ll_lua_lock_t *ll_lua_check_lock (lua_State *L, int idx, int level, const char *fname)
{
   return ll_lua_check_udata (L, idx, level, fname, LOCK_MT);
}

static int lock_tostring (lua_State *L)
{
   ll_lua_lock_t *k = ll_lua_check_lock (L, 1, 1, "__tostring");
   static const char *const kinds[] = { "", "semaphore, ", "shared, ", "exclusive, " };
   lua_pushliteral (L, LOCK_MT " (");
   lua_pushstring (L, kinds[k->mode]);
   lua_pushliteral (L, "key=");
   lua_pushlstring (L, k->key, k->key_len);
   if (k->mode == LL_SEMAPHORE)
      lua_pushfstring (L, ", limit=%d", (int)k->limit);
   else
      lua_pushliteral (L, "");
   lua_pushfstring (L, ", ttl=%f s): %p", (lua_Number)k->opts.ttl_ms / 1000.0, (void *)k);
   lua_concat (L, 6);
   return 1;
}

/* The methods first: a method call (lock:with) reads no field of the
 * lock, so only a field's read checks the receiver. */
static int lock_index (lua_State *L)
{
   lua_pushvalue (L, 2);
   lua_rawget (L, lua_upvalueindex (1));
   if (!lua_isnil (L, -1)) {
      return 1;
   }
   ll_lua_lock_t *k = ll_lua_check_lock (L, 1, 1, "__index");
   if (lua_type (L, 2) == LUA_TSTRING) {
      static const char *const modes[] = { "lock", "semaphore", "shared", "exclusive" };
      const char *name = lua_tostring (L, 2);
      if (strcmp (name, "key") == 0) {
         lua_pushlstring (L, k->key, k->key_len);
      } else if (strcmp (name, "mode") == 0) {
         lua_pushstring (L, modes[k->mode]);
      } else if (strcmp (name, "limit") == 0) {
         if (k->mode == LL_SEMAPHORE)
            lua_pushinteger (L, (lua_Integer)k->limit);
         else
            lua_pushnil (L); /* a semaphore's field, nil on the others */
      } else {
         return ll_lua_no_field (L, LOCK_MT);
      }
   } else {
      return ll_lua_no_field (L, LOCK_MT);
   }
   return 1;
}

/* Whether leases of the lock k report renewal failures to Lua. */
bool ll_lua_wants_renew_failed (const ll_lua_lock_t *k)
{
   return k->renew_failed_fn && k->opts.auto_renew;
}

/* The lease handle on top, popped, when it is a lease still held; else
 * it and the table under it popped too, and 0. */
static int held_or_pop (lua_State *L)
{
   ll_lua_lease_t *ls = luaL_testudata (L, -1, LEASE_MT);
   if (!ls || !ls->lease || leaselock_lease_state (ls->lease) != LEASELOCK_STATE_HELD) {
      lua_pop (L, 2);
      return 0;
   }
   return 1;
}

/* With [outer, t] on top (t a table by coroutine): the running
 * coroutine's lease in t that is still held, pushed in their place (1);
 * else both popped (0). */
static int take_coroutine_lease (lua_State *L)
{
   lua_pushthread (L);
   lua_rawget (L, -2);
   if (!held_or_pop (L)) {
      lua_pop (L, 1);
      return 0;
   }
   lua_replace (L, -3);
   lua_pop (L, 1);
   return 1;
}

/* The lease the running coroutine took through the lock at index 1 and
 * still holds, pushed; nothing pushed (0) when there is none. */
static int push_own_lease (lua_State *L)
{
   lua_getuservalue (L, 1);
   lua_rawgeti (L, -1, UV_HELD);
   if (!lua_istable (L, -1)) {
      lua_pop (L, 2);
      return 0;
   }
   return take_coroutine_lease (L);
}

/* Pushes the table of holds of the client handle at client_idx (UV_HOLDS),
 * created at its first use. Several lock objects of a client on one key
 * share it: a coroutine that holds the key through one of them and asks
 * through another would wait for itself, as through one. */
static void push_holds_of_client (lua_State *L, int client_idx)
{
   lua_getuservalue (L, client_idx);
   lua_rawgeti (L, -1, UV_HOLDS);
   if (!lua_istable (L, -1)) {
      lua_pop (L, 1);
      lua_createtable (L, 2, 0);
      lua_pushvalue (L, -1);
      lua_rawseti (L, -3, UV_HOLDS);
   }
   lua_remove (L, -2);
}

/* The holds of the client of the lock at 1, pushed (the lock's copy of
 * the reference). */
static void push_client_holds (lua_State *L)
{
   lua_getuservalue (L, 1);
   lua_rawgeti (L, -1, UV_HOLDS_OF_CLIENT);
   lua_remove (L, -2);
}

/* The name of the records of the lock k taken as mode says, pushed: the
 * key, and for a mode a NUL (in no key) and the mode's letter. */
static void push_hold_name (lua_State *L, const ll_lua_lock_t *k, ll_lock_mode_t mode)
{
   char tag[2] = { '\0', "lsrw"[mode] };
   lua_pushlstring (L, k->key, k->key_len);
   if (mode != LL_PLAIN) {
      lua_pushlstring (L, tag, 2);
      lua_concat (L, 2);
   }
}

/* The lease the running coroutine holds on the records of the lock at 1
 * taken as mode says, through any lock of its client, pushed (1); nothing
 * pushed (0) when there is none. */
static int push_client_hold (lua_State *L, ll_lock_mode_t mode)
{
   const ll_lua_lock_t *k = lua_touserdata (L, 1);
   push_client_holds (L);
   push_hold_name (L, k, mode);
   lua_rawget (L, -2);
   if (!lua_istable (L, -1)) {
      lua_pop (L, 2);
      return 0;
   }
   return take_coroutine_lease (L);
}

int ll_lua_push_my_lease (lua_State *L)
{
   const ll_lua_lock_t *k = lua_touserdata (L, 1);
   return push_own_lease (L) || push_client_hold (L, k->mode);
}

/* A name is about to be added to the client's holds table at top: drops
 * the names whose holds are all gone once there are twice as many as
 * after the last sweep (counts kept at [1] and [2]), so that a client
 * used on ever new keys does not grow. */
static void sweep_client_holds (lua_State *L)
{
   lua_Integer names = 1, limit;
   lua_rawgeti (L, -1, 1);
   names += lua_tointeger (L, -1);
   lua_rawgeti (L, -2, 2);
   limit = lua_isnil (L, -1) ? 64 : lua_tointeger (L, -1);
   lua_pop (L, 2);
   if (names > limit) {
      names = 1; /* the name about to be added */
      lua_pushnil (L);
      while (lua_next (L, -2)) {
         bool empty = !lua_istable (L, -1);
         if (!empty) {
            lua_pushnil (L);
            empty = !lua_next (L, -2);
            if (!empty)
               lua_pop (L, 2);
         }
         lua_pop (L, 1);
         if (lua_type (L, -1) == LUA_TSTRING) {
            if (empty) {
               lua_pushvalue (L, -1);
               lua_pushnil (L);
               lua_rawset (L, -4); /* clearing a field during next is allowed */
            } else {
               names++;
            }
         }
      }
      lua_pushinteger (L, names * 2 > 64 ? names * 2 : 64);
      lua_rawseti (L, -2, 2);
   }
   lua_pushinteger (L, names);
   lua_rawseti (L, -2, 1);
}

/* Pushes a new empty table whose keys ("k"), or keys and values ("kv"),
 * are weak. */
static void push_weak_table (lua_State *L, const char *mode)
{
   lua_createtable (L, 0, 1);
   lua_createtable (L, 0, 1);
   lua_pushstring (L, mode);
   lua_setfield (L, -2, "__mode");
   lua_setmetatable (L, -2);
}

/* Remembers the lease handle on top as the running coroutine's in its
 * client's holds (coroutine -> lease, weak keys and values: a finished
 * coroutine or a collected lease goes), counted in the client's
 * open_holds until it is closed; with own, through the lock at 1 too
 * (UV_HELD, weak keys). Leaves the stack as it was. */
static void register_hold (lua_State *L, ll_lua_lock_t *k, bool own)
{
   int lease = lua_gettop (L);
   ll_lua_lease_t *ls = lua_touserdata (L, lease);
   if (ls->lease && !ls->counted_in) {
      ls->counted_in = k->client;
      k->client->open_holds++;
   }
   lua_getuservalue (L, 1);                        /* lease + 1 */
   lua_rawgeti (L, lease + 1, UV_HOLDS_OF_CLIENT); /* lease + 2 */
   lua_rawgeti (L, lease + 1, UV_HOLD_NAME);       /* lease + 3 */
   lua_pushvalue (L, lease + 3);
   lua_rawget (L, lease + 2);
   if (!lua_istable (L, -1)) {
      lua_pop (L, 1);
      lua_pushvalue (L, lease + 2);
      sweep_client_holds (L); /* before the new name: it is empty yet */
      lua_pop (L, 1);
      push_weak_table (L, "kv");
      lua_pushvalue (L, lease + 3);
      lua_pushvalue (L, -2);
      lua_rawset (L, lease + 2);
   }
   lua_pushthread (L);
   lua_pushvalue (L, lease);
   lua_rawset (L, -3);
   if (own) {
      lua_rawgeti (L, lease + 1, UV_HELD);
      if (!lua_istable (L, -1)) {
         lua_pop (L, 1);
         push_weak_table (L, "k");
         lua_pushvalue (L, -1);
         lua_rawseti (L, lease + 1, UV_HELD);
      }
      lua_pushthread (L);
      lua_pushvalue (L, lease);
      lua_rawset (L, -3);
   }
   lua_settop (L, lease);
}

/* Remembers the lease at the top as the running coroutine's through the
 * lock at index 1 and in its client's holds. */
void ll_lua_set_my_lease (lua_State *L)
{
   register_hold (L, lua_touserdata (L, 1), true);
}

/* A read-write lock's side asked by a coroutine that holds the other side
 * of the key through a lock of its client (the exclusive side, for either;
 * the shared side, for the exclusive one): it would wait for itself. */
static void check_other_side (lua_State *L, ll_lua_lock_t *k, int level, const char *fname)
{
   if (k->mode != LL_SHARED && k->mode != LL_EXCLUSIVE)
      return;
   if (push_client_hold (L, LL_EXCLUSIVE)) {
      ll_lua_raise_at (L, level,
                       "%s: \"%s\" is held exclusively by this coroutine through a read-write "
                       "lock of this client: it would wait for itself (read-write locks are "
                       "not reentrant)",
                       fname, k->key);
   }
   if (k->mode == LL_EXCLUSIVE && push_client_hold (L, LL_SHARED)) {
      ll_lua_raise_at (L, level,
                       "%s: \"%s\" is held shared by this coroutine through a read-write lock "
                       "of this client: an exclusive acquire would wait for itself (release "
                       "the shared hold first)",
                       fname, k->key);
   }
}

/* Whether the lease handle on top was taken through the lock at 1: its
 * user value is its lock's. */
static bool taken_through_lock (lua_State *L)
{
   lua_getuservalue (L, -1);
   lua_getuservalue (L, 1);
   bool same = lua_rawequal (L, -1, -2);
   lua_pop (L, 2);
   return same;
}

/* The running coroutine asks again for a lock it holds, through this lock
 * object or another of its client: with reentrant, one more hold of the
 * same lease (pushed: 1 result, or 3 on failure); without, an error (it
 * would wait for itself). 0 when it holds none. */
static int acquire_again (lua_State *L, ll_lua_lock_t *k, int level, const char *fname)
{
   bool own = push_own_lease (L);
   if (!own) {
      if (!push_client_hold (L, k->mode))
         return 0;
      own = taken_through_lock (L);
   }
   if (!k->reentrant) {
      return ll_lua_raise_at (L, level,
                              "%s: \"%s\" is already held by this coroutine through %s (%s)", fname,
                              k->key, own ? "this lock" : "another lock of this client",
                              k->mode == LL_PLAIN ? "pass reentrant = true to enter it again"
                                                  : "the exclusive side of a read-write lock is "
                                                    "not reentrant");
   }
   ll_lua_lease_t *ls = lua_touserdata (L, -1);
   leaselock_error_t err;
   if (!leaselock_lease_reenter (ls->lease, &err)) {
      if (err.code == LEASELOCK_UNSUPPORTED)
         return luaL_error (L, "%s: %s", fname, err.message);
      lua_pop (L, 1);
      return ll_lua_push_failure (L, &err);
   }
   return 1;
}

/* Whether a coroutine holds a lease through the client of the lock at 1
 * (its open_holds). When none does, acquire_again and check_other_side
 * would find nothing: their look-ups are skipped, which is most of an
 * uncontended acquire's work in this module. */
static bool client_holds_any (const ll_lua_lock_t *k)
{
   return k->client->open_holds > 0;
}

/* The core's acquire for the lock's mode. */
static bool mode_acquire (leaselock_client_t *client, const ll_lua_lock_t *k,
                          const leaselock_acquire_opts_t *o, leaselock_lease_t **lease,
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

/* The acquire shared by acquire, try_acquire, with and acquire_nb's tries
 * made here. timeout_ms: the wait. */
int ll_lua_do_acquire (lua_State *L, ll_lua_lock_t *k, int level, const char *fname,
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
   if (client_holds_any (k)) {
      int again = one_holder ? acquire_again (L, k, level, fname) : 0;
      if (again > 0)
         return again;
      check_other_side (L, k, level, fname);
   }
   ls = ll_lua_push_lease_handle (L, level, fname, &client_idx, &client);
   o = k->opts;
   o.timeout_ms = timeout_ms;
   /* acquire_nb's tries poll: its busy ones name nobody (no read each) */
   o.no_holder = strcmp (fname, "acquire_nb") == 0;
   /* No on_lost callback: the state is read on the Lua side (lease.c);
    * on_renew_failed only records (ll_lua_rf_hook). */
   if (ll_lua_wants_renew_failed (k)) {
      ls->rf = ll_lua_rf_new ();
      if (!ls->rf) {
         return luaL_error (L, "%s: out of memory", fname);
      }
      o.on_renew_failed = ll_lua_rf_hook;
      o.on_renew_failed_data = ls->rf;
   }
   ok = mode_acquire (client, k, &o, &lease, &err);
   if (k->client->log) {
      ll_lua_drain_log (L, client_idx);
   }
   if (!ok) {
      ll_lua_rf_free (ls->rf);
      ls->rf = NULL;
      if (err.code == LEASELOCK_INVALID)
         return ll_lua_fail (L, level, fname, &err);
      return ll_lua_push_acquire_failure (L, &err); /* BUSY, TIMEOUT: and the holder */
   }
   ll_lua_lease_handle_set (ls, lease);
   lua_settop (L, client_idx + 1);
   if (one_holder)
      /* with's lease is not kept in UV_HELD: with holds it until it
       * closes it, and UV_HOLDS finds it (taken_through_lock) */
      register_hold (L, k, strcmp (fname, "with") != 0);
   else if (k->mode == LL_SHARED)
      register_hold (L, k, false); /* for check_other_side */
   return 1;
}

static int64_t acquire_timeout (lua_State *L, int idx, int level, const char *fname, int arg)
{
   static const char *const allowed[] = { "timeout", NULL };
   int64_t timeout_ms = -1;
   ll_lua_check_opts (L, idx, level, fname, arg, allowed);
   if (lua_istable (L, idx)) {
      lua_getfield (L, idx, "timeout");
      if (!lua_isnil (L, -1)) {
         timeout_ms = ll_lua_check_timeout (L, -1, level, fname, arg);
      }
      lua_pop (L, 1);
   }
   return timeout_ms;
}

/* lock:acquire([{timeout=nil}]) -> lease | nil, msg, code */
static int lock_acquire (lua_State *L)
{
   ll_lua_lock_t *k = ll_lua_check_lock (L, 1, 1, "acquire");
   int64_t timeout_ms = acquire_timeout (L, 2, 1, "acquire", 1);
   lua_settop (L, 1);
   return ll_lua_do_acquire (L, k, 1, "acquire", timeout_ms);
}

/* lock:try_acquire() -> lease | nil, "busy", "BUSY" */
static int lock_try_acquire (lua_State *L)
{
   ll_lua_lock_t *k = ll_lua_check_lock (L, 1, 1, "try_acquire");
   lua_settop (L, 1);
   return ll_lua_do_acquire (L, k, 1, "try_acquire", 0);
}

/* The first half of lock:with, called by with.lua's function (so errors
 * point two levels up), a C closure over LOCK_MT's metatable:
 * with_begin(lock, fn, opts) -> lease | nil, msg, code */
static int lock_with_begin (lua_State *L)
{
   ll_lua_lock_t *k = ll_lua_check_udata_mt (L, 1, lua_upvalueindex (1), 2, "with", LOCK_MT);
   int64_t timeout_ms;
   if (lua_type (L, 2) != LUA_TFUNCTION) {
      ll_lua_arg_error (L, 2, "with", 1, "function expected, got %s", luaL_typename (L, 2));
   }
   timeout_ms = lua_isnoneornil (L, 3) ? -1 : acquire_timeout (L, 3, 2, "with", 2);
   lua_settop (L, 1);
   return ll_lua_do_acquire (L, k, 2, "with", timeout_ms);
}

/* ---- registration --------------------------------------------------- */

static const luaL_Reg lock_methods[] = { { "acquire", lock_acquire },
                                         { "try_acquire", lock_try_acquire },
                                         { NULL, NULL } };

void ll_lua_lock_setup (lua_State *L)
{
   ll_lua_new_type (L, LOCK_MT, lock_methods, lock_index, lock_tostring, NULL, NULL);
   luaL_getmetatable (L, LOCK_MT);
   lua_getfield (L, -1, "__methods");
   /* methods.with = the Lua part (with.lua), closed over the C halves */
   ll_lua_load_chunk (L, "with");
   /* each closed over its receiver's metatable: the type check without a
    * registry look-up */
   luaL_getmetatable (L, LOCK_MT);
   lua_pushcclosure (L, lock_with_begin, 1);
   luaL_getmetatable (L, LEASE_MT);
   lua_pushcclosure (L, ll_lua_lease_with_finish, 1);
   lua_call (L, 2, 1);
   lua_setfield (L, -2, "with");
   ll_lua_push_acquire_nb (L);
   lua_setfield (L, -2, "acquire_nb");
   lua_pop (L, 2);
}
