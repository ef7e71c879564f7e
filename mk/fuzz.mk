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
	-Wno-unused-function $(PKG_CFLAGS)

.PHONY: fuzz fuzz-build test-fuzz-smoke

# The core again, instrumented for coverage (fuzzer-no-link), by a make of
# its own into $(FUZZ_CORE) (which must not see this rule).
FUZZ_CORE := $(FUZZ_BUILD)/core
# The fuzzers link every backend's objects (white-box, as the C suites that
# call the drivers do: LL_WHITEBOX_LINK), so they load no module.
FUZZ_WHITEBOX_A := $(foreach b,$(LL_MODULES),$(FUZZ_CORE)/libleaselock_$(b).a)
ifneq ($(BUILD),$(FUZZ_CORE))
$(FUZZ_CORE)/libleaselock.a: $(LL_SOURCES) $(foreach b,$(LL_MODULES),$(call ll_module_srcs,$(b))) \
  csrc/leaselock.h csrc/ll_internal.h
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_CORE) CC=$(FUZZ_CC) OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANFLAGS="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_CORE)/libleaselock.a $(FUZZ_WHITEBOX_A)
endif

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_drivers.h $(FUZZ_CORE)/libleaselock.a
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz: $(FUZZ_CC) is missing (make deps)"; exit 1; }
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer $< \
	  $(foreach b,$(LL_MODULES),-Wl,-u,ll_backend_$(b)) $(FUZZ_WHITEBOX_A) $(FUZZ_CORE)/libleaselock.a \
	  $(LDLIBS_ALL) $(LL_WHITEBOX_LIBS) -o $@

fuzz-build: $(addprefix $(FUZZ_BUILD)/,$(FUZZERS))

# tests/run-fuzzers.sh runs each harness over its corpus, then for the
# seconds given.
fuzz: fuzz-build
	@bash tests/run-fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZERS)

# For `make stress`: the same long run, and its counts as a summary.
STRESS_TOOLS += fuzz
stress-fuzz: fuzz-build
	@STRESS_OUT=$(STRESS_DIR) bash tests/run-fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZERS)

TEST_SUITES += fuzz-smoke
test-fuzz-smoke: fuzz-build
	@rm -rf $(FUZZ_BUILD)/corpus
	@bash tests/run-fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS) $(FUZZERS)
	@echo "fuzz-smoke: $(words $(FUZZERS)) passed, 0 failed"
