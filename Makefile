# leaselock - build, test, demo and benchmarks.
#
#   make            the shared library, a static library and the CLI
#   make test       every suite (installs missing Debian packages when root)
#   make demo       processes taking turns on one key with the embedded default
#   make bench-core engine vs bare client programs, side by side
#   make stress     the long torture runs (not part of make test), servers
#                   started around them, then one table per backend
#
# Component rules live in mk/*.mk; each adds its suites to TEST_SUITES and
# defines test-<suite>.

.DEFAULT_GOAL := all
SHELL := /bin/bash

BUILD ?= build
CC ?= cc
PKG_CONFIG ?= pkg-config
PYTHON ?= python3

# The one list of core sources (also read by setup.py and the rockspec).
LL_SOURCES := $(shell grep -v '^\#' csrc/SOURCES)

WARN := -Wall -Wextra -Werror
CSTD := -std=c11 -D_GNU_SOURCE
OPT ?= -O2 -g
SANFLAGS ?=

# Backends: SQLite always, the others when pkg-config finds their client
# library (tools/backends.sh, which setup.py asks too); a backend left out
# reports UNSUPPORTED with the reason. LL_BACKENDS names those compiled in.
BACKENDS_SH := PKG_CONFIG=$(PKG_CONFIG) bash tools/backends.sh
LL_BACKENDS := $(shell $(BACKENDS_SH) names)
PKG_CFLAGS := $(shell $(BACKENDS_SH) cflags)
PKG_LIBS := $(shell $(BACKENDS_SH) libs)

CFLAGS_ALL := $(CSTD) $(WARN) $(OPT) $(SANFLAGS) -fPIC -fvisibility=hidden -pthread \
	-Icsrc $(PKG_CFLAGS) $(CFLAGS)
LDLIBS_ALL := $(PKG_LIBS) -pthread -lm $(LDLIBS)

LL_OBJS := $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(LL_SOURCES))
LIB_SO := $(BUILD)/libleaselock.so
LIB_A := $(BUILD)/libleaselock.a

TEST_SUITES :=
ASAN_SUITES :=
BENCH_CORE :=
DEMOS :=

.PHONY: all deps test test-suites test-asan asan-suites demo bench-core stress format format-check test-format clean
all: $(LIB_SO) $(LIB_A)

$(BUILD)/obj/%.o: csrc/%.c $(wildcard csrc/*.h) | $(BUILD)/obj
	@echo "  CC $<"
	@$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj $(BUILD)/tests $(BUILD)/bench:
	@mkdir -p $@

$(LIB_SO): $(LL_OBJS)
	$(CC) -shared -o $@ $^ $(SANFLAGS) $(LDLIBS_ALL)

$(LIB_A): $(LL_OBJS)
	rm -f $@ && ar rcs $@ $^

# Installs the Debian packages the build and the suites need (when root),
# or says exactly what to install.
deps:
	@bash tools/deps.sh

include $(sort $(wildcard mk/*.mk))

# Every suite, with the test servers started once around them.
test: deps
	@$(MAKE) --no-print-directory all
	@bash tests/with-servers.sh $(MAKE) --no-print-directory test-suites

test-suites:
	@bash tests/run-suites.sh $(TEST_SUITES)

# The C suites again (ASAN_SUITES), built with AddressSanitizer and UBSan
# into build/asan, less the tests that mostly wait (RUN_SLOW in
# tests/testlib.h: TEST_SKIP_SLOW). It is itself one of the suites that
# "make test" runs.
TEST_SUITES += asan
test-asan:
	@$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -g -fno-omit-frame-pointer" \
	  SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all" asan-suites

asan-suites:
	@TEST_SKIP_SLOW=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  bash tests/run-suites.sh $(ASAN_SUITES)

# Each component adds demo-<name> to DEMOS.
demo: deps
	@$(MAKE) --no-print-directory all
	@for d in $(DEMOS); do $(MAKE) --no-print-directory demo-$$d || exit 1; done

# Benchmarks pin their client to CPU 0; bench/run.sh places the test
# servers explicitly (other CPUs, then the client's), since whether a
# server process shares the client's core would otherwise decide a round.
BENCH_PIN := $(shell command -v taskset >/dev/null && echo taskset -c 0)

# bench/core_<backend>.c: one program each.
$(BUILD)/bench/core_%: bench/core_%.c bench/bench.h $(wildcard csrc/*.h) $(LIB_A) | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) $< $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) -o $@

# Each backend adds bench-core-<name> to BENCH_CORE; one run prints them all.
bench-core: deps
	@$(MAKE) --no-print-directory all
	@bash tests/with-servers.sh bash bench/run.sh $(BENCH_CORE)

# Each stress tool adds itself to STRESS_TOOLS (mk/stress.mk: stress-tools
# runs them, then prints the table).
stress: deps
	@$(MAKE) --no-print-directory all
	@bash tests/with-servers.sh $(MAKE) --no-print-directory stress-tools

# All C in the tree follows .clang-format; "make test" checks it.
C_FILES = $(wildcard csrc/*.c csrc/*.h cli/*.c cli/*.h tests/*.c tests/*.h bench/*.c bench/*.h bench/python/*.c bench/lua/*.c python/*.c lua/*.c lua/*.h)
TEST_SUITES += format

format:
	clang-format -i $(C_FILES)

format-check test-format:
	@clang-format --dry-run --Werror $(C_FILES) && echo "format: $(words $(C_FILES)) files follow .clang-format"

clean:
	rm -rf build python/build
