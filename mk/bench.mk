# make bench: every comparison in one run (bench/report/run.py), with the
# test servers started around it, writing docs/benchmarks.md, its plots
# (docs/bench/*.png) and the raw numbers (docs/bench/results.csv). Not part
# of make test. It runs the programs of bench-core, bench-python's core
# loop, bench-lua's script and make bench-contention as its parts.
#
#   make bench                   the full run (about 15 minutes on 2 CPUs)
#   BENCH_QUICK=1 make bench     short runs: checks that it all works
#   BENCH_ONLY=scale,memory make bench
#                                some of: engine python lua alternatives startup
#                                contention scale memory safety

BENCH_VENV := $(BUILD)/bench-venv
# The benchmark's Python packages, from PyPI, in a venv of its own:
# matplotlib for the plots, the alternatives users pick (redis-py,
# python-redis-lock, filelock) and the drivers of the pure-Python peers
# (PyMySQL, psycopg 3, pymongo: PYMONGO_SPEC, the last line that speaks to
# the test server, mk/python.mk).
BENCH_PY_DEPS ?= matplotlib redis python-redis-lock filelock PyMySQL psycopg[binary]

.PHONY: bench bench-build

$(BENCH_VENV)/.ready: mk/bench.mk mk/python.mk
	rm -rf $(BENCH_VENV)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --disable-pip-version-check \
	  $(foreach p,$(BENCH_PY_DEPS) $(PYMONGO_SPEC),'$(p)')
	@touch $@

# What the run uses, built (the names come from the other mk files: a
# recipe, expanded when it runs, once every file is read).
bench-build:
	@$(MAKE) --no-print-directory all $(PY_BUILD)/.built $(BENCH_VENV)/.ready $(PY_BENCH_LIB) \
	  $(CONTENTION_BENCH) $(addprefix $(BUILD)/bench/core_,$(BENCH_CORE)) \
	  $(BUILD)/bench/lua/5.4/leaselock_bench.so $(BUILD)/bench/lua/jit/leaselock_bench.so

bench: deps
	@bash bench/report/deps.sh
	@$(MAKE) --no-print-directory bench-build
	@bash tests/with-servers.sh env PYTHONPATH=$(abspath $(PY_LIB)) BUILD=$(BUILD) \
	  $(BENCH_VENV)/bin/python bench/report/run.py
