# The MySQL/MariaDB backend: its suite (the contract suite, the exclusion test and
# tests/test_sql.c, built by mk/sql.mk, against $(MYSQL_URI), started by
# tests/with-servers.sh under "make test"; set it to point the suite at
# another server) and its benchmark.
#
#   bash tests/with-servers.sh make test-mysql
#   make bench-core-mysql   (servers started by bench-core)

TEST_SUITES += mysql
ASAN_SUITES += mysql
BENCH_CORE += mysql

.PHONY: test-mysql bench-core-mysql

# SERVER_SUITE_DEPS comes from mk/c-tests.mk: $$ reads it once every file is read.
test-mysql: $$(SERVER_SUITE_DEPS) $(if $(filter mysql,$(LL_BACKENDS)),$(BUILD)/tests/test_sql_mysql)
	@bash tests/server-suite.sh mysql MYSQL_URI $(BUILD)/tests test_sql_mysql

bench-core-mysql: $(BUILD)/bench/core_mysql
	@if [ -z "$${MYSQL_URI:-}" ]; then echo "bench-core-mysql: MYSQL_URI is not set"; exit 1; fi
	$(BENCH_PIN) $< "$$MYSQL_URI" $(SQL_BENCH_PAIRS) $(SQL_BENCH_ROUNDS)
