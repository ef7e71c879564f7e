# MySQL/MariaDB and PostgreSQL backends: the contract suite, the exclusion
# test and the SQL-specific tests against $(MYSQL_URI) / $(POSTGRES_URI)
# (started by tests/with-servers.sh under "make test"; set them to point
# the suites at other servers), and the two benchmarks.
#
#   bash tests/with-servers.sh make test-mysql test-postgres
#   make bench-core-mysql bench-core-postgresql   (servers started by bench-core)

TEST_SUITES += mysql postgres
ASAN_SUITES += mysql postgres
BENCH_CORE += mysql postgresql

.PHONY: test-mysql test-postgres bench-core-mysql bench-core-postgresql

$(BUILD)/tests/test_sql: tests/test_sql.c tests/testlib.h $(LIB_A) | $(BUILD)/tests
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL)

# Runs the three programs against one URI; fails when the URI is unset.
# $(1): variable name, $(2): suite name.
define sql_suite
	@if [ -z "$${$(1):-}" ]; then \
	  echo "$(2): $(1) is not set (run under tests/with-servers.sh, or set it)"; \
	  echo "$(2): 0 passed, 1 failed"; exit 1; fi
	@rc=0; \
	echo "--- $(2): contract"; $(BUILD)/tests/test_contract "$$$(1)" || rc=1; \
	echo "--- $(2): exclusion"; $(BUILD)/tests/test_exclusion "$$$(1)" || rc=1; \
	echo "--- $(2): sql"; $(BUILD)/tests/test_sql "$$$(1)" || rc=1; \
	exit $$rc
endef

test-mysql: $(BUILD)/tests/test_contract $(BUILD)/tests/test_exclusion $(BUILD)/tests/test_sql
	$(call sql_suite,MYSQL_URI,mysql)

test-postgres: $(BUILD)/tests/test_contract $(BUILD)/tests/test_exclusion $(BUILD)/tests/test_sql
	$(call sql_suite,POSTGRES_URI,postgres)

# SQL_BENCH_PAIRS acquire+release pairs per round, SQL_BENCH_ROUNDS rounds
# (engine and bare client interleaved; the client pinned by BENCH_PIN).
SQL_BENCH_PAIRS ?= 200
SQL_BENCH_ROUNDS ?= 61

$(BUILD)/bench/core_mysql: bench/core_mysql.c bench/bench.h $(LIB_A) | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL)

$(BUILD)/bench/core_postgresql: bench/core_postgresql.c bench/bench.h $(LIB_A) | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL)

bench-core-mysql: $(BUILD)/bench/core_mysql
	@if [ -z "$${MYSQL_URI:-}" ]; then echo "bench-core-mysql: MYSQL_URI is not set"; exit 1; fi
	$(BENCH_PIN) $(BUILD)/bench/core_mysql "$$MYSQL_URI" $(SQL_BENCH_PAIRS) $(SQL_BENCH_ROUNDS)

bench-core-postgresql: $(BUILD)/bench/core_postgresql
	@if [ -z "$${POSTGRES_URI:-}" ]; then echo "bench-core-postgresql: POSTGRES_URI is not set"; exit 1; fi
	$(BENCH_PIN) $(BUILD)/bench/core_postgresql "$$POSTGRES_URI" $(SQL_BENCH_PAIRS) $(SQL_BENCH_ROUNDS)
