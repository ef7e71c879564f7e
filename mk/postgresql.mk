# The PostgreSQL backend: its suite (the contract suite, the exclusion test and
# tests/test_sql.c, built by mk/sql.mk, against $(POSTGRESQL_URI), started by
# tests/with-servers.sh under "make test"; set it to point the suite at
# another server) and its benchmark.
#
#   bash tests/with-servers.sh make test-postgresql
#   make bench-core-postgresql   (servers started by bench-core)

TEST_SUITES += postgresql
ASAN_SUITES += postgresql
BENCH_CORE += postgresql

.PHONY: test-postgresql bench-core-postgresql

# SERVER_SUITE_DEPS comes from mk/c-tests.mk: $$ reads it once every file is read.
test-postgresql: $$(SERVER_SUITE_DEPS) $(if $(filter postgresql,$(LL_BACKENDS)),$(BUILD)/tests/test_sql_postgresql)
	@bash tests/server-suite.sh postgresql POSTGRESQL_URI $(BUILD)/tests test_sql_postgresql

bench-core-postgresql: $(BUILD)/bench/core_postgresql
	@if [ -z "$${POSTGRESQL_URI:-}" ]; then echo "bench-core-postgresql: POSTGRESQL_URI is not set"; exit 1; fi
	$(BENCH_PIN) $< "$$POSTGRESQL_URI" $(SQL_BENCH_PAIRS) $(SQL_BENCH_ROUNDS)
