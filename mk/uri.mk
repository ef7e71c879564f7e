# The core's unit tests, run once (no backend needed): URI redaction and
# the scrubbing of driver messages (no server contacted), malformed URIs,
# durations, the default URI, a million owner tokens.
#
#   make test-uri        tests/test_uri.c (also under ASan/UBSan)

TEST_SUITES += uri
ASAN_SUITES += uri
.PHONY: test-uri

test-uri: $(BUILD)/tests/test_uri
	$(BUILD)/tests/test_uri
