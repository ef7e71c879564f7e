# What the MySQL/MariaDB and PostgreSQL suites share (their suites and
# benchmarks: mk/mysql.mk, mk/postgresql.mk). tests/test_sql.c is linked
# once per database with its raw driver (tests/sql_mysql.c: libmariadb,
# tests/sql_postgresql.c: libpq), so a client library that is not found
# fails only its own suite. White-box: the backends' objects are linked in
# (LL_WHITEBOX_LINK), no module is loaded.

SQL_TEST_OBJS = $(addprefix $(BUILD)/tests/,testlib.o queue_cases.o notify_cases.o)

$(BUILD)/tests/test_sql_%: tests/test_sql.c tests/sql_%.c tests/sql_driver.h tests/testlib.h \
  $(SQL_TEST_OBJS) $(LIB_A) $(LL_WHITEBOX_A) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) tests/test_sql.c tests/sql_$*.c $(SQL_TEST_OBJS) $(LL_WHITEBOX_LINK) $(LIB_A) \
	  $(SANFLAGS) $(LDLIBS_ALL) $(LL_WHITEBOX_LIBS) -o $@

# SQL_BENCH_PAIRS acquire+release pairs per round, SQL_BENCH_ROUNDS rounds
# (engine and bare client interleaved; the client pinned by BENCH_PIN).
SQL_BENCH_PAIRS ?= 200
SQL_BENCH_ROUNDS ?= 61
