# The MongoDB backend's suite and benchmark.
#
# test-mongo runs, against $MONGODB_URI (set by tests/with-servers.sh from
# tests/servers/mongo.sh, or by the user to check a real MongoDB):
# the contract suite, the 8-thread + 4-process exclusion test and the
# MongoDB-only tests (tests/test_mongo.c). Without MONGODB_URI it fails.

MONGO_TEST := $(BUILD)/tests/test_mongo
MONGO_BENCH := $(BUILD)/bench/core_mongodb

# OpenSSL (a dependency of libmongoc-dev): the suite's own TLS front.
$(MONGO_TEST): tests/test_mongo.c tests/testlib.h $(LIB_A) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) \
	  $(shell $(PKG_CONFIG) --libs openssl) -o $@

$(MONGO_BENCH): bench/core_mongodb.c bench/bench.h $(LIB_A) | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

.PHONY: test-mongo bench-core-mongodb mongo-server

TEST_SUITES += mongo
ASAN_SUITES += mongo
BENCH_CORE += mongodb

# When tests/with-servers.sh started the server (LEASELOCK_MONGO_SERVER_PID),
# it must watch the pid with-servers exported (LEASELOCK_SERVERS_PID).
# LeakSanitizer: libmongoc's process-wide state (mongoc_init) stays
# reachable until exit by design; nothing of ours is suppressed.
test-mongo: $(BUILD)/tests/test_contract $(BUILD)/tests/test_exclusion $(MONGO_TEST)
	@if [ -z "$$MONGODB_URI" ]; then \
	  echo "test-mongo: MONGODB_URI is not set: run it through tests/with-servers.sh" \
	       "(make test does), or set it to a MongoDB server"; \
	  echo "mongo: 0 passed, 1 failed"; exit 1; fi; \
	command -v faketime >/dev/null || { echo "test-mongo: faketime is missing (make deps)"; exit 1; }; \
	rc=0; \
	if [ -n "$${LEASELOCK_MONGO_SERVER_PID:-}" ]; then \
	  watched=$$(tr '\0' '\n' </proc/$$LEASELOCK_MONGO_SERVER_PID/cmdline 2>/dev/null | sed -n '/^--parent$$/{n;p;}'); \
	  if [ -z "$${LEASELOCK_SERVERS_PID:-}" ] || [ "$$watched" != "$$LEASELOCK_SERVERS_PID" ]; then \
	    echo "test-mongo: the test server watches pid '$$watched', not LEASELOCK_SERVERS_PID '$${LEASELOCK_SERVERS_PID:-}'"; \
	    echo "mongo: 0 passed, 1 failed"; rc=1; \
	  fi; \
	fi; \
	$(BUILD)/tests/test_contract "$$MONGODB_URI" || rc=1; \
	$(BUILD)/tests/test_exclusion "$$MONGODB_URI" || rc=1; \
	$(MONGO_TEST) "$$MONGODB_URI" || rc=1; \
	exit $$rc

# MONGO_BENCH_PAIRS acquire+release pairs per round, MONGO_BENCH_ROUNDS
# rounds (engine and bare client interleaved; the client pinned by
# BENCH_PIN).
MONGO_BENCH_PAIRS ?= 200
MONGO_BENCH_ROUNDS ?= 100

bench-core-mongodb: $(MONGO_BENCH)
	@if [ -z "$$MONGODB_URI" ]; then \
	  echo "bench-core-mongodb: MONGODB_URI is not set (make bench-core starts the server)"; exit 1; fi
	@$(BENCH_PIN) $(MONGO_BENCH) "$$MONGODB_URI" $(MONGO_BENCH_PAIRS) $(MONGO_BENCH_ROUNDS)

# Builds the MongoDB test server launcher (mongo-java-server via Maven).
mongo-server:
	@bash tests/mongo-server/build.sh >/dev/null
