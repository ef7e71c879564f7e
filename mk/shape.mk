# No function of the shipped C code is over 80 lines (tests/check_shape.py).

TEST_SUITES += shape
.PHONY: test-shape
test-shape:
	@$(PYTHON) tests/check_shape.py
