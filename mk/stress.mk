# The history checker on real backends (tests/history/README.md), and the
# table `make stress` prints.
#
#   make test-history   bounded: every backend, HISTORY_SECONDS each (a
#                       suite of make test; needs MONGODB_URI, MYSQL_URI,
#                       POSTGRESQL_URI, which tests/with-servers.sh sets)
#   make stress         the long runs of every tool in STRESS_TOOLS, the
#                       servers started around them, then one table per
#                       backend from the summaries in STRESS_DIR
#
# A stress tool `x` adds itself with `STRESS_TOOLS += x` and defines
# stress-x, which writes one or more summary files into $(STRESS_DIR)
# (key=value lines or a JSON object: tool=, backend=, and any counts, e.g.
# grants, overlaps, lost_updates, faults_injected, simulated_steps,
# fuzz_executions, crashes); tests/history/table.py adds them up per
# backend and fails when a violation column is not 0.

HIST_WORKER := $(BUILD)/tests/hist_worker
HIST_LUA54 := $(BUILD)/history/5.4/histlua.so
HIST_LUAJIT := $(BUILD)/history/jit/histlua.so
HIST_DEPS := $(HIST_WORKER) $(HIST_LUA54) $(HIST_LUAJIT) $(PY_BUILD)/.built $(LUA54_MOD) $(LUAJIT_MOD)

$(HIST_WORKER): tests/history/worker.c csrc/leaselock.h $(LIB_A) | $(BUILD)/tests
	$(CC) $(CFLAGS_ALL) $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

# The Lua workers' helper (clock, sleep, a lease's remaining time), with
# its own copy of the core kept local.
$(BUILD)/history/5.4/histlua.so: tests/history/histlua.c csrc/leaselock.h $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(LUA54_INC) -shared -Wl,--exclude-libs,ALL $< $(LIB_A) $(LDLIBS_ALL) -o $@

$(BUILD)/history/jit/histlua.so: tests/history/histlua.c csrc/leaselock.h $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(LUAJIT_INC) -shared -Wl,--exclude-libs,ALL $< $(LIB_A) $(LDLIBS_ALL) -o $@

HIST_RUN = $(PYTHON) tests/history/run.py --c-worker $(HIST_WORKER) \
	--pythonpath $(abspath $(PY_LIB)) \
	--lua54-cpath '$(abspath $(BUILD))/lua/5.4/?.so;$(abspath $(BUILD))/history/5.4/?.so' \
	--luajit-cpath '$(abspath $(BUILD))/lua/jit/?.so;$(abspath $(BUILD))/history/jit/?.so' \
	--workdir $(abspath $(BUILD))/history/runs

TEST_SUITES += history
.PHONY: test-history stress-history stress-tools history-deps

history-deps: $(HIST_DEPS)

# Bounded: about HISTORY_SECONDS + start-up per backend.
HISTORY_SECONDS ?= 6

# The Makefile's format check covers tests/*.c: this suite checks its own C.
test-history: $(HIST_DEPS)
	@clang-format --dry-run --Werror tests/history/*.c
	@bash tests/run-history.sh $(HISTORY_SECONDS) "" -- $(HIST_RUN)

# Long: rounds of STRESS_ROUND_SECONDS on each backend in turn until it
# has STRESS_GRANTS grants or STRESS_SECONDS have passed on it, with
# STRESS_NKEYS keys and the processes STRESS_WORKERS names (18 processes,
# 34 workers: C threads are the cheapest grants); about 400 grants/s per
# backend on 2 shared cores, so about 45 minutes for the 1,000,000 grants
# the table asks for (STRESS_GOAL_GRANTS). The backends run one at a time:
# all four at once (load ~45 on 2 cores) pause workers for hundreds of ms
# between their check and their write, which shows up as late writes and
# lost updates the lock cannot prevent (fences can).
STRESS_DIR ?= $(BUILD)/stress
STRESS_ROUND_SECONDS ?= 60
STRESS_SECONDS ?= 900
STRESS_GRANTS ?= 250000
STRESS_NKEYS ?= 16
STRESS_WORKERS ?= --c-procs 6 --c-threads 4 --py-procs 4 --py-threads 2 --lua-procs 4
STRESS_GOAL_GRANTS ?= 1000000

STRESS_TOOLS += history
stress-history: $(HIST_DEPS)
	@bash tests/run-history.sh $(STRESS_ROUND_SECONDS) $(STRESS_DIR) -- $(HIST_RUN) -- \
	  --until-grants $(STRESS_GRANTS) --max-seconds $(STRESS_SECONDS) --nkeys $(STRESS_NKEYS) \
	  $(STRESS_WORKERS)

# Run by `make stress` inside tests/with-servers.sh: every tool, then the table.
stress-tools:
	@PYTHON=$(PYTHON) bash tests/run-stress.sh $(STRESS_DIR) $(STRESS_GOAL_GRANTS) $(STRESS_TOOLS)
