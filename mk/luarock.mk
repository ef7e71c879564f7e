# The two targets leaselock-scm-1.rockspec builds with (build.type "make"):
# the Lua module for the interpreter luarocks names, from the same objects,
# backends and symbol map as `make lua` (mk/lua.mk).
#
#   make lua-rock LUA_INCDIR=DIR              luarocks' build step
#   make lua-rock-install INST_LIBDIR=DIR     its install step

LUA_ROCK_MOD := $(BUILD)/lua/luarocks/leaselock.so

.PHONY: lua-rock lua-rock-install

$(BUILD)/lua/luarocks/lleaselock.o: $(LUA_MOD_DEPS)
	@[ -n "$(LUA_INCDIR)" ] || { echo "lua-rock: LUA_INCDIR is not set (luarocks sets it)"; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -I$(LUA_INCDIR) -c $< -o $@

lua-rock: $(LUA_ROCK_MOD)

lua-rock-install: $(LUA_ROCK_MOD)
	@[ -n "$(INST_LIBDIR)" ] || { echo "lua-rock-install: INST_LIBDIR is not set (luarocks sets it)"; exit 1; }
	install -d '$(INST_LIBDIR)'
	install -m 755 $< '$(INST_LIBDIR)/leaselock.so'
