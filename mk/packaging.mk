# The packaging suite (tests/packaging/test_packaging.sh): the sdist, `pip
# wheel .` and what `auditwheel show` says of the wheel, `pip install .`
# into a fresh venv (the package and the `leaselock` command), and the rock
# built with only SQLite visible to pkg-config, then with every library.
#
#   make test-packaging
#
# Its tools (setuptools>=77 for the wheel, auditwheel, trove-classifiers)
# live in a venv of our own under $(BUILD)/packaging, made once; the
# install step's venv is made afresh each run and fetches its build
# requirements from PyPI as `pip install .` does for a user.

# Mostly pip and the compiler, timing nothing: run beside the others.
TEST_SUITES_SIDE += packaging

PKG_TEST_DIR = $(BUILD)/packaging
PKG_TOOLS_VENV = $(PKG_TEST_DIR)/venv
TEST_PREPARE += $(PKG_TOOLS_VENV)/.ready
PKG_TOOLS_SPEC ?= 'setuptools>=77,<90' 'auditwheel>=6.1,<7' trove-classifiers

.PHONY: test-packaging

$(PKG_TOOLS_VENV)/.ready: mk/packaging.mk
	rm -rf $(PKG_TOOLS_VENV)
	$(PYTHON) -m venv $(PKG_TOOLS_VENV)
	$(PKG_TOOLS_VENV)/bin/python -m pip install -q --disable-pip-version-check -U $(PKG_TOOLS_SPEC)
	@touch $@

test-packaging: $(PKG_TOOLS_VENV)/.ready
	@PYTHON=$(PYTHON) LUAROCKS=$(LUAROCKS) LUA54=$(LUA54) PKG_CONFIG=$(PKG_CONFIG) \
	  bash tests/packaging/test_packaging.sh $(abspath $(PKG_TEST_DIR)) $(abspath $(PKG_TOOLS_VENV))
