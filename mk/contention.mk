# make bench-contention: many processes and threads on one key, on every
# backend (servers started around it): throughput against the ideal,
# fairness, waits and hand-off latency (bench/contention.c, .sh).

CONTENTION_BENCH := $(BUILD)/bench/contention

$(CONTENTION_BENCH): bench/contention.c bench/bench.h $(LIB_A) | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) -Ibench $< $(LIB_A) $(LDLIBS_ALL) -o $@

.PHONY: bench-contention
bench-contention: $(CONTENTION_BENCH)
	@bash tests/with-servers.sh bash bench/contention.sh $(CONTENTION_BENCH)
