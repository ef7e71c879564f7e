# The C suites again (ASAN_SUITES, which each C suite's file adds itself
# to), built with AddressSanitizer and UBSan into build/asan, less the tests
# that mostly wait (RUN_SLOW in tests/testlib.h: TEST_SKIP_SLOW). It is
# itself one of the suites that "make test" runs.

TEST_SUITES += asan
.PHONY: test-asan asan-suites
ASAN_MAKE = $(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all"
# The library first, in parallel (most of the compiling); then the suites,
# one at a time, each building its own program.
test-asan:
	@$(ASAN_MAKE) -j$(TEST_JOBS) build/asan/libleaselock.a
	@$(ASAN_MAKE) asan-suites

asan-suites:
	@TEST_SKIP_SLOW=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  bash tests/run-suites.sh $(ASAN_SUITES)
