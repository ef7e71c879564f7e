# Every cross-reference of the tree resolves: invariant numbers against
# docs/contract.md, tests the contract names, paths the docs name
# (tests/check_refs.py; also the benchmark's pure-Python peers against the
# engine's acquire parameters), and the mk files' references to one another's
# variables, whatever order they are read in, with each suite in the file
# of its name (tools/check_mk_order.py, also `make check-mk-order`).

TEST_SUITES += refs
.PHONY: test-refs
test-refs:
	@$(PYTHON) tests/check_refs.py
	@$(PYTHON) tools/check_mk_order.py "$(MAKE)"
