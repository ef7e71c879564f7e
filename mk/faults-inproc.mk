# Faults inside the process (tests/test_inproc_faults.c).
#
#   make test-faults-inproc   every backend call, then every allocation of
#                             the core, failed in turn (fake and SQLite)
#
# The allocation hook: a copy of libleaselock.a whose calls to the
# allocator are renamed to llt_* (tests/alloc_hook.c), so that only the
# core's own allocations are counted and failed; the test's, SQLite's and
# libc's go to the real allocator.

FAULTS_TEST := $(BUILD)/tests/test_inproc_faults
FAULTS_LIB := $(BUILD)/tests/libleaselock_allochook.a
FAULTS_SYMS := malloc calloc realloc strdup strndup free
FAULTS_DIR = $(abspath $(BUILD))/faults-inproc

$(FAULTS_LIB): $(LIB_A) mk/faults-inproc.mk | $(BUILD)/tests
	objcopy $(foreach s,$(FAULTS_SYMS),--redefine-sym $(s)=llt_$(s)) $< $@

$(FAULTS_TEST): tests/test_inproc_faults.c tests/testlib.h tests/fault_backend.h tests/alloc_hook.h \
  $(BUILD)/tests/testlib.o $(BUILD)/tests/fault_backend.o $(BUILD)/tests/fake_backend.o \
  $(BUILD)/tests/alloc_hook.o $(FAULTS_LIB)
	$(CC) $(TEST_CFLAGS) $< $(BUILD)/tests/testlib.o $(BUILD)/tests/fault_backend.o $(BUILD)/tests/fake_backend.o \
	  $(FAULTS_LIB) $(BUILD)/tests/alloc_hook.o $(SANFLAGS) $(LDLIBS_ALL) -o $@

TEST_SUITES += faults-inproc
ASAN_SUITES += faults-inproc
.PHONY: test-faults-inproc

test-faults-inproc: $(FAULTS_TEST)
	@rm -rf $(FAULTS_DIR) && mkdir -p $(FAULTS_DIR)
	$(FAULTS_TEST) $(FAULTS_DIR)
