-- luarocks package for the Lua module: `luarocks make` in a checkout.
-- It builds through the Makefile (`make lua-rock`, mk/luarock.mk), so the
-- rock compiles the core's one source list (csrc/SOURCES) with the
-- backends tools/backends.sh finds, like every other build, and exports
-- only luaopen_leaselock (lua/leaselock.map).
-- For LuaJIT (OpenResty's luajit2 on Debian) use luarocks' Lua 5.1
-- configuration with LuaJIT's headers:
--   luarocks --lua-version 5.1 make LUA_INCDIR=/usr/include/luajit-2.1
-- Build needs: make, pkg-config and libsqlite3-dev (SQLite, always
-- compiled in); libmongoc-dev, libmariadb-dev and libpq-dev each add their
-- backend when pkg-config finds them (a backend left out answers
-- UNSUPPORTED, saying what to install); for Lua 5.1/LuaJIT also
-- lua-compat53-dev. `make test-packaging` builds this rock with only
-- SQLite visible to pkg-config.
-- `luarocks make` builds the checkout it runs in; source.url is where
-- `luarocks install leaselock --dev` (or `luarocks build` of this file)
-- fetches the default branch from. A release rockspec pins a tag instead:
--   source = { url = "git+https://github.com/leaselock/leaselock.git", tag = "v0.1.0" }
rockspec_format = "3.0"
package = "leaselock"
version = "scm-1"

source = {
  url = "git+https://github.com/leaselock/leaselock.git",
  branch = "main",
}

description = {
  summary = "Lease-based distributed locks on SQLite, MongoDB, MySQL/MariaDB or PostgreSQL",
  detailed = [[
leaselock: leases with fencing tokens and automatic renewal, kept in a
database (embedded SQLite by default). This rock is the Lua binding of the
C core: Lua 5.1 (LuaJIT/OpenResty) to 5.4, with <close> and lock:with.
]],
  homepage = "https://github.com/leaselock/leaselock",
  issues_url = "https://github.com/leaselock/leaselock/issues",
  license = "MIT",
  maintainer = "the leaselock authors",
  labels = { "lock", "distributed-lock", "lease", "openresty", "sqlite", "mongodb", "mysql", "postgresql" },
}

dependencies = {
  "lua >= 5.1",
}

-- SQLite is the one library the build cannot do without (the others are
-- found by pkg-config when present): luarocks checks for it first and says
-- what is missing (SQLITE_DIR or SQLITE_INCDIR/SQLITE_LIBDIR point it
-- elsewhere).
external_dependencies = {
  SQLITE = { header = "sqlite3.h", library = "sqlite3" },
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
