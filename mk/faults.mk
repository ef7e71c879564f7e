# Faults on real servers (issue 12, suite item 3): Toxiproxy between the
# clients and MongoDB / MariaDB / PostgreSQL (latency, a blackholed
# connection, reset peers, a reply cut mid-way, the server unreachable or
# restarted), holders SIGKILLed and SIGSTOPped on every backend, clients
# under faketime. Each scenario checks the grant history: no overlap,
# fences growing, every loss reported by the local deadline, and the same
# clients working again afterwards.
#
#   bash tests/with-servers.sh make test-faults
#   (with your own servers: MONGODB_URI, MYSQL_URI, POSTGRESQL_URI and the
#   commands that restart the SQL ones, LEASELOCK_MYSQL_RESTART and
#   LEASELOCK_POSTGRESQL_RESTART; a missing one fails the suite)
#   LEASELOCK_FAULTS_ROUNDS=20 ...   every scenario 20 times (make stress)
#   STRESS_OUT=DIR ...               also writes DIR/faults.summary
#   FAULTS_SELECT='latency'          a pytest -k expression (within each group)
#
# Toxiproxy is built once with `go install` (tests/faults/install-toxiproxy.sh)
# into build/tools. tests/faults/run.sh runs three groups of backends at
# once; the run is bounded by FAULTS_TIMEOUT seconds.

TEST_SUITES += faults

# Seconds for the whole run (one round takes about 70 s here).
FAULTS_TIMEOUT ?= $$((300 + 240 * $${LEASELOCK_FAULTS_ROUNDS:-1}))
FAULTS_PYTEST_ARGS ?=

# PY_LIB (mk/python.mk) is read when the recipe runs; python-ext builds
# the extension.

.PHONY: test-faults toxiproxy

toxiproxy:
	@bash tests/faults/install-toxiproxy.sh >/dev/null

test-faults: python-ext
	@command -v faketime >/dev/null || { echo "test-faults: faketime is missing (make deps)"; exit 1; }
	@bin=$$(bash tests/faults/install-toxiproxy.sh) || exit 1; \
	  TOXIPROXY_BIN="$$bin" PYTHONPATH=$(abspath $(PY_LIB)) PYTHONDONTWRITEBYTECODE=1 PYTHON=$(PYTHON) \
	  timeout -k 10 $(FAULTS_TIMEOUT) bash tests/faults/run.sh $(FAULTS_PYTEST_ARGS)

# For `make stress`: every scenario STRESS_FAULTS_ROUNDS times, its totals
# into the stress table.
STRESS_FAULTS_ROUNDS ?= 5
STRESS_TOOLS += faults
stress-faults:
	@LEASELOCK_FAULTS_ROUNDS=$(STRESS_FAULTS_ROUNDS) STRESS_OUT=$(STRESS_DIR) \
	  $(MAKE) --no-print-directory test-faults
