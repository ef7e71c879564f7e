#!/bin/bash
# The backend modules (csrc/backend_load.c): a process on SQLite maps no
# client library of another backend, the first URI of a scheme loads its
# module (and its library), and a module, or its client library, missing at
# run time answers UNSUPPORTED with the Debian package to install.
#
#   bash tests/test_modules.sh BUILD CLI PY_LIB LUA LUA_MOD_DIR MODULES
#     BUILD        the build directory (build)
#     CLI          the leaselock command built there
#     PY_LIB       the built Python package's directory (setup.py build)
#     LUA          a Lua interpreter, LUA_MOD_DIR: its leaselock.so's dir
#     MODULES      the modules built ("mongodb mysql postgresql")
#
# Each process reads its own /proc/<pid>/maps (the CLI's through the command
# it runs under a lease). Nothing listens on port 1 of loopback: a server
# URI there loads the module, then fails to connect (BACKEND).
# Ends with "N passed, N failed".
set -uo pipefail
BUILD=${1:?usage: test_modules.sh BUILD CLI PY_LIB LUA LUA_MOD_DIR MODULES}
CLI=$(realpath "$2") PY_LIB=$(realpath "$3") LUA=$4 LUA_MOD_DIR=$(realpath "$5") MODULES=$6
D=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-modules.XXXXXX")
trap 'rm -rf "$D"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "  ok $1"; }
bad() { failed=$((failed + 1)); echo "  not ok $1: $2"; }
CLIENT_LIBS='lib(mongoc-1\.0|bson-1\.0|mariadb|pq)\.so'
# The client libraries named in a maps file (or LD_DEBUG output), one line.
client_libs() { grep -oE "$CLIENT_LIBS" "$1" | sort -u | tr '\n' ' '; }
uri_of() { # a URI of backend $1 that reaches nothing
  case $1 in
  mongodb) echo "mongodb://127.0.0.1:1/db?serverSelectionTimeoutMS=300&connectTimeoutMS=300" ;;
  *) echo "$1://u:p@127.0.0.1:1/db?connect_timeout=1" ;;
  esac
}
lib_of() { case $1 in mongodb) echo libmongoc-1.0 ;; mysql) echo libmariadb ;; *) echo libpq ;; esac; }
dev_of() { case $1 in mongodb) echo libmongoc-dev ;; mysql) echo libmariadb-dev ;; *) echo libpq-dev ;; esac; }
runtime_of() { case $1 in mongodb) echo libmongoc-1.0-0 ;; mysql) echo libmariadb3 ;; *) echo libpq5 ;; esac; }

# ---- the CLI ------------------------------------------------------------
# Every file the dynamic loader opens for --help (dlopen'ed ones included).
LD_DEBUG=files "$CLI" --help >/dev/null 2>"$D/help.ld"
n=$(grep -c "file=.*\[0\];  needed by\|file=.*\[0\];  dynamically loaded by" "$D/help.ld")
found=$(client_libs "$D/help.ld")
[ -z "$found" ] && ok "leaselock --help loads $n libraries, no backend's client library" ||
  bad "leaselock --help loads no client library" "$found"
"$CLI" --uri "sqlite://$D/cli.db" run modules-cli -- sh -c 'cat /proc/$PPID/maps' >"$D/cli.maps" 2>&1
found=$(client_libs "$D/cli.maps")
# SQLite is in the binary (mk/cli.mk, CLI_SQLITE=static) or libsqlite3.so.
grep -qE "/leaselock$|libsqlite3" "$D/cli.maps" && [ -z "$found" ] &&
  ok "leaselock run on SQLite: its maps hold no backend's client library" ||
  bad "leaselock run on SQLite maps no client library" "${found:-$(head -c 300 "$D/cli.maps")}"

# ---- Python and Lua: a lease on SQLite, then one URI per module -----------
cat >"$D/maps.py" <<'PY'
import re, sys
import leaselock
pattern = re.compile(sys.argv[2])
def libs():
    with open("/proc/self/maps") as f:
        return sorted(set(pattern.findall(f.read())))
c = leaselock.connect(sys.argv[1])
with c.lock("modules-py") as lease:
    assert lease.fence >= 1
c.close()
print("sqlite:", " ".join(libs()))
for uri in sys.argv[3:]:
    try:
        leaselock.connect(uri).close()
    except (leaselock.LockError, ValueError) as e:
        if getattr(e, "code", "") == "UNSUPPORTED":
            print("UNSUPPORTED", e)
print("after:", " ".join(libs()))
PY
pattern='lib(?:mongoc-1\.0|bson-1\.0|mariadb|pq)\.so'
uris=()
for b in $MODULES; do uris+=("$(uri_of "$b")"); done
PYTHONPATH=$PY_LIB python3 "$D/maps.py" "sqlite://$D/py.db" "$pattern" "${uris[@]}" >"$D/py.out" 2>&1
sqlite_line=$(grep '^sqlite:' "$D/py.out") after=$(grep '^after:' "$D/py.out")
[ "$sqlite_line" = "sqlite: " ] && ok "Python: import leaselock and a lease on SQLite map no client library" ||
  bad "Python on SQLite maps no client library" "$(head -c 400 "$D/py.out")"
for b in $MODULES; do
  lib=$(lib_of "$b")
  grep -q "$lib" <<<"$after" && ! grep -q UNSUPPORTED "$D/py.out" &&
    ok "Python: the first $b URI loads its module and $lib" ||
    bad "Python: $b loads $lib" "$(head -c 400 "$D/py.out")"
done

cat >"$D/maps.lua" <<'LUA'
local ll = require "leaselock"
local function libs()
  local f = assert(io.open("/proc/self/maps")); local t = f:read("a"); f:close()
  local seen = {}
  for name in t:gmatch("lib[%w%-%.]+%.so") do
    if name:match("^libmongoc") or name:match("^libbson") or name:match("^libmariadb")
       or name:match("^libpq") then seen[#seen + 1] = name end
  end
  return table.concat(seen, " ")
end
local c = assert(ll.connect(arg[1]))
assert(c:lock("modules-lua"):with(function(lease) return lease.fence end) >= 1)
c:close()
print("sqlite: " .. libs())
for i = 2, #arg do
  local client, msg, code = ll.connect(arg[i])
  if client then client:close() end
  if code == "UNSUPPORTED" then print("UNSUPPORTED " .. tostring(msg)) end
end
print("after: " .. libs())
LUA
LUA_CPATH="$LUA_MOD_DIR/?.so" "$LUA" "$D/maps.lua" "sqlite://$D/lua.db" "${uris[@]}" >"$D/lua.out" 2>&1
[ "$(grep '^sqlite:' "$D/lua.out")" = "sqlite: " ] &&
  ok "Lua: require and a lease on SQLite map no client library" ||
  bad "Lua on SQLite maps no client library" "$(head -c 400 "$D/lua.out")"
after=$(grep '^after:' "$D/lua.out")
for b in $MODULES; do
  lib=$(lib_of "$b")
  grep -q "$lib" <<<"$after" && ! grep -q UNSUPPORTED "$D/lua.out" &&
    ok "Lua: the first $b URI loads its module and $lib" ||
    bad "Lua: $b loads $lib" "$(head -c 400 "$D/lua.out")"
done

# ---- a module missing: UNSUPPORTED, what to install ------------------------
# A copy of the CLI with no leaselock-backends beside it, and the path empty.
mkdir -p "$D/bin" "$D/empty" && cp "$CLI" "$D/bin/leaselock"
for b in mongodb mysql postgresql; do
  LEASELOCK_BACKEND_PATH=$D/empty "$D/bin/leaselock" --uri "$(uri_of "$b")" list >"$D/miss.out" 2>&1
  rc=$?
  dev=$(dev_of "$b")
  grep -q "UNSUPPORTED: .*install $dev" "$D/miss.out" && [ $rc -ne 0 ] &&
    ok "no $b module: UNSUPPORTED, install $dev ($(head -c 140 "$D/miss.out")...)" ||
    bad "no $b module: UNSUPPORTED with install $dev" "rc $rc: $(cat "$D/miss.out")"
done

# ---- its client library missing: UNSUPPORTED, the runtime package ---------
# In a mount namespace of our own (unshare -rm), the library's file is
# /dev/null: the module is there, dlopen cannot load what it needs.
if unshare -rm true 2>/dev/null; then
  cases=()
  for b in $MODULES; do cases+=("$b $(lib_of "$b") $(runtime_of "$b")"); done
  # libmongoc's own libbson, named too.
  [[ " $MODULES " == *" mongodb "* ]] && cases+=("mongodb libbson-1.0 libbson-1.0-0")
  for c in "${cases[@]}"; do
    read -r b lib runtime <<<"$c"
    so=$(ldd "$BUILD/leaselock-backends/leaselock_backend_$b.so" |
      awk -v l="$lib" 'index($1, l ".so") == 1 {print $3; exit}')
    if [ -z "$so" ]; then bad "$b's $lib" "not in ldd of its module"; continue; fi
    unshare -rm sh -c 'mount --bind /dev/null "$1" && shift && exec "$@"' _ "$so" \
      "$CLI" --uri "$(uri_of "$b")" list >"$D/lib.out" 2>&1
    grep -q "UNSUPPORTED: .*install $runtime" "$D/lib.out" &&
      ok "$b with $lib unloadable: UNSUPPORTED, install $runtime" ||
      bad "$b without $so: UNSUPPORTED with install $runtime" "$(cat "$D/lib.out")"
  done
else
  echo "  skip the client-library-missing cases: unshare -rm is not permitted here"
fi

echo "modules: $passed passed, $failed failed"
[ "$failed" = 0 ]
