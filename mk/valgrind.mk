# valgrind memcheck on the C suites and the CLI (tests/test_valgrind.sh),
# on the plain build (not build/asan: the two do not mix).
#
#   make test-valgrind        the contract suite (fake, SQLite) and a few CLI
#                             runs under valgrind memcheck
#   make test-valgrind-full   the same plus more CLI runs, the exclusion test
#                             and the in-process fault suite under valgrind

TEST_SUITES += valgrind
.PHONY: test-valgrind test-valgrind-full

# The CLI's path comes from mk/cli.mk: $$ reads it once every file is read.
VALGRIND_DEPS = $(BUILD)/tests/test_contract $(LEASELOCK_CLI)

test-valgrind: $$(VALGRIND_DEPS)
	@bash tests/test_valgrind.sh $(BUILD)

test-valgrind-full: $$(VALGRIND_DEPS) $(BUILD)/tests/test_exclusion $(BUILD)/tests/test_inproc_faults
	@bash tests/test_valgrind.sh $(BUILD) full
