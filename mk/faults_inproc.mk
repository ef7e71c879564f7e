# Faults inside the process (tests/test_inproc_faults.c) and valgrind
# memcheck on the C suites and the CLI.
#
#   make test-faults-inproc   every backend call, then every allocation of
#                             the core, failed in turn (fake and SQLite)
#   make test-valgrind        the contract suite (fake, SQLite) and a few CLI
#                             runs under valgrind memcheck
#   make test-valgrind-full   the same plus more CLI runs, the exclusion test
#                             and this fault suite under valgrind
#
# The allocation hook: a copy of libleaselock.a whose calls to the
# allocator are renamed to llt_* (tests/alloc_hook.c), so that only the
# core's own allocations are counted and failed; the test's, SQLite's and
# libc's go to the real allocator.

FAULTS_TEST := $(BUILD)/tests/test_inproc_faults
FAULTS_LIB := $(BUILD)/tests/libleaselock_allochook.a
FAULTS_SYMS := malloc calloc realloc strdup strndup free
FAULTS_DIR = $(abspath $(BUILD))/faults-inproc

$(FAULTS_LIB): $(LIB_A) mk/faults_inproc.mk | $(BUILD)/tests
	objcopy $(foreach s,$(FAULTS_SYMS),--redefine-sym $(s)=llt_$(s)) $< $@

$(FAULTS_TEST): tests/test_inproc_faults.c tests/testlib.h tests/fault_backend.h tests/alloc_hook.h \
  $(BUILD)/tests/fault_backend.o $(BUILD)/tests/fake_backend.o $(BUILD)/tests/alloc_hook.o $(FAULTS_LIB)
	$(CC) $(TEST_CFLAGS) $< $(BUILD)/tests/fault_backend.o $(BUILD)/tests/fake_backend.o \
	  $(FAULTS_LIB) $(BUILD)/tests/alloc_hook.o $(SANFLAGS) $(LDLIBS_ALL) -o $@

TEST_SUITES += faults-inproc
ASAN_SUITES += faults-inproc
.PHONY: test-faults-inproc test-valgrind test-valgrind-full

test-faults-inproc: $(FAULTS_TEST)
	@rm -rf $(FAULTS_DIR) && mkdir -p $(FAULTS_DIR)
	$(FAULTS_TEST) $(FAULTS_DIR)

# valgrind runs on the plain build (not build/asan: the two do not mix).
TEST_SUITES += valgrind
VALGRIND_DEPS = $(BUILD)/tests/test_contract $(LEASELOCK_CLI)

test-valgrind: $(VALGRIND_DEPS)
	@bash tests/test_valgrind.sh $(BUILD)

test-valgrind-full: $(VALGRIND_DEPS) $(BUILD)/tests/test_exclusion $(FAULTS_TEST)
	@bash tests/test_valgrind.sh $(BUILD) full
