#!/bin/bash
# Runs "make test-<suite>" for each suite named, keeps going after a
# failure, and ends with one line CI reads: "N passed, N failed" (suites).
#
#   run-suites.sh [--side "SUITE ..."] SUITE ...
#
# The --side suites run one after another in a second lane, beside the
# others: suites that mostly wait (the failover suite's lock-delays and
# server restarts, on servers of their own) and share nothing with the
# rest. Their output is printed as one block when they end.
set -uo pipefail
side=()
if [ "${1:-}" = --side ]; then read -ra side <<<"${2:-}"; shift 2; fi
passed=0; failed=0; failures=(); times=()

run_one() { # suite: runs it, appends "name seconds rc" to $results
  local t0=$SECONDS rc=0
  echo "===== suite $1 ====="
  make --no-print-directory "test-$1" || rc=$?
  echo "$1 $((SECONDS - t0)) $rc" >>"$results"
}

results=$(mktemp); side_log=$(mktemp)
trap 'rm -f "$results" "$side_log"' EXIT
side_pid=
if [ ${#side[@]} -gt 0 ]; then
  (for s in "${side[@]}"; do run_one "$s"; done) >"$side_log" 2>&1 &
  side_pid=$!
  echo "===== side lane: ${side[*]} (output when it ends) ====="
fi
for s in "$@"; do run_one "$s"; done
if [ -n "$side_pid" ]; then
  wait "$side_pid"
  echo "===== side lane: ${side[*]} ====="
  cat "$side_log"
fi
while read -r name secs rc; do
  times+=("$name=${secs}s")
  if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$name"); fi
done <"$results"
echo "suite seconds: ${times[*]}"
echo "====="
[ $failed -gt 0 ] && echo "failed suites: ${failures[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
