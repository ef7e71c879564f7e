# The engine's own suites: the contract on the fake backend and on SQLite,
# and the thread/process exclusion test on SQLite.

TEST_CFLAGS = $(CFLAGS_ALL) -Itests -Wno-unused-function
TEST_LIBS =

# Every C suite is a program build/tests/test_<name> from tests/test_<name>.c,
# the helper objects it names as prerequisites (build/tests/<helper>.o
# from tests/<helper>.c and .h) and the core; TEST_LIBS adds libraries.
$(BUILD)/tests/%.o: tests/%.c tests/%.h csrc/ll_internal.h | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -c $< -o $@

$(BUILD)/tests/test_%: tests/test_%.c tests/testlib.h tests/queue_cases.h tests/notify_tests.h $(LIB_A) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) $< $(filter %.o,$^) $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) $(TEST_LIBS) -o $@

$(BUILD)/tests/test_contract: $(BUILD)/tests/fake_backend.o

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

# The deterministic simulation (tests/test_sim.c): the engine's deadline
# code against a model database, and deadline.c built once more without
# its margin, as a mutant the simulator must catch.
DEADLINE_FNS := margin_ms start renew_sent renew_done may_rerun
$(BUILD)/tests/deadline_nomargin.o: csrc/deadline.c csrc/ll_internal.h mk/core.mk | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -DLL_DEADLINE_MARGIN_MS=0 -DLL_DEADLINE_RATE_DIV=INT64_MAX \
	  $(foreach f,$(DEADLINE_FNS),-Dll_deadline_$(f)=nomargin_deadline_$(f)) -c $< -o $@

$(BUILD)/tests/test_sim: $(BUILD)/tests/deadline_nomargin.o

# Bounded here; "make stress" runs it for millions of steps.
SIM_SEEDS ?= 300
SIM_STEPS ?= 20000
STRESS_SIM_SEEDS ?= 5000

STRESS_TOOLS += sim
stress-sim: $(BUILD)/tests/test_sim
	STRESS_OUT=$(STRESS_DIR) $(BUILD)/tests/test_sim --seeds $(STRESS_SIM_SEEDS) --steps $(SIM_STEPS)
TEST_SUITES += sim
ASAN_SUITES += sim
.PHONY: test-sim
test-sim: $(BUILD)/tests/test_sim
	$(BUILD)/tests/test_sim --seeds $(SIM_SEEDS) --steps $(SIM_STEPS)
	$(BUILD)/tests/test_sim --seeds $(SIM_SEEDS) --steps $(SIM_STEPS) --policy nomargin --expect-violation
	$(BUILD)/tests/test_sim --seeds $(SIM_SEEDS) --steps $(SIM_STEPS) --policy latest --expect-violation
