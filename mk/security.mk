# Security suite: URI redaction and the scrubbing of driver messages (no
# server contacted), the duration parser's bounds, a million owner tokens.
#
#   make test-uri        tests/test_uri.c (also under ASan/UBSan)

TEST_SUITES += uri
ASAN_SUITES += uri
.PHONY: test-uri

$(BUILD)/tests/test_uri: tests/test_uri.c tests/testlib.h $(LIB_A) | $(BUILD)/tests
	$(CC) $(CFLAGS_ALL) -Itests -Wno-unused-function $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

test-uri: $(BUILD)/tests/test_uri
	$(BUILD)/tests/test_uri

# No password in the CLI's output or the Lua module's errors.
TEST_SUITES += security
.PHONY: test-security
test-security: $(LEASELOCK_CLI) $(LUA54_MOD)
	@bash tests/test_security.sh $(LEASELOCK_CLI) $(abspath $(BUILD))/lua/5.4
