#!/bin/bash
# run-fuzzers.sh DIR SECONDS FUZZER... - runs each libFuzzer harness
# DIR/<fuzzer> (built by mk/fuzz.mk) over its committed corpus
# (tests/fuzz/corpus/<fuzzer>) and DIR/corpus/<fuzzer>, then SECONDS of new
# inputs; a crash's input goes to DIR/crashes, the run's log to
# DIR/<fuzzer>.log. Stops at the first crash. With STRESS_OUT set, also
# writes STRESS_OUT/fuzz.summary (the executions of every harness, and
# whether one crashed) for the `make stress` table.
set -uo pipefail
dir=${1:?usage: run-fuzzers.sh DIR SECONDS FUZZER...}; secs=${2:?}; shift 2
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
root=$(cd "$(dirname "$0")/.." && pwd)

executions() { # the units libFuzzer's final stats count in the logs named
  cat "$@" 2>/dev/null | grep -oE '^stat::number_of_executed_units: *[0-9]+' |
    grep -oE '[0-9]+$' | awk '{s+=$1} END {print s+0}'
}

rc=0
mkdir -p "$dir/crashes"
for f in "$@"; do
  mkdir -p "$dir/corpus/$f" "$root/tests/fuzz/corpus/$f"
  if ! "$dir/$f" -max_len=512 -timeout=10 -dict="$root/tests/fuzz/uri.dict" \
      -artifact_prefix="$dir/crashes/" -print_final_stats=1 -max_total_time="$secs" \
      "$dir/corpus/$f" "$root/tests/fuzz/corpus/$f" >"$dir/$f.log" 2>&1; then
    tail -40 "$dir/$f.log"
    echo "$f: crash, input in $dir/crashes"
    rc=1
    break
  fi
  echo "$f: $(executions "$dir/$f.log") executions in $secs s, no crash"
done
if [ -n "${STRESS_OUT:-}" ]; then
  printf 'tool=fuzz\nbackend=-\nfuzz_executions=%s\ncrashes=%s\n' \
    "$(executions "$dir"/*.log)" "$rc" >"$STRESS_OUT/fuzz.summary"
fi
exit $rc
