#!/bin/bash
# run-stress.sh DIR GOAL_GRANTS TOOL... - `make stress` inside
# tests/with-servers.sh: make stress-<tool> for every tool, each writing
# its summaries into DIR, then tests/history/table.py's table of them
# (failing when a violation column is not 0 or fewer than GOAL_GRANTS
# grants were checked). Every tool runs even after a failure.
set -uo pipefail
dir=${1:?usage: run-stress.sh DIR GOAL_GRANTS TOOL...}; goal=${2:?}; shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dir" && mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rc=0
for t in "$@"; do
  echo "===== stress $t ====="
  make --no-print-directory "stress-$t" STRESS_DIR="$dir" || rc=1
done
"${PYTHON:-python3}" "$root/tests/history/table.py" --goal "grants=$goal" "$dir" || rc=1
exit $rc
