#!/bin/bash
# No password from a URI in the CLI's output (stdout and stderr, every
# command) or in the Lua module's errors: each URI below fails without a
# server (PostgreSQL and MySQL at a socket in a missing directory, MongoDB
# at parse time, SQLite refusing credentials).
# Usage: tests/test_security.sh CLI LUA54_CPATH_DIR
set -uo pipefail
cli=$1 luadir=$2
S=Pw9DistinctSecret
uris=(
  "postgresql://u:$S@/db?host=/nonexistent-ll-dir"
  "postgresql://u@/db?host=/nonexistent-ll-dir&application_name=a@b&password=$S"
  "postgresql://u@/db?host=/nonexistent-ll-dir&pass%77ord=$S&sslpassword=$S"
  "postgresql://u:$S@evil@127.0.0.1/db"
  "mysql://u:$S@localhost/db?socket=/nonexistent-ll-dir/x.sock"
  "mysql://u:$S@h/db?bogus=1"
  "mongodb://u:$S:x@localhost/"
  "mongodb://u:$S@h@localhost/"
  "sqlite://u:$S@/tmp/x.db"
)
passed=0 failed=0
for u in "${uris[@]}"; do
  for cmd in "status k" "list" "release --force k" "run --ttl 5s k -- true"; do
    out=$("$cli" --uri "$u" $cmd 2>&1)
    out2=$(LEASELOCK_URI="$u" "$cli" $cmd 2>&1)
    if [[ "$out$out2" == *"$S"* || "$out$out2" == *"Pw9"* ]]; then
      echo "    FAIL cli $cmd with $u shows the password: $out $out2"; failed=$((failed + 1))
    else
      passed=$((passed + 1))
    fi
  done
  lua_out=$(LUA_CPATH="$luadir/?.so" lua5.4 /dev/stdin "$u" 2>&1 <<'LUA'
local ll = require "leaselock"
local c, msg, code = ll.connect(arg[1])
print(tostring(c), msg, code)
local ok, e = pcall(ll.connect, arg[1], { label = "x" })
print(ok, tostring(e))
LUA
)
  if [[ "$lua_out" == *"$S"* || "$lua_out" == *"Pw9"* ]]; then
    echo "    FAIL lua connect with $u shows the password: $lua_out"; failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
done
echo "security: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
