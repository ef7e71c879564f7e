# The backend modules' suite (tests/test_modules.sh): a process on SQLite
# (the CLI, Python, Lua) maps no other backend's client library; the first
# URI of a scheme loads its module; a module, or its client library,
# missing answers UNSUPPORTED with the package to install. (The modules
# themselves are built by the Makefile: LL_MODULE_SOS.)

TEST_SUITES += modules
.PHONY: test-modules

test-modules: $$(LEASELOCK_CLI) $$(PY_BUILD)/.built $$(LUA54_MOD) $(LL_MODULE_SOS)
	@bash tests/test_modules.sh $(BUILD) $(LEASELOCK_CLI) $(PY_LIB) $(LUA54) \
	  $(dir $(LUA54_MOD)) "$(LL_MODULES)"
