# MySQL/MariaDB and PostgreSQL backends: each has its own suite (the
# contract suite, the exclusion test and tests/test_sql.c against
# $(MYSQL_URI) / $(POSTGRESQL_URI), started by tests/with-servers.sh under
# "make test"; set them to point the suites at other servers) and its
# benchmark. tests/test_sql.c is linked once per database with its raw
# driver (tests/sql_mysql.c: libmariadb, tests/sql_postgresql.c: libpq), so
# a client library that is not found fails only its own suite.
#
#   bash tests/with-servers.sh make test-mysql test-postgresql
#   make bench-core-mysql bench-core-postgresql   (servers started by bench-core)

TEST_SUITES += mysql postgresql
ASAN_SUITES += mysql postgresql
BENCH_CORE += mysql postgresql

.PHONY: test-mysql test-postgresql bench-core-mysql bench-core-postgresql

$(BUILD)/tests/test_sql_%: tests/test_sql.c tests/sql_%.c tests/sql_driver.h tests/testlib.h tests/queue_cases.h tests/notify_tests.h $(LIB_A) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) tests/test_sql.c tests/sql_$*.c $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

SERVER_SUITE_DEPS = $(BUILD)/tests/test_contract $(BUILD)/tests/test_exclusion

test-mysql: $(SERVER_SUITE_DEPS) $(if $(filter mysql,$(LL_BACKENDS)),$(BUILD)/tests/test_sql_mysql)
	@bash tests/server-suite.sh mysql MYSQL_URI $(BUILD)/tests test_sql_mysql

test-postgresql: $(SERVER_SUITE_DEPS) $(if $(filter postgresql,$(LL_BACKENDS)),$(BUILD)/tests/test_sql_postgresql)
	@bash tests/server-suite.sh postgresql POSTGRESQL_URI $(BUILD)/tests test_sql_postgresql

# SQL_BENCH_PAIRS acquire+release pairs per round, SQL_BENCH_ROUNDS rounds
# (engine and bare client interleaved; the client pinned by BENCH_PIN).
SQL_BENCH_PAIRS ?= 200
SQL_BENCH_ROUNDS ?= 61

bench-core-mysql: $(BUILD)/bench/core_mysql
	@if [ -z "$${MYSQL_URI:-}" ]; then echo "bench-core-mysql: MYSQL_URI is not set"; exit 1; fi
	$(BENCH_PIN) $< "$$MYSQL_URI" $(SQL_BENCH_PAIRS) $(SQL_BENCH_ROUNDS)

bench-core-postgresql: $(BUILD)/bench/core_postgresql
	@if [ -z "$${POSTGRESQL_URI:-}" ]; then echo "bench-core-postgresql: POSTGRESQL_URI is not set"; exit 1; fi
	$(BENCH_PIN) $< "$$POSTGRESQL_URI" $(SQL_BENCH_PAIRS) $(SQL_BENCH_ROUNDS)
