-- luarocks package for the Lua module: `luarocks make` in a checkout.
-- The builtin backend compiles lua/lleaselock.c with the core's C sources.
-- For LuaJIT (OpenResty's luajit2 on Debian) use luarocks' Lua 5.1
-- configuration with LuaJIT's headers:
--   luarocks --lua-version 5.1 make LUA_INCDIR=/usr/include/luajit-2.1
-- The builtin backend passes no linker flags, so unlike the `make` build
-- (lua/leaselock.map) the rock exports the core's symbols besides
-- luaopen_leaselock.
-- Keep build.modules.leaselock.sources equal to csrc/SOURCES (rockspecs
-- cannot read files; tests/check_sources.sh, `make test-sources`, checks).
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

-- All four backends, as `make` builds them on Debian (tools/deps.sh):
-- libsqlite3-dev libmongoc-dev libbson-dev libmariadb-dev libpq-dev; for
-- Lua 5.1/LuaJIT also lua-compat53-dev.
external_dependencies = {
  SQLITE = { header = "sqlite3.h", library = "sqlite3" },
  MONGOC = { header = "libmongoc-1.0/mongoc/mongoc.h", library = "mongoc-1.0" },
  BSON = { header = "libbson-1.0/bson/bson.h", library = "bson-1.0" },
  MARIADB = { header = "mariadb/mysql.h", library = "mariadb" },
  LIBPQ = { header = "postgresql/libpq-fe.h", library = "pq" },
}

build = {
  type = "builtin",
  modules = {
    leaselock = {
      sources = {
        "lua/lleaselock.c",
        -- csrc/SOURCES, in order
        "csrc/error.c",
        "csrc/validate.c",
        "csrc/clock.c",
        "csrc/uri.c",
        "csrc/duration.c",
        "csrc/backend.c",
        "csrc/backend_util.c",
        "csrc/backend_sql.c",
        "csrc/deadline.c",
        "csrc/engine.c",
        "csrc/backend_sqlite.c",
        "csrc/backend_mongodb.c",
        "csrc/backend_mysql.c",
        "csrc/backend_postgresql.c",
      },
      defines = {
        "_GNU_SOURCE",
        "LEASELOCK_WITH_MONGODB",
        "LEASELOCK_WITH_MYSQL",
        "LEASELOCK_WITH_POSTGRESQL",
      },
      incdirs = {
        "csrc",
        "$(SQLITE_INCDIR)",
        "$(MONGOC_INCDIR)/libmongoc-1.0",
        "$(BSON_INCDIR)/libbson-1.0",
        "$(MARIADB_INCDIR)/mariadb",
        "$(LIBPQ_INCDIR)/postgresql",
      },
      libdirs = {
        "$(SQLITE_LIBDIR)",
        "$(MONGOC_LIBDIR)",
        "$(BSON_LIBDIR)",
        "$(MARIADB_LIBDIR)",
        "$(LIBPQ_LIBDIR)",
      },
      libraries = { "sqlite3", "mongoc-1.0", "bson-1.0", "mariadb", "pq", "pthread", "m" },
    },
  },
}
