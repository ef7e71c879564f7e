#!/bin/bash
# The packaging suite (make test-packaging), run from the top of the tree:
#
#   sdist    setup.py sdist carries what the build needs (cli/ included)
#            and no build products;
#   wheel    `pip wheel .` in the unpacked sdist: metadata, license, the
#            extension and bin/leaselock; `auditwheel show` says
#            linux_x86_64 (the wheel links the system's client libraries)
#            and lists the library of every backend compiled in;
#   install  `pip install .` into a fresh venv: `leaselock` on PATH runs a
#            command under a lease on SQLite (its man page beside it, when
#            the tree has docs/leaselock.1), `import leaselock` finds the
#            installed package, `pip uninstall` takes them all away;
#   rock     `luarocks make` with only SQLite's sqlite3.pc visible to
#            pkg-config (the module loads, takes a lease, and refuses the
#            other backends with UNSUPPORTED and what to install), then again
#            in the same tree with every library pkg-config finds (each of
#            them a backend module installed beside the Lua module, which
#            itself links none of their libraries).
# The backend modules are found where each install put them:
# LEASELOCK_BACKEND_PATH (which the Makefile sets for the suites) is unset.
#
# usage: test_packaging.sh OUT_DIR TOOLS_VENV
#   OUT_DIR     scratch directory (build/packaging), kept between runs
#   TOOLS_VENV  a venv with setuptools>=77, auditwheel and trove-classifiers
# Environment: PYTHON, LUAROCKS, LUA54, PKG_CONFIG, LEASELOCK_BUILD_JOBS.
set -uo pipefail

out=${1:?usage: test_packaging.sh OUT_DIR TOOLS_VENV}
tools=${2:?usage: test_packaging.sh OUT_DIR TOOLS_VENV}
PYTHON=${PYTHON:-python3}
LUAROCKS=${LUAROCKS:-luarocks}
LUA54=${LUA54:-lua5.4}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
export LEASELOCK_BUILD_JOBS=${LEASELOCK_BUILD_JOBS:-2} PIP_DISABLE_PIP_VERSION_CHECK=1
unset LEASELOCK_BACKEND_PATH
src=$(pwd)
. "$(dirname "$0")/checks.sh"
# Runs a step quietly into a log; on failure prints the log's end.
logged() { # logged LOG CMD...
  local log=$1; shift
  if "$@" >"$log" 2>&1; then return 0; fi
  echo "--- $log:"; tail -40 "$log"; return 1
}

version=$(sed -n 's/^#define LEASELOCK_VERSION "\([^"]*\)"/\1/p' csrc/leaselock.h)
backends=$(PKG_CONFIG=$PKG_CONFIG bash tools/backends.sh names)
[ -n "$version" ] || { fail "LEASELOCK_VERSION in csrc/leaselock.h"; finish; }
echo "leaselock $version, backends found by pkg-config: $backends"
mkdir -p "$out"
tmp=$(mktemp -d "$out/tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- sdist ---------------------------------------------------------------
rm -rf "$out/dist" "$out/src-wheel" "$out/src-install" "$out/wheelhouse"
mkdir -p "$out/dist" "$out/src-wheel" "$out/src-install" "$out/wheelhouse"
if ! logged "$out/sdist.log" "$tools/bin/python" setup.py -q sdist -d "$out/dist"; then
  fail "setup.py sdist"; finish
fi
sdist=$(ls "$out"/dist/leaselock-"$version".tar.gz 2>/dev/null)
check "sdist leaselock-$version.tar.gz" test -f "$sdist" || finish
tar tzf "$sdist" | sed "s|^leaselock-$version/||" | sort >"$out/sdist.files"
missing=()
for f in LICENSE README.md pyproject.toml setup.py MANIFEST.in tools/backends.sh csrc/SOURCES \
  python/*.c python/*.h python/leaselock/__init__.py python/leaselock/py.typed \
  $(grep -v '^#' csrc/SOURCES) csrc/*.h cli/*.c cli/*.h $(ls docs/leaselock.1 2>/dev/null); do
  grep -qxF "$f" "$out/sdist.files" || missing+=("$f")
done
check "sdist carries the build's sources (csrc/, cli/, tools/backends.sh, LICENSE)${missing[*]:+; missing: ${missing[*]}}" \
  test ${#missing[@]} -eq 0
stray=$(grep -E '\.(o|so|a|whl)$|^build/|(^|/)leaselock$' "$out/sdist.files")
check "sdist has no build products${stray:+: $stray}" test -z "$stray"
tar xzf "$sdist" -C "$out/src-wheel" --strip-components=1
tar xzf "$sdist" -C "$out/src-install" --strip-components=1

# ---- wheel and auditwheel show ---------------------------------------------
# setuptools>=77 of the tools venv (no build isolation: no download per run).
if logged "$out/wheel.log" bash -c 'cd "$1" && "$2/bin/python" -m pip wheel --no-deps \
     --no-build-isolation -w "$3" .' _ "$out/src-wheel" "$tools" "$out/wheelhouse"; then
  ok "pip wheel . (setuptools $("$tools/bin/python" -c 'import setuptools; print(setuptools.__version__)'))"
  wheel=$(ls "$out"/wheelhouse/leaselock-*.whl)
  echo "--- auditwheel show $(basename "$wheel"):"
  "$tools/bin/auditwheel" show "$wheel" 2>&1 | grep -v '^INFO:' | tee "$out/auditwheel.txt"
  echo "---"
  check "auditwheel show: consistent with the platform tag \"linux_x86_64\"" \
    grep -q 'consistent with the following platform tag: "linux_x86_64"' \
    <(tr -s ' \n' ' ' <"$out/auditwheel.txt")
  if "$tools/bin/auditwheel" show --json "$wheel" >"$out/auditwheel.json" 2>/dev/null; then
    "$tools/bin/python" tests/packaging/check_wheel.py "$wheel" "$out/auditwheel.json" "$version" \
      "$backends" >"$out/check_wheel.txt" 2>&1
    rc=$?
    cat "$out/check_wheel.txt"
    n_ok=$(grep -c '^ok: ' "$out/check_wheel.txt") n_fail=$(grep -c '^FAIL: ' "$out/check_wheel.txt")
    passed=$((passed + n_ok)) failed=$((failed + n_fail))
    [ $rc -eq 0 ] || [ "$n_fail" -gt 0 ] || fail "check_wheel.py exited $rc"
  else
    fail "auditwheel show --json"
  fi
else
  fail "pip wheel ."
fi

# ---- pip install . into a fresh venv ---------------------------------------
venv=$out/install-venv
rm -rf "$venv"
if ! logged "$out/venv.log" "$PYTHON" -m venv "$venv"; then fail "$PYTHON -m venv"; finish; fi
check "no leaselock on the fresh venv's PATH before the install" \
  test "$(PATH=$venv/bin:/usr/bin:/bin command -v leaselock)" != "$venv/bin/leaselock"
# A plain `pip install .`, as a user types it: pip fetches the build
# requirements (setuptools) from PyPI into an isolated build environment.
if logged "$out/install.log" bash -c 'cd "$1" && "$2/bin/pip" install .' _ "$out/src-install" "$venv"; then
  ok "pip install . into a fresh venv"
else
  fail "pip install . into a fresh venv"; finish
fi
cli=$(cd "$tmp" && PATH=$venv/bin:$PATH command -v leaselock)
check "leaselock on PATH is the venv's: $cli" test "$cli" = "$venv/bin/leaselock" -a -x "$venv/bin/leaselock"
check "ldd $venv/bin/leaselock: every library found" \
  bash -c '! ldd "$1" | grep -q "not found"' _ "$venv/bin/leaselock"
v=$(cd "$tmp" && PATH=$venv/bin:$PATH leaselock --version)
check "leaselock --version: $v" test "$v" = "leaselock $version"
uri="sqlite://$tmp/locks.db"
rc=0
(cd "$tmp" && PATH=$venv/bin:$PATH leaselock --uri "$uri" run packaging-job -- true) || rc=$?
check "leaselock run packaging-job -- true on $uri: exit $rc" test $rc -eq 0
fence=$(cd "$tmp" && PATH=$venv/bin:$PATH leaselock --uri "$uri" run packaging-job -- sh -c 'echo "$LEASELOCK_FENCE"')
check "a second run gets fence 2: $fence" test "$fence" = 2
if [ -f docs/leaselock.1 ]; then
  check "pip install . puts the man page in the venv's share/man/man1" \
    cmp -s docs/leaselock.1 "$venv/share/man/man1/leaselock.1"
fi
listed=$(cd "$tmp" && PATH=$venv/bin:$PATH leaselock --uri "$uri" list)
check "leaselock list shows packaging-job" grep -q packaging-job <<<"$listed"
# Each backend module where pip put it: nothing listens on port 1 of
# loopback, so a module found fails to connect (BACKEND), never UNSUPPORTED.
for b in $(PKG_CONFIG=$PKG_CONFIG bash tools/backends.sh modules); do
  buri="$b://u:p@127.0.0.1:1/db"
  [ "$b" = mongodb ] && buri="mongodb://127.0.0.1:1/db?serverSelectionTimeoutMS=300"
  res=$(cd "$tmp" && PATH=$venv/bin:$PATH leaselock --uri "$buri" list 2>&1)
  check "the venv's leaselock loads the $b module from $venv/lib/leaselock-backends" \
    grep -q "BACKEND: $b: connect" <<<"$res"
  res=$(cd "$tmp" && "$venv/bin/python" -c '
import sys, leaselock
try:
    leaselock.connect(sys.argv[1])
except Exception as e:
    print(getattr(e, "code", "?"), e)' "$buri" 2>&1)
  check "the venv's leaselock package loads its $b module: $res" grep -q "^BACKEND $b: connect" <<<"$res"
done
py=$(cd "$tmp" && "$venv/bin/python" -c '
import sys, leaselock
assert leaselock.__file__.startswith(sys.prefix + "/"), leaselock.__file__
c = leaselock.connect(sys.argv[1])
lease = c.lock("packaging-py").try_acquire()
assert lease is not None and lease.fence >= 1
lease.release()
c.close()
print(leaselock.__version__)' "$uri" 2>&1)
check "python -c 'import leaselock' in the venv (installed package, version $py), takes a lease" \
  test "$py" = "$version"
if logged "$out/uninstall.log" "$venv/bin/pip" uninstall -y leaselock; then
  check "pip uninstall leaselock removes bin/leaselock, the man page and the modules" \
    test ! -e "$venv/bin/leaselock" -a ! -e "$venv/share/man/man1/leaselock.1" \
    -a -z "$(ls "$venv/lib/leaselock-backends" 2>/dev/null)"
else
  fail "pip uninstall leaselock"
fi

# ---- the rock: only SQLite, then every library found -------------------------
rockdir=$out/rock
rm -rf "$rockdir" && mkdir -p "$rockdir/pc-sqlite-only"
check "luarocks lint leaselock-scm-1.rockspec" logged "$rockdir/lint.log" "$LUAROCKS" lint leaselock-scm-1.rockspec
check "rockspec source.url is git+https://github.com/leaselock/leaselock.git" \
  grep -q 'url = "git+https://github.com/leaselock/leaselock.git"' leaselock-scm-1.rockspec
cp "$("$PKG_CONFIG" --variable pcfiledir sqlite3)/sqlite3.pc" "$rockdir/pc-sqlite-only/"
only=$(PKG_CONFIG_LIBDIR=$rockdir/pc-sqlite-only PKG_CONFIG=$PKG_CONFIG bash tools/backends.sh names)
check "with only sqlite3.pc visible, tools/backends.sh finds: $only" test "$only" = sqlite

# One copy of the tree, built twice: the second `luarocks make` must
# recompile what the first built without the other libraries.
rock() { # rock NAME EXPECTED_BACKENDS [ENV...]: build, install and try the rock
  local name=$1 expect=$2; shift 2
  local dir=$rockdir/build
  if [ ! -d "$dir/src" ]; then
    mkdir -p "$dir/src"
    cp -r Makefile mk tools lua csrc leaselock-*.rockspec "$dir/src/"
  fi
  if logged "$dir/build-$name.log" env "$@" MAKEFLAGS=-j2 bash -c 'cd "$1" && "$2" --lua-version 5.4 make \
       --tree "$3" leaselock-scm-1.rockspec' _ "$dir/src" "$LUAROCKS" "$dir/tree"; then
    ok "luarocks make ($name)"
  else
    fail "luarocks make ($name)"; return
  fi
  check "rock build log ($name): backends compiled in: $expect" \
    grep -qx "lua-rock: backends compiled in: $expect" "$dir/build-$name.log"
  local mod=$dir/tree/lib/lua/5.4/leaselock.so
  local libs
  libs=$(ldd "$mod" | awk '{print $1}' | grep -E '^lib(sqlite3|mongoc-1\.0|bson-1\.0|mariadb|pq)\.so' | sort | tr '\n' ' ')
  echo "$name rock links: $libs"
  if LUA_CPATH="$dir/tree/lib/lua/5.4/?.so" "$LUA54" tests/packaging/rock_backends.lua \
       "sqlite://$tmp/rock-$name.db" "$expect"; then
    ok "rock ($name) loads, takes a lease, backends as built"
  else
    fail "rock ($name) loads, takes a lease, backends as built"
  fi
  for b in mongodb mysql postgresql; do
    local lib bmod=$dir/tree/lib/lua/5.4/leaselock-backends/leaselock_backend_$b.so
    case $b in mongodb) lib=libmongoc ;; mysql) lib=libmariadb ;; postgresql) lib=libpq ;; esac
    check "rock ($name): the Lua module does not link $lib" bash -c '! grep -q "$1" <<<"$2"' _ "$lib" "$libs"
    if [[ " $expect " == *" $b "* ]]; then
      check "rock ($name) installs leaselock-backends/leaselock_backend_$b.so, linking $lib" \
        bash -c 'ldd "$1" | grep -q "$2"' _ "$bmod" "$lib"
    else
      check "rock ($name) installs no $b module" test ! -e "$bmod"
    fi
  done
}
rock sqlite-only sqlite PKG_CONFIG_LIBDIR="$rockdir/pc-sqlite-only"
rock all-found "$backends"

finish
