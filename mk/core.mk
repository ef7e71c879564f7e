# The engine's own suites: the contract on the fake backend and on SQLite,
# and the thread/process exclusion test on SQLite.

TEST_CFLAGS = $(CFLAGS_ALL) -Itests -Wno-unused-function

$(BUILD)/tests/fake_backend.o: tests/fake_backend.c tests/fake_backend.h csrc/ll_internal.h | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -c $< -o $@

$(BUILD)/tests/test_contract: tests/test_contract.c tests/testlib.h $(BUILD)/tests/fake_backend.o $(LIB_A) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) $< $(BUILD)/tests/fake_backend.o $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

$(BUILD)/tests/test_exclusion: tests/test_exclusion.c tests/testlib.h $(LIB_A) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

# A fresh SQLite file per run.
SQLITE_TEST_DIR = $(abspath $(BUILD))/sqlite-test

TEST_SUITES += contract-fake contract-sqlite exclusion-sqlite
ASAN_SUITES += contract-fake contract-sqlite exclusion-sqlite
.PHONY: test-contract-fake test-contract-sqlite test-exclusion-sqlite

test-contract-fake: $(BUILD)/tests/test_contract
	$(BUILD)/tests/test_contract fake://

test-contract-sqlite: $(BUILD)/tests/test_contract
	@rm -rf $(SQLITE_TEST_DIR) && mkdir -p $(SQLITE_TEST_DIR)
	$(BUILD)/tests/test_contract sqlite://$(SQLITE_TEST_DIR)/contract.db

test-exclusion-sqlite: $(BUILD)/tests/test_exclusion
	@mkdir -p $(SQLITE_TEST_DIR)
	$(BUILD)/tests/test_exclusion sqlite://$(SQLITE_TEST_DIR)/exclusion.db
