# The two targets leaselock-scm-1.rockspec builds with (build.type "make"):
# the Lua module for the interpreter luarocks names, from the same objects,
# backends and symbol map as `make lua` (mk/lua.mk).
#
#   make lua-rock LUA_INCDIR=DIR              luarocks' build step
#   make lua-rock-install INST_LIBDIR=DIR     its install step
#
# Backends as everywhere (tools/backends.sh): SQLite always, MongoDB,
# MySQL/MariaDB and PostgreSQL when pkg-config finds their client library;
# the build log names those compiled in, and the objects are recompiled
# when that set (or any flag) changes. Without SQLite's (libsqlite3-dev)
# the rock stops at once and says so.

LUA_ROCK_MOD := $(BUILD)/lua/luarocks/leaselock.so
$(LUA_ROCK_MOD): $(call lua_mod_objs,luarocks)

.PHONY: lua-rock lua-rock-install

ifneq ($(filter lua-rock lua-rock-install,$(MAKECMDGOALS)),)
ifeq ($(filter sqlite,$(LL_BACKENDS)),)
$(error lua-rock: leaselock needs SQLite 3 (pkg-config sqlite3; Debian: libsqlite3-dev))
endif
endif

# The flags the rock's objects were compiled with, rewritten only when they
# change: a `luarocks make` after installing, say, libmongoc-dev (or with
# other CFLAGS) recompiles the objects instead of linking the ones built
# without it. Only the build step: the install step (no CFLAGS, no
# LUA_INCDIR) installs what it built.
ifneq ($(filter lua-rock,$(MAKECMDGOALS)),)
LUA_ROCK_FLAGS := $(BUILD)/lua/luarocks/flags.txt
LUA_ROCK_FLAGS_TEXT := $(CFLAGS_ALL) -- $(LDLIBS_ALL)
.PHONY: lua-rock-flags
$(LUA_ROCK_FLAGS): lua-rock-flags
	@mkdir -p $(@D)
	@echo '$(LUA_ROCK_FLAGS_TEXT)' | cmp -s - $@ || echo '$(LUA_ROCK_FLAGS_TEXT)' >$@
$(LL_OBJS) $(call lua_mod_objs,luarocks): $(LUA_ROCK_FLAGS)
endif

# The module's objects as mk/lua.mk builds them (every lua/*.c, the
# chunks of lua/*.lua), with the headers of the Lua luarocks names.
$(BUILD)/lua/luarocks/%.o: lua/%.c $(LUA_MOD_DEPS)
	@[ -n "$(LUA_INCDIR)" ] || { echo "lua-rock: LUA_INCDIR is not set (luarocks sets it)"; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(LUA_MOD_CFLAGS) -I$(LUA_INCDIR) -c $< -o $@

lua-rock: $(LUA_ROCK_MOD)
	@echo "lua-rock: backends compiled in: $(LL_BACKENDS)"

lua-rock-install: $(LUA_ROCK_MOD)
	@[ -n "$(INST_LIBDIR)" ] || { echo "lua-rock-install: INST_LIBDIR is not set (luarocks sets it)"; exit 1; }
	install -d '$(INST_LIBDIR)'
	install -m 755 $< '$(INST_LIBDIR)/leaselock.so'
