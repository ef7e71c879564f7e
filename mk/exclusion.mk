# The thread/process exclusion test (tests/test_exclusion.c) on SQLite; the
# server suites run it on their databases too.

TEST_SUITES += exclusion-sqlite
ASAN_SUITES += exclusion-sqlite
.PHONY: test-exclusion-sqlite

test-exclusion-sqlite: $(BUILD)/tests/test_exclusion
	@mkdir -p $(SQLITE_TEST_DIR)
	$(BUILD)/tests/test_exclusion sqlite://$(SQLITE_TEST_DIR)/exclusion.db
