# The history checker on real backends (tests/history/README.md): a suite
# of make test, and the longest of make stress's tools (mk/stress.mk).
#
#   make test-history   bounded: every backend, HISTORY_SECONDS each (needs
#                       MONGODB_URI, MYSQL_URI, POSTGRESQL_URI, which
#                       tests/with-servers.sh sets)
#   make stress-history the long run, its summaries into STRESS_DIR

HIST_WORKER := $(BUILD)/tests/hist_worker
HIST_LUA54 := $(BUILD)/history/5.4/histlua.so
HIST_LUAJIT := $(BUILD)/history/jit/histlua.so
# The Python extension (mk/python.mk) and the Lua modules (mk/lua.mk) too:
# a recursive variable, read as $$(HIST_DEPS) in prerequisites, so that
# their paths are read once every file is read.
HIST_DEPS = $(HIST_WORKER) $(HIST_LUA54) $(HIST_LUAJIT) $(PY_BUILD)/.built $(LUA54_MOD) $(LUAJIT_MOD)

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
.PHONY: test-history stress-history history-deps

history-deps: $$(HIST_DEPS)

# Bounded: about HISTORY_SECONDS + start-up per backend.
HISTORY_SECONDS ?= 6

# tests/history/*.c is checked by the format suite (mk/format.mk).
test-history: $$(HIST_DEPS)
	@bash tests/run-history.sh $(HISTORY_SECONDS) "" -- $(HIST_RUN)

# Long: rounds of STRESS_ROUND_SECONDS on each backend in turn until it
# has STRESS_GRANTS grants or STRESS_SECONDS have passed on it, with
# STRESS_NKEYS keys and the processes STRESS_WORKERS names (18 processes,
# 34 workers: C threads are the cheapest grants); about 400 grants/s per
# backend on 2 shared cores, so about 45 minutes for the 1,000,000 grants
# the table asks for (STRESS_GOAL_GRANTS, mk/stress.mk). The backends run one at a time:
# all four at once (load ~45 on 2 cores) pause workers for hundreds of ms
# between their check and their write, which shows up as late writes and
# lost updates the lock cannot prevent (fences can).
STRESS_ROUND_SECONDS ?= 60
STRESS_SECONDS ?= 900
STRESS_GRANTS ?= 250000
STRESS_NKEYS ?= 16
STRESS_WORKERS ?= --c-procs 6 --c-threads 4 --py-procs 4 --py-threads 2 --lua-procs 4

STRESS_TOOLS += history
stress-history: $$(HIST_DEPS)
	@bash tests/run-history.sh $(STRESS_ROUND_SECONDS) $(STRESS_DIR) -- $(HIST_RUN) -- \
	  --until-grants $(STRESS_GRANTS) --max-seconds $(STRESS_SECONDS) --nkeys $(STRESS_NKEYS) \
	  $(STRESS_WORKERS)
