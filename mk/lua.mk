# The Lua module `leaselock`, built twice from lua/lleaselock.c and the core
# objects: $(BUILD)/lua/5.4/leaselock.so (Lua 5.4) and
# $(BUILD)/lua/jit/leaselock.so (LuaJIT 2.1, as OpenResty runs it).
#
# The module is not linked against liblua: its Lua symbols come from the
# interpreter that loads it. lua/leaselock.map makes luaopen_leaselock its
# one exported symbol (the core's API would otherwise be exported too), so
# the core's calls stay inside the module even if another copy of leaselock
# is loaded in the same process (-Bsymbolic says the same for the linker).
#
#   make lua             both modules
#   make test-lua54      busted specs under lua5.4
#   make test-luajit     the same specs under LuaJIT
#   make test-openresty  nginx + lua module, a lease per request via
#                        ngx.run_worker_thread; then lock:acquire_nb waits
#                        (ngx.sleep; a server's tries in a thread pool)
#                        while the same worker answers others, on SQLite
#                        and each server (run it under tests/with-servers.sh)
#   make test-luarock    `luarocks make` into a local tree, then a smoke run,
#                        for Lua 5.4 and for LuaJIT
#   make bench-lua       lock:with beside the C core (bench/lua/lbench.c, a
#                        module of its own), pairs per second

LUA54_INC ?= $(shell $(PKG_CONFIG) --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
LUAJIT_INC ?= $(shell $(PKG_CONFIG) --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
LUA54 ?= lua5.4
LUAJIT ?= luajit
BUSTED ?= /usr/bin/busted

LUA54_MOD := $(BUILD)/lua/5.4/leaselock.so
LUAJIT_MOD := $(BUILD)/lua/jit/leaselock.so
LUA_MOD_DEPS := lua/lleaselock.c lua/ll_lua_compat.h csrc/leaselock.h
LUA_MOD_MAP := lua/leaselock.map

.PHONY: lua test-lua54 test-luajit test-openresty test-luarock bench-lua

all: lua
lua: $(LUA54_MOD) $(LUAJIT_MOD)

$(BUILD)/lua/5.4/lleaselock.o: $(LUA_MOD_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(LUA54_INC) -c $< -o $@

$(BUILD)/lua/jit/lleaselock.o: $(LUA_MOD_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(LUAJIT_INC) -c $< -o $@

$(BUILD)/lua/%/leaselock.so: $(BUILD)/lua/%/lleaselock.o $(LL_OBJS) $(LUA_MOD_MAP)
	$(CC) -shared -Wl,-Bsymbolic -Wl,--version-script=$(LUA_MOD_MAP) -o $@ \
	  $(filter %.o,$^) $(SANFLAGS) $(LDLIBS_ALL)

# busted per interpreter: /usr/bin/busted is a Lua script, run here by the
# interpreter named (Debian installs busted's pure-Lua dependencies for 5.1
# and 5.4 alike).
LUA_SPEC_ENV = LEASELOCK_TEST_TMP=$(abspath $(BUILD))/lua/tmp

TEST_SUITES += lua54 luajit openresty luarock

test-lua54: $(LUA54_MOD)
	@mkdir -p $(BUILD)/lua/tmp
	@$(LUA_SPEC_ENV) $(LUA54) $(BUSTED) --cpath='$(abspath $(BUILD))/lua/5.4/?.so' \
	  --lpath='$(abspath tests/lua)/?.lua' tests/lua

test-luajit: $(LUAJIT_MOD)
	@mkdir -p $(BUILD)/lua/tmp
	@$(LUA_SPEC_ENV) $(LUAJIT) $(BUSTED) --cpath='$(abspath $(BUILD))/lua/jit/?.so' \
	  --lpath='$(abspath tests/lua)/?.lua' tests/lua

test-openresty: $(LUAJIT_MOD)
	@bash tests/lua/openresty/test_openresty.sh $(abspath $(LUAJIT_MOD))

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
	@LUA_CPATH='$(LUA_ROCK_DIR)/tree-5.4/lib/lua/5.4/?.so' $(LUA54) tests/lua/rock_smoke.lua \
	  'sqlite://$(LUA_ROCK_DIR)/rock-5.4.db'
	@LUA_CPATH='$(LUA_ROCK_DIR)/tree-jit/lib/lua/5.1/?.so' $(LUAJIT) tests/lua/rock_smoke.lua \
	  'sqlite://$(LUA_ROCK_DIR)/rock-jit.db'
	@echo "2 passed, 0 failed"

# The benchmark's C side, the Lua module leaselock_bench
# (bench/lua/lbench.c), built beside each module by bench-lua only: the
# shipped module carries no benchmark code.
LUA_BENCH_MAP := bench/lua/leaselock_bench.map

$(BUILD)/bench/lua/5.4/leaselock_bench.so: bench/lua/lbench.c csrc/leaselock.h $(LIB_A) $(LUA_BENCH_MAP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(LUA54_INC) -shared -Wl,-Bsymbolic -Wl,--version-script=$(LUA_BENCH_MAP) \
	  $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

$(BUILD)/bench/lua/jit/leaselock_bench.so: bench/lua/lbench.c csrc/leaselock.h $(LIB_A) $(LUA_BENCH_MAP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(LUAJIT_INC) -shared -Wl,-Bsymbolic -Wl,--version-script=$(LUA_BENCH_MAP) \
	  $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

bench-lua: $(LUA54_MOD) $(LUAJIT_MOD) $(BUILD)/bench/lua/5.4/leaselock_bench.so \
	  $(BUILD)/bench/lua/jit/leaselock_bench.so
	@mkdir -p $(BUILD)/lua/tmp
	@LEASELOCK_BENCH_TMP=$(abspath $(BUILD))/lua/tmp \
	  LUA_CPATH='$(abspath $(BUILD))/lua/5.4/?.so;$(abspath $(BUILD))/bench/lua/5.4/?.so' \
	  $(BENCH_PIN) $(LUA54) bench/lua/bench_with.lua
	@LEASELOCK_BENCH_TMP=$(abspath $(BUILD))/lua/tmp \
	  LUA_CPATH='$(abspath $(BUILD))/lua/jit/?.so;$(abspath $(BUILD))/bench/lua/jit/?.so' \
	  $(BENCH_PIN) $(LUAJIT) bench/lua/bench_with.lua
