#!/bin/bash
# Instructions per acquire+release pair of lock:with and of the C core
# loop beside it (bench/lua/count_with.lua), counted by callgrind: what the
# binding adds to each pair (the glue) without the noise of wall time on a
# shared machine. Run from the top of the tree after `make bench-lua` (or
# its modules) was built:
#
#   bash bench/lua/count_with.sh [lua5.4|luajit] [n1 n2] [key]
#
# On SQLite, or on the server COUNT_URI names (under tests/with-servers.sh:
# COUNT_URI=$POSTGRESQL_URI ...): callgrind counts this process only, the
# client's side of each pair, not the server's.
#
# Each side runs twice, n1 and n2 pairs (default 4000 and 12000, after a
# warm-up of 100); the difference of the two counts over n2 - n1 is the
# cost of a pair, start-up cancelled. A window of several thousand pairs
# spans many GC cycles (Lua 5.4's allocations go through glibc's malloc,
# whose cost varies with the heap's history: compare windows of the same
# n1, n2 and key).
set -euo pipefail
interp=${1:-lua5.4}
n1=${2:-4000}
n2=${3:-12000}
key=${4:-bench/count}
case $interp in
   lua5.4) d=5.4 ;;
   luajit) d=jit ;;
   *) echo "count_with.sh: lua5.4 or luajit, not $interp" >&2; exit 2 ;;
esac
build=$(pwd)/build
for so in "$build/lua/$d/leaselock.so" "$build/bench/lua/$d/leaselock_bench.so"; do
   [ -f "$so" ] || { echo "count_with.sh: $so missing: make bench-lua first" >&2; exit 1; }
done
# the server backends' modules, found as the Makefile's recipes find them
export LEASELOCK_BACKEND_PATH=${LEASELOCK_BACKEND_PATH:-$build/leaselock-backends}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count () { # side n -> instructions of the run
   LEASELOCK_BENCH_TMP=$tmp LUA_CPATH="$build/lua/$d/?.so;$build/bench/lua/$d/?.so" \
      valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
      "$interp" bench/lua/count_with.lua "$1" "$2" "$key" 2>"$tmp/vg.log" >/dev/null
   sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/vg.log"
}
per_pair () { # side -> instructions per pair between n1 and n2
   local a b
   a=$(count "$1" "$n1")
   b=$(count "$1" "$n2")
   echo $(((b - a) / (n2 - n1)))
}
lua=$(per_pair lua)
core=$(per_pair core)
echo "$interp, ${COUNT_URI:-SQLite}, key \"$key\", pairs $n1..$n2: instructions per pair"
echo "  lock:with $lua   C core $core   glue $((lua - core))"
awk -v l="$lua" -v c="$core" 'BEGIN { printf "  C core / lock:with = %.3f\n", c / l }'
