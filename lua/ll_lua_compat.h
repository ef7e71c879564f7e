/*
 * ll_lua_compat.h - one module source for Lua 5.4 and LuaJIT 2.1 (5.1 API).
 *
 * Lua 5.3+ needs nothing. For the 5.1/5.2 APIs the Lua 5.3 C API
 * (luaL_setfuncs, luaL_testudata, lua_setuservalue, ...) comes from
 * lua-compat-5.3 as Debian ships it (lua-compat53-dev:
 * /usr/include/lua5.1/compat-5.3.h). Without COMPAT53_PREFIX the header
 * includes compat-5.3.c with every function static, so nothing is linked.
 * Another layout can be used with -I<dir> so that <compat-5.3.h> is found.
 */
#ifndef LL_LUA_COMPAT_H
#define LL_LUA_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM < 503
#if LUA_VERSION_NUM == 501 && defined(__has_include)
#if __has_include(<lua5.1/compat-5.3.h>)
#include <lua5.1/compat-5.3.h>
#else
#include <compat-5.3.h>
#endif
#elif LUA_VERSION_NUM == 502 && defined(__has_include)
#if __has_include(<lua5.2/compat-5.3.h>)
#include <lua5.2/compat-5.3.h>
#else
#include <compat-5.3.h>
#endif
#else
#include <compat-5.3.h>
#endif
#endif

#endif /* LL_LUA_COMPAT_H */
