# libFuzzer harnesses (tests/fuzz/*.c), built with Debian's clang and
# libclang-rt-14-dev against the core compiled with ASan/UBSan into
# build/fuzz:
#
#   make fuzz              each harness for FUZZ_SECONDS (default 120) from
#                          its committed corpus; new inputs go to
#                          build/fuzz/corpus, crashes to build/fuzz/crashes
#   make test-fuzz-smoke   each harness over its committed corpus, then
#                          FUZZ_SMOKE_SECONDS of new inputs (about 40 s)
#
# A crash found becomes a file in tests/fuzz/corpus/<harness>/ (replayed by
# the smoke run) and, where it shows a bug, a test in tests/test_uri.c.

FUZZ_CC ?= clang
FUZZ_BUILD := build/fuzz
FUZZ_SECONDS ?= 120
FUZZ_SMOKE_SECONDS ?= 5
FUZZERS := fuzz_duration fuzz_key fuzz_redact fuzz_client
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS = $(CSTD) $(WARN) -O1 -g -fno-omit-frame-pointer -Icsrc -Itests -Itests/fuzz \
	-Wno-unused-function $(LL_DEFS) $(PKG_CFLAGS)
FUZZ_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
FUZZ_ARGS = -max_len=512 -timeout=10 -dict=tests/fuzz/uri.dict \
	-artifact_prefix=$(FUZZ_BUILD)/crashes/ -print_final_stats=1

C_FILES += $(wildcard tests/fuzz/*.c tests/fuzz/*.h)

.PHONY: fuzz fuzz-build test-fuzz-smoke

# The core again, instrumented for coverage (fuzzer-no-link), by a make of
# its own into $(FUZZ_CORE) (which must not see this rule).
FUZZ_CORE := $(FUZZ_BUILD)/core
ifneq ($(BUILD),$(FUZZ_CORE))
$(FUZZ_CORE)/libleaselock.a: $(LL_SOURCES) csrc/leaselock.h csrc/ll_internal.h
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_CORE) CC=$(FUZZ_CC) OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANFLAGS="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_CORE)/libleaselock.a
endif

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_drivers.h $(FUZZ_CORE)/libleaselock.a
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz: $(FUZZ_CC) is missing (make deps)"; exit 1; }
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer $< $(FUZZ_CORE)/libleaselock.a \
	  $(LDLIBS_ALL) -o $@

fuzz-build: $(addprefix $(FUZZ_BUILD)/,$(FUZZERS))

# Runs each harness: FUZZ_TIME seconds of new inputs after its corpus.
FUZZ_LOOP = set -e; mkdir -p $(FUZZ_BUILD)/crashes; for f in $(FUZZERS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$f tests/fuzz/corpus/$$f; \
	  $(FUZZ_ENV) $(FUZZ_BUILD)/$$f $(FUZZ_ARGS) -max_total_time=$$FUZZ_TIME \
	    $(FUZZ_BUILD)/corpus/$$f tests/fuzz/corpus/$$f >$(FUZZ_BUILD)/$$f.log 2>&1 \
	    || { tail -40 $(FUZZ_BUILD)/$$f.log; echo "$$f: crash, input in $(FUZZ_BUILD)/crashes"; exit 1; }; \
	  echo "$$f: $$(grep -oE '^stat::number_of_executed_units: *[0-9]+' $(FUZZ_BUILD)/$$f.log | \
	    grep -oE '[0-9]+$$') executions in $$FUZZ_TIME s, no crash"; \
	done

fuzz: fuzz-build
	@FUZZ_TIME=$(FUZZ_SECONDS); $(FUZZ_LOOP)

# For `make stress`: the same long run, and its counts as a summary (a
# crash stops the loop and is counted).
STRESS_TOOLS += fuzz
stress-fuzz: fuzz-build
	@FUZZ_TIME=$(FUZZ_SECONDS); rc=0; ( $(FUZZ_LOOP) ) || rc=1; \
	  execs=$$(cat $(FUZZ_BUILD)/*.log | grep -oE '^stat::number_of_executed_units: *[0-9]+' | \
	    grep -oE '[0-9]+$$' | awk '{s+=$$1} END {print s+0}'); \
	  printf 'tool=fuzz\nbackend=-\nfuzz_executions=%s\ncrashes=%s\n' "$$execs" "$$rc" \
	    >$(STRESS_DIR)/fuzz.summary; exit $$rc

TEST_SUITES += fuzz-smoke
test-fuzz-smoke: fuzz-build
	@rm -rf $(FUZZ_BUILD)/corpus
	@FUZZ_TIME=$(FUZZ_SMOKE_SECONDS); $(FUZZ_LOOP)
	@echo "fuzz-smoke: $(words $(FUZZERS)) passed, 0 failed"
