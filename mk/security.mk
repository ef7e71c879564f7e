# The core's unit tests, run once (no backend needed): URI redaction and
# the scrubbing of driver messages (no server contacted), malformed URIs,
# durations, the default URI, a million owner tokens; and the security
# suite.
#
#   make test-uri        tests/test_uri.c (also under ASan/UBSan)

TEST_SUITES += uri
ASAN_SUITES += uri
.PHONY: test-uri

test-uri: $(BUILD)/tests/test_uri
	$(BUILD)/tests/test_uri

# No password in the CLI's output or the Lua module's errors.
TEST_SUITES += security
.PHONY: test-security
test-security: $(LEASELOCK_CLI) $(LUA54_MOD)
	@bash tests/test_security.sh $(LEASELOCK_CLI) $(abspath $(BUILD))/lua/5.4
