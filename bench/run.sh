#!/bin/bash
# Runs "make bench-core-<name>" for each name given; each prints its own
# side-by-side figures (engine vs bare client program, same run).
#
# The client is pinned to CPU 0 (BENCH_PIN in the Makefile). Where the test
# servers run decides a round's speed far more than either client does: a
# server thread on the client's CPU answers without a cross-CPU wake-up,
# one on another CPU answers like a server on another machine. Left to the
# scheduler, each connection's server thread lands on either, so the two
# sides of a bench would be measured in different worlds. Each bench of a
# server backend therefore runs twice, with the servers placed on the other
# CPUs and then on the client's CPU; SQLite, in-process, runs once.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ncpu=$(nproc 2>/dev/null || echo 1)
placements=("")
if command -v taskset >/dev/null && [ "$ncpu" -ge 2 ]; then
  others=1; [ "$ncpu" -gt 2 ] && others="1-$((ncpu - 1))"
  placements=("$others" "0")
fi
rc=0
for b in "$@"; do
  for cpus in "${placements[@]}"; do
    if [ "$b" = sqlite ] || [ -z "$cpus" ]; then
      echo "===== bench $b ====="
    elif servers=$(bash "$here/place-servers.sh" "$cpus"); then
      where="on CPU $cpus (the client's is 0)"
      [ "$cpus" = 0 ] && where="on the client's CPU (0)"
      echo "===== bench $b: servers ($servers) $where ====="
    else
      echo "===== bench $b: servers not placed (not started here) ====="
      cpus=""
    fi
    make --no-print-directory "bench-core-$b" || rc=1
    [ "$b" = sqlite ] || [ -z "$cpus" ] && break
  done
done
exit $rc
