# make install: the shared and static library, the backend modules (in
# $(LIBDIR)/leaselock-backends, where libleaselock.so looks, beside it, and
# the CLI in $(BINDIR) looks, in ../lib/leaselock-backends), the header, the
# CLI, its man page and a pkg-config file (leaselock.pc), under
# $(DESTDIR)$(PREFIX);
# make uninstall removes them. The install suite installs into a temporary
# DESTDIR and builds a program against it through pkg-config.

PREFIX ?= /usr/local
EXEC_PREFIX ?= $(PREFIX)
BINDIR ?= $(EXEC_PREFIX)/bin
LIBDIR ?= $(EXEC_PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL ?= install

LL_VERSION = $(shell sed -n 's/^\#define LEASELOCK_VERSION "\(.*\)"/\1/p' csrc/leaselock.h)
# The pkg-config package the core needs (SQLite's: the other backends are
# modules, which bring their own libraries).
LL_PC_REQUIRES = $(shell $(BACKENDS_SH) package sqlite)
LL_MODULE_INSTDIR = $(LIBDIR)/leaselock-backends

LL_PC := $(BUILD)/leaselock.pc

.PHONY: install uninstall test-install FORCE

# Rewritten on every build: it holds the install directories of this call.
$(LL_PC): FORCE | $(BUILD)/obj
	@printf '%s\n' 'prefix=$(PREFIX)' 'exec_prefix=$(EXEC_PREFIX)' 'libdir=$(LIBDIR)' \
	  'includedir=$(INCLUDEDIR)' '' 'Name: leaselock' \
	  'Description: Lease-based distributed locks on a database (backends: $(LL_BACKENDS))' \
	  'Version: $(LL_VERSION)' 'Requires.private: $(LL_PC_REQUIRES)' \
	  'Libs: -L$${libdir} -lleaselock' 'Libs.private: -pthread -lm' \
	  'Cflags: -I$${includedir}' >$@

# The CLI's path comes from mk/cli.mk: $$ reads it once every file is read.
install: $(LIB_SO) $(LIB_A) $$(LEASELOCK_CLI) $(LL_PC) $(LL_MODULE_SOS)
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(LL_MODULE_INSTDIR)
	$(INSTALL) -m 755 $(LEASELOCK_CLI) $(DESTDIR)$(BINDIR)/leaselock
	$(INSTALL) -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libleaselock.so
	$(INSTALL) -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/libleaselock.a
	$(INSTALL) -m 644 csrc/leaselock.h $(DESTDIR)$(INCLUDEDIR)/leaselock.h
	$(INSTALL) -m 644 docs/leaselock.1 $(DESTDIR)$(MANDIR)/man1/leaselock.1
	$(INSTALL) -m 644 $(LL_PC) $(DESTDIR)$(PKGCONFIGDIR)/leaselock.pc
	$(if $(LL_MODULE_SOS),$(INSTALL) -m 755 $(LL_MODULE_SOS) $(DESTDIR)$(LL_MODULE_INSTDIR)/)

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/leaselock $(DESTDIR)$(LIBDIR)/libleaselock.so \
	  $(DESTDIR)$(LIBDIR)/libleaselock.a $(DESTDIR)$(INCLUDEDIR)/leaselock.h \
	  $(DESTDIR)$(MANDIR)/man1/leaselock.1 $(DESTDIR)$(PKGCONFIGDIR)/leaselock.pc \
	  $(DESTDIR)$(LL_MODULE_INSTDIR)/leaselock_backend_*.so
	rmdir $(DESTDIR)$(LL_MODULE_INSTDIR) 2>/dev/null || true

TEST_SUITES += install
test-install: $(LIB_SO) $(LIB_A) $$(LEASELOCK_CLI)
	@bash tests/test_install.sh "$(MAKE)" "$(BUILD)"
