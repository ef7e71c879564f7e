# How every C suite is built (no suite of its own: each suite's file names
# its program and runs it).
#
# A C suite is a program build/tests/test_<name> from tests/test_<name>.c,
# testlib.o (the asserts and their shared counts), the helper objects it
# names as prerequisites (build/tests/<helper>.o from tests/<helper>.c and
# .h: the proxies, the fake backend, the shared cases queue_cases.o and
# notify_cases.o) and the core; TEST_LIBS adds libraries. A white-box
# suite (one that calls a backend's own functions: test_mongodb,
# test_sql_*) sets TEST_WHITEBOX = $(LL_WHITEBOX_LINK) and names
# $(LL_WHITEBOX_A): it links the backends' objects itself and loads no
# module; the others load the modules, built before them, from
# $(BUILD)/leaselock-backends (LEASELOCK_BACKEND_PATH, set by the Makefile).

TEST_CFLAGS = $(CFLAGS_ALL) -Itests
TEST_LIBS =
TEST_WHITEBOX =

$(BUILD)/tests/%.o: tests/%.c tests/%.h tests/testlib.h csrc/ll_internal.h | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -c $< -o $@

$(BUILD)/tests/test_%: tests/test_%.c tests/testlib.h $(BUILD)/tests/testlib.o $(LIB_A) \
  | $(BUILD)/tests $(LL_MODULE_SOS)
	$(CC) $(TEST_CFLAGS) $< $(filter %.o,$^) $(TEST_WHITEBOX) $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) \
	  $(TEST_LIBS) -o $@

# What the server suites (mongodb, mysql, postgresql: tests/server-suite.sh)
# run besides their own program.
SERVER_SUITE_DEPS = $(BUILD)/tests/test_contract $(BUILD)/tests/test_exclusion

# A fresh SQLite file per run, for the suites on SQLite.
SQLITE_TEST_DIR = $(abspath $(BUILD))/sqlite-test
