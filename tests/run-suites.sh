#!/bin/bash
# Runs "make test-<suite>" for each suite named, keeps going after a
# failure, and ends with one line CI reads: "N passed, N failed" (suites).
set -uo pipefail
passed=0; failed=0; failures=(); times=()
for s in "$@"; do
  echo "===== suite $s ====="
  t0=$SECONDS
  if make --no-print-directory "test-$s"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); failures+=("$s")
  fi
  times+=("$s=$((SECONDS - t0))s")
done
echo "suite seconds: ${times[*]}"
echo "====="
[ $failed -gt 0 ] && echo "failed suites: ${failures[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
