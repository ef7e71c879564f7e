# Checks of the tree itself: every cross-reference resolves (invariant
# numbers against docs/contract.md, tests the contract names, paths the
# docs name), and no function of the shipped C code is over 80 lines.

TEST_SUITES += refs shape
.PHONY: test-refs test-shape
test-refs:
	@$(PYTHON) tests/check_refs.py
test-shape:
	@$(PYTHON) tests/check_shape.py
