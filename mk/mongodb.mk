# The MongoDB backend's suite and benchmark.
#
# test-mongodb runs, against $MONGODB_URI (set by tests/with-servers.sh from
# tests/servers/mongodb.sh, or by the user to check a real MongoDB), the
# contract suite, the 8-thread + 4-process exclusion test and the
# MongoDB-only tests (tests/test_mongodb.c, with the proxies of
# tests/tcp_proxy.c and tests/tls_proxy.c): tests/server-suite.sh. Without
# MONGODB_URI it fails.

MONGODB_TEST := $(BUILD)/tests/test_mongodb

# OpenSSL (a dependency of libmongoc-dev): the suite's own TLS front.
$(MONGODB_TEST): $(BUILD)/tests/tcp_proxy.o $(BUILD)/tests/tls_proxy.o $(BUILD)/tests/queue_cases.o \
  $(BUILD)/tests/notify_cases.o
$(MONGODB_TEST): $(LL_WHITEBOX_A)
$(MONGODB_TEST): TEST_WHITEBOX = $(LL_WHITEBOX_LINK)
$(MONGODB_TEST): TEST_LIBS = $(LL_WHITEBOX_LIBS) $(shell $(PKG_CONFIG) --libs openssl)

.PHONY: test-mongodb bench-core-mongodb mongodb-server

TEST_SUITES += mongodb
ASAN_SUITES += mongodb
BENCH_CORE += mongodb

# SERVER_SUITE_DEPS: mk/c-tests.mk. LeakSanitizer: libmongoc's process-wide state (mongoc_init) stays
# reachable until exit by design; nothing of ours is suppressed.
test-mongodb: $$(SERVER_SUITE_DEPS) $(if $(filter mongodb,$(LL_BACKENDS)),$(MONGODB_TEST))
	@bash tests/server-suite.sh mongodb MONGODB_URI $(BUILD)/tests test_mongodb

# MONGODB_BENCH_PAIRS acquire+release pairs per round, MONGODB_BENCH_ROUNDS
# rounds (engine and bare client interleaved; the client pinned by
# BENCH_PIN).
MONGODB_BENCH_PAIRS ?= 200
MONGODB_BENCH_ROUNDS ?= 100

bench-core-mongodb: $(BUILD)/bench/core_mongodb
	@if [ -z "$${MONGODB_URI:-}" ]; then \
	  echo "bench-core-mongodb: MONGODB_URI is not set (make bench-core starts the server)"; exit 1; fi
	@$(BENCH_PIN) $< "$$MONGODB_URI" $(MONGODB_BENCH_PAIRS) $(MONGODB_BENCH_ROUNDS)

# Builds the MongoDB test server launcher (mongo-java-server via Maven).
mongodb-server:
	@bash tests/mongo-server/build.sh >/dev/null
