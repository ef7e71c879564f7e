# Python binding: the extension built by setup.py from the core's sources,
# its pytest suite, the demo and the benchmark.
#
#   make test-python    builds into $(BUILD)/python/lib, runs tests/python with
#                       pytest on SQLite and every server whose URI is set
#   make test-python-typing
#                       mypy --strict on the package, examples/*.py and the
#                       API's types (tests/python/typing_check.py)
#   make test-python-versions
#                       builds and runs tests/python (on SQLite) with each
#                       CPython of PY_VERSIONS found under ~/.pyenv/versions
#                       (except $(PYTHON) itself, which test-python runs);
#                       one missing is reported as skipped
#   make demo-python    processes taking turns on one key (embedded default)
#   make bench-python   with-lock pairs/s vs the C core vs pure pymongo
#
# Development build in the source tree: python3 setup.py build_ext --inplace

TEST_SUITES += python python-typing
# Builds for each CPython (mostly the compiler and pip): beside the others.
TEST_SUITES_SIDE += python-versions
DEMOS += python

PY_BUILD = $(BUILD)/python
PY_LIB = $(PY_BUILD)/lib
PY_VENV = $(BUILD)/venv
PY_SRCS = setup.py $(wildcard python/*.c python/*.h python/leaselock/*.py python/leaselock/*.pyi) \
	csrc/SOURCES $(LL_SOURCES) $(wildcard csrc/SOURCES.* csrc/*.h csrc/*.c)
PYTEST_ARGS ?=

.PHONY: python-ext test-python test-python-typing test-python-versions demo-python bench-python

# setup.py compiles the same sources as the Makefile (csrc/SOURCES) with the
# same pkg-config detection; LEASELOCK_WERROR adds -Wall -Wextra -Werror.
$(PY_BUILD)/.built: $(PY_SRCS)
	@mkdir -p $(PY_BUILD)
	LEASELOCK_WERROR=1 $(PYTHON) setup.py -q build --build-base $(PY_BUILD) \
	  --build-lib $(PY_LIB) --build-temp $(PY_BUILD)/temp -j 2
	@touch $@

python-ext: $(PY_BUILD)/.built

# Test-only packages (Hypothesis for the property tests, mypy for the
# typing suite), from PyPI into a directory of our own that the suites put
# on PYTHONPATH.
PY_TEST_DEPS = $(BUILD)/pytest-deps
TEST_PREPARE += $(PY_BUILD)/.built $(PY_TEST_DEPS)/.ready
HYPOTHESIS_SPEC ?= hypothesis>=6.80,<7
MYPY_SPEC ?= mypy>=1.11,<3

$(PY_TEST_DEPS)/.ready: mk/python.mk
	rm -rf $(PY_TEST_DEPS)
	$(PYTHON) -m pip install -q --disable-pip-version-check --target $(PY_TEST_DEPS) \
	  '$(HYPOTHESIS_SPEC)' '$(MYPY_SPEC)'
	@touch $@

test-python: $(PY_BUILD)/.built $(PY_TEST_DEPS)/.ready
	cd tests/python && PYTHONPATH=$(abspath $(PY_LIB)):$(abspath $(PY_TEST_DEPS)) PYTHONDONTWRITEBYTECODE=1 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) .

# The package's own types and the examples, as a user's mypy --strict sees
# them (the .pyi stub stands for the extension: no build needed).
PY_TYPED = python/leaselock $(wildcard examples/*.py) tests/python/typing_check.py

test-python-typing: $(PY_TEST_DEPS)/.ready
	PYTHONPATH=$(abspath $(PY_TEST_DEPS)) MYPYPATH=python $(PYTHON) -m mypy --strict \
	  --cache-dir $(BUILD)/mypy-cache $(PY_TYPED)

# CPython versions the package supports (pyproject's requires-python and
# classifiers); each is built and tested with its own interpreter.
PY_VERSIONS ?= 3.11 3.12 3.13
PY_VERSIONS_DEPS ?= pytest>=7 $(HYPOTHESIS_SPEC) setuptools>=61

test-python-versions:
	@PYTHON='$(PYTHON)' PY_VERSIONS_DEPS='$(PY_VERSIONS_DEPS)' bash tests/python/run_versions.sh $(BUILD) $(PY_VERSIONS)

demo-python: $(PY_BUILD)/.built
	PYTHONPATH=$(abspath $(PY_LIB)) $(PYTHON) examples/python_demo.py

# pymongo for the benchmark's pure-Python implementation, in a venv of our
# own. 4.14 is the last line that speaks to MongoDB 4.2 (wire version 8),
# which the test server (mongo-java-server) reports.
PYMONGO_SPEC ?= pymongo>=4.14,<4.15

$(PY_VENV)/.ready: mk/python.mk
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q --disable-pip-version-check '$(PYMONGO_SPEC)'
	@touch $@

BENCH_PY_PAIRS ?= 500
BENCH_PY_SQLITE_PAIRS ?= 500
BENCH_PY_SQLITE_ROUNDS ?= 61
BENCH_PY_ROUNDS ?= 15

# The benchmark's C side (the same loop inside the core), a library of its
# own that bench.py loads with ctypes: benchmark code stays out of the
# shipped extension.
PY_BENCH_LIB := $(BUILD)/bench/python/libllbench.so

$(PY_BENCH_LIB): bench/python/core_loop.c bench/bare_sqlite.h $(wildcard csrc/*.h) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -shared -Wl,-Bsymbolic $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

bench-python: $(PY_BUILD)/.built $(PY_VENV)/.ready $(PY_BENCH_LIB)
	@# Only MongoDB is needed: naming the SQL servers keeps them from starting.
	@MYSQL_URI=unused POSTGRESQL_URI=unused bash tests/with-servers.sh env PYTHONPATH=$(abspath $(PY_LIB)) \
	  $(BENCH_PIN) $(PY_VENV)/bin/python bench/python/bench.py --pairs $(BENCH_PY_PAIRS) --rounds $(BENCH_PY_ROUNDS) \
	  --sqlite-pairs $(BENCH_PY_SQLITE_PAIRS) --sqlite-rounds $(BENCH_PY_SQLITE_ROUNDS) \
	  --core-lib $(abspath $(PY_BENCH_LIB))
