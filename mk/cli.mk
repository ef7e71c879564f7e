# The leaselock command line tool, its suite and the demo.

LEASELOCK_CLI := $(BUILD)/leaselock

all: $(LEASELOCK_CLI)

CLI_SRCS := $(wildcard cli/*.c)

# It loads the backend modules from $(BUILD)/leaselock-backends, beside it.
$(LEASELOCK_CLI): $(CLI_SRCS) cli/cli.h csrc/leaselock.h $(LIB_A) | $(LL_MODULE_SOS)
	$(CC) $(CFLAGS_ALL) $(CLI_SRCS) -o $@ $(LIB_A) $(SANFLAGS) $(LDLIBS_ALL)

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
