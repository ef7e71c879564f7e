# Every sample of README.md and docs/*.md runs (tests/check_samples.py):
# Python with the built extension, Lua under lua5.4 with the built module,
# C compiled against the library, the CLI's shell lines with the built
# command, each on a temporary SQLite database with a timeout. The refs
# suite only parses them; this one needs the builds.

TEST_SUITES += samples
.PHONY: test-samples
test-samples: $$(LEASELOCK_CLI) $$(PY_BUILD)/.built $$(LUA54_MOD) $$(LIB_A)
	@$(PYTHON) tests/check_samples.py --cli $(LEASELOCK_CLI) --pylib $(PY_LIB) \
	  --lua $(LUA54) --lua-cpath '$(BUILD)/lua/5.4/?.so' --lib $(LIB_A) \
	  --cc '$(CC)' --ldlibs '$(LDLIBS_ALL)'
