# The deterministic simulation (tests/test_sim.c): the engine's deadline
# code against a model database, and deadline.c built once more without
# its margin, as a mutant the simulator must catch.
#
#   make test-sim     SIM_SEEDS seeds of SIM_STEPS steps (a suite of make test)
#   make stress-sim   STRESS_SIM_SEEDS seeds (part of make stress)

DEADLINE_FNS := margin_ms start renew_sent renew_done may_rerun
$(BUILD)/tests/deadline_nomargin.o: csrc/deadline.c csrc/ll_internal.h mk/sim.mk | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -DLL_DEADLINE_MARGIN_MS=0 -DLL_DEADLINE_RATE_DIV=INT64_MAX \
	  $(foreach f,$(DEADLINE_FNS),-Dll_deadline_$(f)=nomargin_deadline_$(f)) -c $< -o $@

$(BUILD)/tests/test_sim: $(BUILD)/tests/deadline_nomargin.o

# Bounded here; "make stress" runs it for millions of steps.
SIM_SEEDS ?= 300
SIM_STEPS ?= 20000
STRESS_SIM_SEEDS ?= 5000

TEST_SUITES += sim
ASAN_SUITES += sim
STRESS_TOOLS += sim
.PHONY: test-sim stress-sim

test-sim: $(BUILD)/tests/test_sim
	$(BUILD)/tests/test_sim --seeds $(SIM_SEEDS) --steps $(SIM_STEPS)
	$(BUILD)/tests/test_sim --seeds $(SIM_SEEDS) --steps $(SIM_STEPS) --policy nomargin --expect-violation
	$(BUILD)/tests/test_sim --seeds $(SIM_SEEDS) --steps $(SIM_STEPS) --policy latest --expect-violation

stress-sim: $(BUILD)/tests/test_sim
	STRESS_OUT=$(STRESS_DIR) $(BUILD)/tests/test_sim --seeds $(STRESS_SIM_SEEDS) --steps $(SIM_STEPS)
