# The security suite (tests/test_security.sh): no password in the CLI's
# output or the Lua module's errors.

TEST_SUITES += security
.PHONY: test-security

# The CLI (mk/cli.mk) and the Lua module (mk/lua.mk): $$ reads their paths
# once every file is read.
test-security: $$(LEASELOCK_CLI) $$(LUA54_MOD)
	@bash tests/test_security.sh $(LEASELOCK_CLI) $(abspath $(BUILD))/lua/5.4
