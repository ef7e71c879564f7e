# Failover of replicated databases (tests/failover/): topologies the suite
# starts itself (tests/topology/: a PostgreSQL primary with a streaming
# standby, asynchronous and synchronous, and every other kind whose module
# exists), each scenario killing or cutting off the primary and promoting
# a standby, then checking what a holder may rely on: no second holder
# while a lost grant may live, fences that never go back, calls bounded by
# their caller's timeout, the keys' unavailability measured.
#
#   make test-failover
#   FAILOVER_SELECT='pg-async'           a pytest -k expression
#   LEASELOCK_FAILOVER_ROUNDS=5 ...      every scenario 5 times
#   python3 tests/topology/run.py --help one topology by hand
#
# Toxiproxy is built once with `go install` (tests/faults/install-toxiproxy.sh).
# A suite of make test in its side lane (tests/run-suites.sh): it waits
# out lock-delays and restarts on servers of its own, beside the others.

TEST_SUITES_SIDE += failover
TEST_PREPARE += toxiproxy
STRESS_TOOLS += failover

FAILOVER_TIMEOUT ?= $$((600 + 300 * $${LEASELOCK_FAILOVER_ROUNDS:-1}))
FAILOVER_SELECT ?=
FAILOVER_PYTEST_ARGS ?=

# PY_LIB (mk/python.mk) is read when the recipe runs; python-ext builds
# the extension. -s: the scenarios print their timings as they go.
.PHONY: test-failover stress-failover

test-failover: python-ext
	@bin=$$(bash tests/faults/install-toxiproxy.sh) || exit 1; \
	  cd tests/failover && TOXIPROXY_BIN="$$bin" PYTHONPATH=$(abspath $(PY_LIB)) \
	  PYTHONDONTWRITEBYTECODE=1 timeout -k 10 $(FAILOVER_TIMEOUT) $(PYTHON) -m pytest -q -s \
	  -p no:cacheprovider --tb=short -rs $(if $(FAILOVER_SELECT),-k '$(FAILOVER_SELECT)') \
	  $(FAILOVER_PYTEST_ARGS) .

# For `make stress`: every scenario STRESS_FAILOVER_ROUNDS times (25: over
# 100 failovers per topology), one summary per topology into the table.
STRESS_FAILOVER_ROUNDS ?= 25
stress-failover:
	@LEASELOCK_FAILOVER_ROUNDS=$(STRESS_FAILOVER_ROUNDS) STRESS_OUT=$(abspath $(STRESS_DIR)) \
	  $(MAKE) --no-print-directory test-failover
