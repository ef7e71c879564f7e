# The two targets leaselock-scm-1.rockspec builds with (build.type "make"):
# the Lua module for the interpreter luarocks names, from the same objects,
# backends and symbol map as `make lua` (mk/lua.mk).
#
#   make lua-rock LUA_INCDIR=DIR              luarocks' build step
#   make lua-rock-install INST_LIBDIR=DIR     its install step
#   make test-luarock    `luarocks make` into a local tree, then a smoke run,
#                        for Lua 5.4 and for LuaJIT
#
# Backends as everywhere (tools/backends.sh): SQLite always, MongoDB,
# MySQL/MariaDB and PostgreSQL when pkg-config finds their client library,
# each a module (leaselock_backend_<name>.so) installed beside the Lua
# module in leaselock-backends/, where the core looks; the build log names
# those built, and the objects are recompiled when that set (or any flag)
# changes. Without SQLite's (libsqlite3-dev)
# the rock stops at once and says so.

LUA_ROCK_MOD := $(BUILD)/lua/luarocks/leaselock.so
# Every lua/*.c, as mk/lua.mk builds the module (a name of this file's own:
# targets expand at once, whatever order the mk files are read in).
LUA_ROCK_OBJS := $(patsubst lua/%.c,$(BUILD)/lua/luarocks/%.o,$(wildcard lua/*.c))
$(LUA_ROCK_MOD): $(LUA_ROCK_OBJS)

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
$(LL_OBJS) $(LUA_ROCK_OBJS) $(foreach b,$(LL_MODULES),$(call ll_module_objs,$(b))): $(LUA_ROCK_FLAGS)
endif

# The module's objects as mk/lua.mk builds them (every lua/*.c, the
# chunks of lua/*.lua), with the headers of the Lua luarocks names.
$(BUILD)/lua/luarocks/%.o: lua/%.c $$(LUA_MOD_DEPS)
	@[ -n "$(LUA_INCDIR)" ] || { echo "lua-rock: LUA_INCDIR is not set (luarocks sets it)"; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(LUA_MOD_CFLAGS) -I$(LUA_INCDIR) -c $< -o $@

lua-rock: $(LUA_ROCK_MOD) $(LL_MODULE_SOS)
	@echo "lua-rock: backends compiled in: $(LL_BACKENDS)"

lua-rock-install: $(LUA_ROCK_MOD) $(LL_MODULE_SOS)
	@[ -n "$(INST_LIBDIR)" ] || { echo "lua-rock-install: INST_LIBDIR is not set (luarocks sets it)"; exit 1; }
	install -d '$(INST_LIBDIR)'
	install -m 755 $< '$(INST_LIBDIR)/leaselock.so'
	$(if $(LL_MODULE_SOS),install -d '$(INST_LIBDIR)/leaselock-backends' && \
	  install -m 755 $(LL_MODULE_SOS) '$(INST_LIBDIR)/leaselock-backends/')

TEST_SUITES += luarock
.PHONY: test-luarock

# The rock builds through the Makefile (mk/luarock.mk) into build/ of the
# tree it is given, so each rock is built from a copy of the tree it needs,
# into a local tree: once
# for Lua 5.4, once for LuaJIT. luarocks has no LuaJIT configuration of its
# own here: the 5.1 one (Debian's /etc/luarocks/config-5.1.lua) builds it,
# with LUA_INCDIR pointed at luajit2's headers instead of PUC Lua 5.1's.
LUAROCKS ?= luarocks
LUA_ROCK_DIR := $(abspath $(BUILD))/lua/rock
LUAJIT_INCDIR ?= $(patsubst -I%,%,$(filter -I%,$(LUAJIT_INC)))
test-luarock:
	@rm -rf $(LUA_ROCK_DIR) && mkdir -p $(LUA_ROCK_DIR)/src-5.4 $(LUA_ROCK_DIR)/src-jit
	@cp -r Makefile mk tools lua csrc leaselock-*.rockspec $(LUA_ROCK_DIR)/src-5.4/
	@cp -r Makefile mk tools lua csrc leaselock-*.rockspec $(LUA_ROCK_DIR)/src-jit/
	@cd $(LUA_ROCK_DIR)/src-5.4 && $(LUAROCKS) --lua-version 5.4 make \
	  --tree $(LUA_ROCK_DIR)/tree-5.4 leaselock-scm-1.rockspec >build.log 2>&1 \
	  || { cat build.log; exit 1; }
	@cd $(LUA_ROCK_DIR)/src-jit && $(LUAROCKS) --lua-version 5.1 make \
	  --tree $(LUA_ROCK_DIR)/tree-jit leaselock-scm-1.rockspec \
	  LUA_INCDIR='$(LUAJIT_INCDIR)' >build.log 2>&1 || { cat build.log; exit 1; }
	@env -u LEASELOCK_BACKEND_PATH LUA_CPATH='$(LUA_ROCK_DIR)/tree-5.4/lib/lua/5.4/?.so' $(LUA54) \
	  tests/lua/rock_smoke.lua 'sqlite://$(LUA_ROCK_DIR)/rock-5.4.db' $(LL_MODULES)
	@env -u LEASELOCK_BACKEND_PATH LUA_CPATH='$(LUA_ROCK_DIR)/tree-jit/lib/lua/5.1/?.so' $(LUAJIT) \
	  tests/lua/rock_smoke.lua 'sqlite://$(LUA_ROCK_DIR)/rock-jit.db' $(LL_MODULES)
	@echo "2 passed, 0 failed"
