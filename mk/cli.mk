# The leaselock command line tool, its suite and the demo.

LEASELOCK_CLI := $(BUILD)/leaselock

all: $(LEASELOCK_CLI)

CLI_SRCS := $(wildcard cli/*.c)

# SQLite is linked into the CLI from its static archive (libsqlite3-dev's
# libsqlite3.a) when there is one: a cron run is a new process each time,
# and the dynamic loader's work on libsqlite3.so (its relocations, the
# symbols bound at first call) was about 0.15 ms of each `leaselock run`
# (make bench, the cron table). The price is a rebuild of the CLI after a
# SQLite security update, as for any program that embeds it:
# CLI_SQLITE=shared links the shared library instead. The libraries and
# modules load SQLite as before.
CLI_SQLITE ?= static
CLI_SQLITE_A := $(if $(filter static,$(CLI_SQLITE)),$(wildcard \
	$(shell $(PKG_CONFIG) --variable=libdir sqlite3 2>/dev/null)/libsqlite3.a))
CLI_LDLIBS := $(if $(CLI_SQLITE_A),$(CLI_SQLITE_A) $(filter-out $(PKG_LIBS),$(LDLIBS_ALL)),$(LDLIBS_ALL))

# It loads the backend modules from $(BUILD)/leaselock-backends, beside it.
$(LEASELOCK_CLI): $(CLI_SRCS) cli/cli.h csrc/leaselock.h $(LIB_A) | $(LL_MODULE_SOS)
	$(CC) $(CFLAGS_ALL) $(CLI_SRCS) -o $@ $(LIB_A) $(SANFLAGS) $(CLI_LDLIBS)

.PHONY: test-cli demo-cli

# Memory checking of the CLI is the valgrind suite's (tests/test_valgrind.sh
# runs its commands and modes under memcheck); the sanitizer run leaves it
# out, since every one of this suite's many short processes pays ASan's
# start-up.
TEST_SUITES += cli
test-cli: $(LEASELOCK_CLI)
	@bash tests/test_cli.sh $(LEASELOCK_CLI)

DEMOS += cli
demo-cli: $(LEASELOCK_CLI)
	@bash tools/demo.sh $(LEASELOCK_CLI)
