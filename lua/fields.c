/*
 * fields.c - what the handles show a person at a REPL: the fields each
 * type answers (an unknown name raises instead of reading as nil),
 * leaselock.methods(handle), __tostring of records, holders and read-write
 * locks, and the holder an acquire names when it gives up.
 */
#include "lleaselock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields of each handle type (read through __index, beside its
 * methods), NULL-terminated; leaselock.methods returns them sorted. */
static const char *const lease_fields[] = { "expires_in", "fence", "held",  "holds", "key",
                                            "lost",       "owner", "state", "ttl",   NULL };
static const char *const lock_fields[] = { "key", "limit", "mode", NULL };
static const char *const client_fields[] = { "backend", "uri", NULL };
static const char *const rwlock_fields[] = { "exclusive", "key", "shared", NULL };

static const struct
{
   const char *tname;
   const char *const *fields;
} types[] = { { LEASE_MT, lease_fields },
              { LOCK_MT, lock_fields },
              { CLIENT_MT, client_fields },
              { RWLOCK_MT, rwlock_fields } };

int ll_lua_no_field (lua_State *L, const char *tname)
{
   if (lua_type (L, 2) == LUA_TSTRING)
      return ll_lua_raise_at (L, 1,
                              "%s has no field or method '%s' (leaselock.methods(%s) lists them)",
                              tname, lua_tostring (L, 2), "handle");
   return ll_lua_raise_at (L, 1, "%s has no field or method of type %s (names are strings)", tname,
                           luaL_typename (L, 2));
}

/* Pushes a new array of names[] (NULL-terminated, already sorted). */
static void push_names (lua_State *L, const char *const *names)
{
   lua_newtable (L);
   for (int i = 0; names[i]; i++) {
      lua_pushstring (L, names[i]);
      lua_rawseti (L, -2, i + 1);
   }
}

static int cmp_names (const void *a, const void *b)
{
   return strcmp (*(const char *const *)a, *(const char *const *)b);
}

/* leaselock.methods(handle) -> methods, fields: two sorted arrays of the
 * names a client, lock, lease or read-write lock answers (its methods are
 * called with ':', its fields read with '.'). */
static int l_methods (lua_State *L)
{
   for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      if (!lua_getmetatable (L, 1))
         break;
      luaL_getmetatable (L, types[t].tname);
      bool same = lua_rawequal (L, -1, -2);
      lua_pop (L, 2);
      if (!same)
         continue;
      const char *names[64];
      size_t n = 0;
      luaL_getmetatable (L, types[t].tname);
      lua_getfield (L, -1, "__methods");
      if (!lua_istable (L, -1)) {
         lua_pop (L, 1);
         lua_newtable (L); /* a read-write lock has none */
      }
      lua_pushnil (L);
      while (n < sizeof names / sizeof names[0] - 1 && lua_next (L, -2)) {
         lua_pop (L, 1);
         if (lua_type (L, -1) == LUA_TSTRING)
            names[n++] = lua_tostring (L, -1); /* kept alive by the methods table */
      }
      qsort (names, n, sizeof names[0], cmp_names);
      names[n] = NULL;
      push_names (L, names);
      push_names (L, types[t].fields);
      return 2;
   }
   return ll_lua_arg_error (L, 1, "methods", 1, "a leaselock handle expected, got %s",
                            luaL_typename (L, 1));
}

/* ---- holders -------------------------------------------------------- */

/* "vm pid 11858 (holder-job), fence 1, expires in 29.7s" for the holder
 * table at idx, as the core's messages and the CLI say it. */
static int holder_tostring (lua_State *L)
{
   char when[32];
   luaL_checktype (L, 1, LUA_TTABLE);
   lua_getfield (L, 1, "released");
   lua_getfield (L, 1, "host");
   lua_getfield (L, 1, "pid");
   lua_getfield (L, 1, "label");
   lua_getfield (L, 1, "fence");
   lua_getfield (L, 1, "expires_in");
   leaselock_format_duration ((int64_t)(lua_tonumber (L, -1) * 1000.0 + 0.5), when, sizeof when);
   lua_pushfstring (L, "%s%s pid %s", lua_toboolean (L, 2) ? "released, kept by min_hold of " : "",
                    lua_tostring (L, 3), lua_tostring (L, 4));
   if (lua_isstring (L, 5))
      lua_pushfstring (L, " (%s)", lua_tostring (L, 5));
   else
      lua_pushliteral (L, "");
   lua_pushfstring (L, ", fence %s, expires in %s", lua_tostring (L, 6), when);
   lua_concat (L, 3);
   return 1;
}

void ll_lua_set_holder_id (lua_State *L, const char *host, int64_t pid, const char *label)
{
   lua_pushstring (L, host);
   lua_setfield (L, -2, "host");
   lua_pushinteger (L, (lua_Integer)pid);
   lua_setfield (L, -2, "pid");
   if (label[0]) {
      lua_pushstring (L, label);
      lua_setfield (L, -2, "label");
   }
}

void ll_lua_push_holder (lua_State *L, const leaselock_holder_t *h)
{
   lua_createtable (L, 0, 6);
   ll_lua_set_holder_id (L, h->host, h->pid, h->label);
   lua_pushinteger (L, (lua_Integer)h->fence);
   lua_setfield (L, -2, "fence");
   lua_pushnumber (L, (lua_Number)h->expires_in_ms / 1000.0);
   lua_setfield (L, -2, "expires_in");
   lua_pushboolean (L, h->released);
   lua_setfield (L, -2, "released");
   luaL_setmetatable (L, HOLDER_MT);
}

int ll_lua_push_acquire_failure (lua_State *L, const leaselock_error_t *err)
{
   int n = ll_lua_push_failure (L, err);
   if (!err->holder.known)
      return n;
   ll_lua_push_holder (L, &err->holder);
   return n + 1;
}

/* ---- records -------------------------------------------------------- */

/* "leaselock.record (key=K, held by vm pid 1 (job), fence 1, expires in
 * 29.7s, holds 1)"; "released, kept by min_hold of ..." while a min_hold
 * keeps a released key; "free" once expired. */
static int record_tostring (lua_State *L)
{
   char when[32];
   luaL_checktype (L, 1, LUA_TTABLE);
   lua_settop (L, 1);
   lua_getfield (L, 1, "key");        /* 2 */
   lua_getfield (L, 1, "owner");      /* 3 */
   lua_getfield (L, 1, "fence");      /* 4 */
   lua_getfield (L, 1, "expires_in"); /* 5 */
   lua_getfield (L, 1, "holds");      /* 6 */
   lua_getfield (L, 1, "holder");     /* 7 */
   if (!lua_istable (L, 7)) {
      lua_pop (L, 1);
      lua_newtable (L);
   }
   lua_getfield (L, 7, "host");  /* 8 */
   lua_getfield (L, 7, "pid");   /* 9 */
   lua_getfield (L, 7, "label"); /* 10 */
   double left = lua_tonumber (L, 5);
   if (left <= 0) {
      lua_pushfstring (L, RECORD_MT " (key=%s, free, fence %s)", lua_tostring (L, 2),
                       lua_tostring (L, 4));
      return 1;
   }
   leaselock_format_duration ((int64_t)(left * 1000.0 + 0.5), when, sizeof when);
   bool label = lua_isstring (L, 10);
   lua_pushfstring (L, RECORD_MT " (key=%s, %s %s pid %s%s%s%s, fence %s, expires in %s, holds %s)",
                    lua_tostring (L, 2),
                    lua_isnil (L, 3) ? "released, kept by min_hold of" : "held by",
                    lua_isstring (L, 8) ? lua_tostring (L, 8) : "?",
                    lua_isstring (L, 9) ? lua_tostring (L, 9) : "?", label ? " (" : "",
                    label ? lua_tostring (L, 10) : "", label ? ")" : "", lua_tostring (L, 4), when,
                    lua_isstring (L, 6) ? lua_tostring (L, 6) : "?");
   return 1;
}

void ll_lua_set_record_mt (lua_State *L)
{
   luaL_setmetatable (L, RECORD_MT);
}

/* ---- read-write locks ----------------------------------------------- */

static int rwlock_tostring (lua_State *L)
{
   lua_getfield (L, 1, "key");
   lua_pushfstring (L, RWLOCK_MT " (key=%s, shared, exclusive): %p", lua_tostring (L, -1),
                    lua_topointer (L, 1));
   return 1;
}

/* rw.key, rw.shared and rw.exclusive are the table's own: anything else
 * is a mistake ("rw:acquire()", "rw.exlusive"). */
static int rwlock_index (lua_State *L)
{
   return ll_lua_no_field (L, RWLOCK_MT);
}

/* ---- registration --------------------------------------------------- */

void ll_lua_fields_setup (lua_State *L)
{
   luaL_newmetatable (L, HOLDER_MT);
   lua_pushcfunction (L, holder_tostring);
   lua_setfield (L, -2, "__tostring");
   luaL_newmetatable (L, RECORD_MT);
   lua_pushcfunction (L, record_tostring);
   lua_setfield (L, -2, "__tostring");
   luaL_newmetatable (L, RWLOCK_MT);
   lua_pushcfunction (L, rwlock_tostring);
   lua_setfield (L, -2, "__tostring");
   lua_pushcfunction (L, rwlock_index);
   lua_setfield (L, -2, "__index");
   lua_pushliteral (L, "leaselock handles are read-only");
   lua_setfield (L, -2, "__metatable");
   lua_pop (L, 3);
}

void ll_lua_fields_register (lua_State *L)
{
   lua_pushcfunction (L, l_methods);
   lua_setfield (L, -2, "methods");
}
