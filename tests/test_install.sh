#!/bin/bash
# make install into a temporary DESTDIR, then use what it installed: a C
# program built with "pkg-config --cflags --libs leaselock" (and one linked
# with the static library and "pkg-config --static"), the CLI's --version,
# the man page; the backend modules in lib/leaselock-backends, found there
# (LEASELOCK_BACKEND_PATH unset) by the installed CLI and libleaselock.so;
# then make uninstall leaves nothing behind.
#
#   bash tests/test_install.sh [MAKE [BUILD]]   (make test-install runs it)
#
# Ends with "N passed, N failed" and exits non-zero on any failure.
set -uo pipefail
MAKE_CMD=${1:-make}
BUILD_DIR=${2:-build}
cd "$(dirname "$0")/.." || exit 2
D=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-install.XXXXXX")
trap 'rm -rf "$D"' EXIT
ROOT=$D/root
PREFIX=/opt/leaselock-test
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "  ok $1" >&2; }
bad() { failed=$((failed + 1)); echo "  not ok $1: $2" >&2; }
check() { # check NAME COMMAND...: COMMAND succeeds
  local name=$1; shift
  if "$@" >"$D/out" 2>&1; then ok "$name"; else bad "$name" "$(head -c 600 "$D/out")"; fi
}

check "make install" $MAKE_CMD --no-print-directory BUILD="$BUILD_DIR" install \
  DESTDIR="$ROOT" PREFIX="$PREFIX"
for f in bin/leaselock lib/libleaselock.so lib/libleaselock.a include/leaselock.h \
  share/man/man1/leaselock.1 lib/pkgconfig/leaselock.pc; do
  [ -f "$ROOT$PREFIX/$f" ] && ok "installed $f" || bad "installed $f" "missing"
done

# Found where the install put them, not through the build tree's path.
unset LEASELOCK_BACKEND_PATH
modules=$(bash tools/backends.sh modules)
for b in $modules; do
  [ -f "$ROOT$PREFIX/lib/leaselock-backends/leaselock_backend_$b.so" ] &&
    ok "installed lib/leaselock-backends/leaselock_backend_$b.so" ||
    bad "installed leaselock_backend_$b.so" "missing"
done

# The .pc file: this PREFIX (no DESTDIR in it), and the core's one library
# (SQLite's: the modules bring their own).
pc=$ROOT$PREFIX/lib/pkgconfig/leaselock.pc
grep -qx "prefix=$PREFIX" "$pc" && ok "leaselock.pc prefix" || bad "leaselock.pc prefix" "$(cat "$pc")"
want=$(bash tools/backends.sh package sqlite)
grep -qx "Requires.private: $want" "$pc" && ok "leaselock.pc Requires.private" ||
  bad "leaselock.pc Requires.private" "want \"$want\": $(grep Requires "$pc")"

export PKG_CONFIG_PATH=$ROOT$PREFIX/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$ROOT
cat >"$D/t.c" <<'C'
#include <leaselock.h>
#include <stdio.h>
#include <string.h>

int main (int argc, char **argv)
{
   leaselock_error_t err;
   leaselock_client_t *c = argc > 1 ? leaselock_client_new (argv[1], "install-test", &err) : NULL;
   leaselock_lease_t *l = NULL;
   int64_t n = -1;
   if (!c || !leaselock_acquire (c, "k", 1, NULL, &l, &err) || !leaselock_lease_release (l, &err) ||
       !leaselock_prune (c, "", 0, 0, &n, &err)) {
      fprintf (stderr, "%s\n", err.message);
      return 1;
   }
   printf ("%s fence %lld pruned %lld\n", LEASELOCK_VERSION, (long long)leaselock_lease_fence (l),
           (long long)n);
   leaselock_lease_destroy (l);
   leaselock_client_destroy (c);
   return 0;
}
C
version=$(sed -n 's/^#define LEASELOCK_VERSION "\(.*\)"/\1/p' csrc/leaselock.h)
flags=$(pkg-config --cflags --libs leaselock) && ok "pkg-config --cflags --libs: $flags" ||
  bad "pkg-config" "$flags"
check "build against the installed library" \
  cc -std=c11 -Wall -Wextra -Werror "$D/t.c" $flags -o "$D/t"
LD_LIBRARY_PATH=$ROOT$PREFIX/lib "$D/t" "sqlite://$D/t.db" >"$D/run.out" 2>&1
[ "$(cat "$D/run.out")" = "$version fence 1 pruned 1" ] && ok "run it" ||
  bad "run it" "$(cat "$D/run.out")"
# ldd's output is read whole first: grep -q would stop reading at the
# match, and under pipefail ldd's SIGPIPE would fail the check.
libs=$(LD_LIBRARY_PATH=$ROOT$PREFIX/lib ldd "$D/t")
grep -q "$ROOT$PREFIX/lib/libleaselock.so" <<<"$libs" &&
  ok "it uses the installed libleaselock.so" || bad "libleaselock.so" "$libs"
# Static: the archive with the libraries of Requires.private and
# Libs.private (linked as shared libraries: a fully static link would need
# the static archives of every backend's own dependencies too).
check "pkg-config --static --libs" pkg-config --static --libs leaselock
requires=$(pkg-config --print-requires-private leaselock | awk '{print $1}')
static="$(pkg-config --libs $requires) -pthread -lm"
check "build against the installed static library ($static)" \
  cc -std=c11 "$D/t.c" $(pkg-config --cflags leaselock) "$ROOT$PREFIX/lib/libleaselock.a" \
  $static -o "$D/t_static"
"$D/t_static" "sqlite://$D/t2.db" >"$D/run.out" 2>&1
[ "$(cat "$D/run.out")" = "$version fence 1 pruned 1" ] && ok "run the static build" ||
  bad "run the static build" "$(cat "$D/run.out")"

# A server URI with nothing listening (port 1 of loopback): a loaded module
# answers BACKEND (cannot connect), a missing one UNSUPPORTED.
for b in $modules; do
  uri="$b://u@127.0.0.1:1/db"
  LD_LIBRARY_PATH=$ROOT$PREFIX/lib "$D/t" "$uri" >"$D/run.out" 2>&1
  grep -q "^$b: connect" "$D/run.out" && ok "libleaselock.so loads the installed $b module" ||
    bad "libleaselock.so, $b" "$(cat "$D/run.out")"
  "$ROOT$PREFIX/bin/leaselock" --uri "$uri" list >"$D/run.out" 2>&1
  grep -q "BACKEND: $b: connect" "$D/run.out" && ok "the installed CLI loads the installed $b module" ||
    bad "the installed CLI, $b" "$(cat "$D/run.out")"
done
libs=$(ldd "$ROOT$PREFIX/bin/leaselock")
! grep -qE "libmongoc|libmariadb|libpq" <<<"$libs" &&
  ok "the installed CLI links no backend's client library" || bad "the installed CLI's libraries" "$libs"

"$ROOT$PREFIX/bin/leaselock" --version >"$D/v" 2>&1
[ "$(cat "$D/v")" = "leaselock $version" ] && ok "installed CLI --version" ||
  bad "installed CLI --version" "$(cat "$D/v")"

man=$ROOT$PREFIX/share/man/man1/leaselock.1
if command -v man >/dev/null; then
  MANPAGER=cat MANWIDTH=80 man -l "$man" >"$D/man" 2>"$D/man.err"
  grep -q "leaselock - lease-based locks" "$D/man" && [ ! -s "$D/man.err" ] && ok "man -l" ||
    bad "man -l" "$(head -c 300 "$D/man.err")"
elif command -v groff >/dev/null; then
  check "groff" groff -man -Tutf8 -ww -z "$man"
else
  echo "  (neither man nor groff: the page is not rendered)" >&2
fi

check "make uninstall" $MAKE_CMD --no-print-directory BUILD="$BUILD_DIR" uninstall \
  DESTDIR="$ROOT" PREFIX="$PREFIX"
left=$(find "$ROOT" -type f)
[ -z "$left" ] && ok "nothing left after uninstall" || bad "uninstall left" "$left"

echo "install: $passed passed, $failed failed"
[ "$failed" = 0 ]
