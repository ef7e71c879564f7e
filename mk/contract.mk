# The contract suite (tests/test_contract.c) on the fake backend and on
# SQLite; the server suites run it on their databases too.

$(BUILD)/tests/test_contract: $(BUILD)/tests/fake_backend.o

TEST_SUITES += contract-fake contract-sqlite
ASAN_SUITES += contract-fake contract-sqlite
.PHONY: test-contract-fake test-contract-sqlite

test-contract-fake: $(BUILD)/tests/test_contract
	$(BUILD)/tests/test_contract fake://

test-contract-sqlite: $(BUILD)/tests/test_contract
	@rm -rf $(SQLITE_TEST_DIR) && mkdir -p $(SQLITE_TEST_DIR)
	$(BUILD)/tests/test_contract sqlite://$(SQLITE_TEST_DIR)/contract.db
