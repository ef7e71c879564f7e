# Every cross-reference of the tree resolves (tests/check_refs.py):
# invariant numbers against docs/contract.md, tests the contract names,
# paths the docs name.

TEST_SUITES += refs
.PHONY: test-refs
test-refs:
	@$(PYTHON) tests/check_refs.py
