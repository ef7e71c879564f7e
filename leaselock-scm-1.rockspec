-- luarocks package for the Lua module: `luarocks make` in a checkout.
-- It builds through the Makefile (`make lua-rock`, mk/luarock.mk), so the
-- rock compiles the core's one source list (csrc/SOURCES) with the
-- backends tools/backends.sh finds, like every other build, and exports
-- only luaopen_leaselock (lua/leaselock.map).
-- For LuaJIT (OpenResty's luajit2 on Debian) use luarocks' Lua 5.1
-- configuration with LuaJIT's headers:
--   luarocks --lua-version 5.1 make LUA_INCDIR=/usr/include/luajit-2.1
-- Build needs: make, pkg-config and libsqlite3-dev; libmongoc-dev,
-- libmariadb-dev and libpq-dev add their backends (tools/deps.sh installs
-- them all); for Lua 5.1/LuaJIT also lua-compat53-dev.
rockspec_format = "3.0"
package = "leaselock"
version = "scm-1"

source = {
  url = "git+file://./",
}

description = {
  summary = "Lease-based distributed locks on SQLite, MongoDB, MySQL/MariaDB or PostgreSQL",
  detailed = [[
leaselock: leases with fencing tokens and automatic renewal, kept in a
database (embedded SQLite by default). This rock is the Lua binding of the
C core: Lua 5.1 (LuaJIT/OpenResty) to 5.4, with <close> and lock:with.
]],
  license = "MIT",
}

dependencies = {
  "lua >= 5.1",
}

build = {
  type = "make",
  build_target = "lua-rock",
  build_variables = {
    CFLAGS = "$(CFLAGS)",
    LUA_INCDIR = "$(LUA_INCDIR)",
  },
  install_target = "lua-rock-install",
  install_variables = {
    INST_LIBDIR = "$(LIBDIR)",
  },
}
