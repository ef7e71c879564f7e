# Embedded SQLite backend: its own suite and its benchmark.
#
#   make test-sqlite        backend-specific cases (URIs, schema, paths, keys, fork)
#   make bench-core-sqlite  acquire+release pairs/s: engine vs a bare sqlite3 program

TEST_SUITES += sqlite
ASAN_SUITES += sqlite
BENCH_CORE += sqlite

.PHONY: test-sqlite bench-core-sqlite

# The shared fair-queue and notification cases (tests/queue_cases.c,
# tests/notify_cases.c) run here on SQLite too.
$(BUILD)/tests/test_sqlite: $(BUILD)/tests/queue_cases.o $(BUILD)/tests/notify_cases.o

test-sqlite: $(BUILD)/tests/test_sqlite
	$(BUILD)/tests/test_sqlite

# SQLITE_BENCH_PAIRS / SQLITE_BENCH_ROUNDS size the run; the file lives in
# a fresh temporary directory (SQLITE_BENCH_DIR to choose its parent); the
# client is pinned by BENCH_PIN.
SQLITE_BENCH_PAIRS ?= 5000
SQLITE_BENCH_ROUNDS ?= 20

bench-core-sqlite: $(BUILD)/bench/core_sqlite
	$(BENCH_PIN) $(BUILD)/bench/core_sqlite $(SQLITE_BENCH_PAIRS) $(SQLITE_BENCH_ROUNDS)
