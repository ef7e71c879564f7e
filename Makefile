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
# - A new source file is listed once: the core's in csrc/SOURCES, a backend
#   module's in csrc/SOURCES.<backend> (the Makefile, setup.py and the rock
#   read them); the CLI's, the Python and
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

# Backends: SQLite always, in the core; the others when pkg-config finds
# their client library (tools/backends.sh, which setup.py asks too), each a
# module of its own that the core loads at the first URI of its scheme
# (csrc/ll_core_api.h, csrc/backend_load.c); a backend left out reports
# UNSUPPORTED with the reason. LL_BACKENDS names those built, LL_MODULES
# the modules among them; PKG_LIBS is the core's (SQLite's) libraries.
BACKENDS_SH := PKG_CONFIG=$(PKG_CONFIG) bash tools/backends.sh
LL_BACKENDS := $(shell $(BACKENDS_SH) names)
LL_MODULES := $(shell $(BACKENDS_SH) modules)
PKG_CFLAGS := $(shell $(BACKENDS_SH) cflags)
PKG_LIBS := $(shell $(BACKENDS_SH) libs)
$(foreach b,$(LL_MODULES),$(eval LL_MODULE_LIBS_$(b) := $(shell $(BACKENDS_SH) libs $(b))))

CFLAGS_ALL := $(CSTD) $(WARN) $(OPT) $(SANFLAGS) -fPIC -fvisibility=hidden -pthread \
	-Icsrc $(PKG_CFLAGS) $(CFLAGS)
LDLIBS_ALL := $(PKG_LIBS) -pthread -lm $(LDLIBS)

LL_OBJS := $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(LL_SOURCES))
LIB_SO := $(BUILD)/libleaselock.so
LIB_A := $(BUILD)/libleaselock.a

# The backend modules: $(BUILD)/leaselock-backends/leaselock_backend_<b>.so,
# beside libleaselock.so and the CLI, where the core looks (next to the
# file that holds it); programs elsewhere in $(BUILD) (tests, benchmarks)
# find them through LEASELOCK_BACKEND_PATH, set for every recipe here.
# Their objects are compiled with LL_MODULE (core calls through the table
# the core hands them: ll_core_api.h) into $(BUILD)/mod.
LL_MODULE_DIR := $(BUILD)/leaselock-backends
LL_MODULE_SOS := $(foreach b,$(LL_MODULES),$(LL_MODULE_DIR)/leaselock_backend_$(b).so)
export LEASELOCK_BACKEND_PATH := $(abspath $(LL_MODULE_DIR))
ll_module_srcs = $(shell grep -v '^\#' csrc/SOURCES.$(1))
ll_module_objs = $(patsubst csrc/%.c,$(BUILD)/mod/%.o,$(call ll_module_srcs,$(1))) \
	$(BUILD)/mod/backend_module_$(1).o
# White-box programs (tests and benchmarks that call a backend's own
# functions) link its objects as the core builds them instead,
# $(BUILD)/libleaselock_<b>.a, before $(LIB_A): the core then uses those
# tables (weak symbols, backend_load.c) and loads no module.
ll_whitebox_objs = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(call ll_module_srcs,$(1)))
LL_WHITEBOX_A := $(foreach b,$(LL_MODULES),$(BUILD)/libleaselock_$(b).a)
LL_WHITEBOX_LINK = $(foreach b,$(LL_MODULES),-Wl,-u,ll_backend_$(b)) $(LL_WHITEBOX_A)
LL_WHITEBOX_LIBS = $(foreach b,$(LL_MODULES),$(LL_MODULE_LIBS_$(b)))

# The lists the mk files add to (see above).
TEST_SUITES :=
# Suites that mostly wait (on servers of their own) or build (pip, the
# compiler) and time nothing: run one after another beside the others
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
all: $(LIB_SO) $(LIB_A) $(LL_MODULE_SOS)

$(BUILD)/obj/%.o: csrc/%.c $(wildcard csrc/*.h) | $(BUILD)/obj
	@echo "  CC $<"
	@$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/mod/%.o: csrc/%.c $(wildcard csrc/*.h) | $(BUILD)/mod
	@echo "  CC $< (module)"
	@$(CC) $(CFLAGS_ALL) -DLL_MODULE -include csrc/ll_core_api.h -c $< -o $@

$(BUILD)/mod/backend_module_%.o: csrc/backend_module.c $(wildcard csrc/*.h) | $(BUILD)/mod
	@$(CC) $(CFLAGS_ALL) -DLL_MODULE -DLL_MODULE_BACKEND=ll_backend_$* -c $< -o $@

$(BUILD)/obj $(BUILD)/mod $(BUILD)/tests $(BUILD)/bench $(LL_MODULE_DIR):
	@mkdir -p $@

$(LIB_SO): $(LL_OBJS) | $(LL_MODULE_SOS)
	$(CC) -shared -o $@ $(LL_OBJS) $(SANFLAGS) $(LDLIBS_ALL)

$(LIB_A): $(LL_OBJS)
	rm -f $@ && ar rcs $@ $^

# Installs the Debian packages the build and the suites need (when root),
# or says exactly what to install.
deps:
	@bash tools/deps.sh

# Prerequisites written $$(VAR) are expanded again once every file is read.
.SECONDEXPANSION:
# A module (its objects from csrc/SOURCES.<b>; $$* is <b>). -z defs: a core
# function called without the table (ll_core_api.h) fails here, by name.
$(LL_MODULE_DIR)/leaselock_backend_%.so: $$(call ll_module_objs,$$*) | $(LL_MODULE_DIR)
	$(CC) -shared -Wl,-z,defs -o $@ $^ $(SANFLAGS) $(LL_MODULE_LIBS_$*) -pthread

# Kept: make would delete them as intermediates of the pattern rule above.
.SECONDARY: $(foreach b,$(LL_MODULES),$(call ll_module_objs,$(b)))

# A backend's objects as the core builds them, for white-box programs.
$(BUILD)/libleaselock_%.a: $$(call ll_whitebox_objs,$$*)
	rm -f $@ && ar rcs $@ $^

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

# bench/core_<backend>.c: one program each, white-box (its backend's
# objects linked in, and its client library, which it calls directly).
$(BUILD)/bench/core_%: bench/core_%.c $(wildcard bench/*.h) $(wildcard csrc/*.h) $(LIB_A) $(LL_WHITEBOX_A) \
  | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) $< $(LL_WHITEBOX_LINK) $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL) \
	  $(LL_WHITEBOX_LIBS) -o $@

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
