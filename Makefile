# leaselock - build, test, demo and benchmarks.
#
#   make            the shared library, a static library and the CLI
#   make test       every suite (installs missing Debian packages when root)
#   make demo       processes taking turns on one key with the embedded default
#   make bench-core engine vs bare client programs, side by side
#   make stress     the long torture runs (not part of make test), servers
#                   started around them, then one table per backend
#
# Component rules live in mk/*.mk. The rules of the layout:
#
# - Suite test-<name> is defined in mk/<name>.mk, or, for a family of
#   suites, in mk/<family>.mk where <name> starts with <family>
#   (python-typing in python.mk, contract-sqlite in contract.mk); a file
#   adds its suites to TEST_SUITES (and ASAN_SUITES, STRESS_TOOLS, DEMOS,
#   BENCH_CORE when they belong there). Files with no suite (c-tests.mk,
#   sql.mk, bench.mk, ...) say what they hold at their top.
# - The files are read in any order: a file may use another file's
#   variable only where make reads it late, in a recipe, in a recursive
#   (=) variable, or in a prerequisite written $$(VAR) (.SECONDEXPANSION,
#   below). Targets and prerequisites may use the variables of this
#   Makefile, set before the include, freely.
# `make check-mk-order` checks both rules (tools/check_mk_order.py): every
# rule's prerequisites and every variable read in sorted and in reversed
# order, and where each suite's recipe is.
# - A new source file is listed once: the core's in csrc/SOURCES (the
#   Makefile, setup.py and the rock read it); the CLI's, the Python and
#   Lua bindings' and the C that `make format` checks are found by
#   wildcard; a suite's program names its helper objects (tests/*.o) as
#   prerequisites.

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

# The lists the mk files add to (see above).
TEST_SUITES :=
# Suites that mostly wait, on servers of their own: run beside the others
# (tests/run-suites.sh --side).
TEST_SUITES_SIDE :=
ASAN_SUITES :=
# What the suites need built or fetched before they run (a file adds its
# own): made together, in parallel, before the servers start, so that the
# downloads from PyPI overlap the compiling.
TEST_PREPARE :=
# Jobs for the builds that `make test` runs before its suites (the suites
# themselves run one at a time).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
STRESS_TOOLS :=
BENCH_CORE :=
DEMOS :=

# Benchmarks pin their client to CPU 0; bench/run.sh places the test
# servers explicitly (other CPUs, then the client's), since whether a
# server process shares the client's core would otherwise decide a round.
BENCH_PIN := $(shell command -v taskset >/dev/null && echo taskset -c 0)

.PHONY: all deps test test-suites demo bench-core stress check-mk-order clean
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

# Prerequisites written $$(VAR) are expanded again once every file is read.
.SECONDEXPANSION:

# MK_FILES is a variable so that check-mk-order can read them reversed.
MK_FILES ?= $(sort $(wildcard mk/*.mk))
include $(MK_FILES)

# Every suite, with the test servers started once around them.
test: deps
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) all $(TEST_PREPARE)
	@bash tests/with-servers.sh $(MAKE) --no-print-directory test-suites

test-suites:
	@bash tests/run-suites.sh --side "$(TEST_SUITES_SIDE)" $(TEST_SUITES)

# Each component adds demo-<name> to DEMOS.
demo: deps
	@$(MAKE) --no-print-directory all
	@for d in $(DEMOS); do $(MAKE) --no-print-directory demo-$$d || exit 1; done

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

# The two rules above, checked (tools/check_mk_order.py).
check-mk-order:
	@$(PYTHON) tools/check_mk_order.py "$(MAKE)"

clean:
	rm -rf build python/build
