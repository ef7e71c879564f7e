#!/bin/bash
# Runs "make bench-core-<name>" for each name given; each prints its own
# side-by-side figures (engine vs bare client program, same run).
set -uo pipefail
rc=0
for b in "$@"; do
  echo "===== bench $b ====="
  make --no-print-directory "bench-core-$b" || rc=1
done
exit $rc
