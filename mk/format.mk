# All C in the tree follows .clang-format: every .c and .h under these
# folders, at any depth (a new file is covered without being listed).
#
#   make format        rewrites them
#   make test-format   checks them (a suite of make test)

C_DIRS := csrc cli tests bench python lua
C_FILES = $(sort $(shell find $(C_DIRS) -name build -prune -o -name '*.[ch]' -type f -print))

TEST_SUITES += format
.PHONY: format format-check test-format

format:
	clang-format -i $(C_FILES)

format-check test-format:
	@clang-format --dry-run --Werror $(C_FILES) && echo "format: $(words $(C_FILES)) files follow .clang-format"
