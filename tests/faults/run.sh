#!/bin/bash
# Runs the fault suite as three pytest processes at once, one per group of
# backends (most of a scenario is waiting for TTLs to run out, so they
# share the cores well), prints each one's output in turn, and one line of
# totals. With STRESS_OUT set, writes the totals to $STRESS_OUT/faults.summary
# as key=value pairs on one line.
#
#   bash tests/faults/run.sh [pytest args]   (from the top of the tree;
#   TOXIPROXY_BIN and PYTHONPATH set, as mk/faults.mk does)
#   FAULTS_SELECT='latency or sigkill'       a -k expression within each group
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
groups=("not (mysql or postgresql)" "mysql" "postgresql")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-faults.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
pids=()
for i in "${!groups[@]}"; do
  (cd "$here" && FAULTS_SUMMARY=$tmp/$i.summary exec "${PYTHON:-python3}" -m pytest -q \
     -p no:cacheprovider --tb=short -k "(${groups[$i]})${FAULTS_SELECT:+ and ($FAULTS_SELECT)}" "$@" .) >"$tmp/$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!groups[@]}"; do
  wait "${pids[$i]}"; r=$?
  # 5: nothing selected in this group (only with FAULTS_SELECT).
  if [ $r -ne 0 ] && ! { [ $r -eq 5 ] && [ -n "${FAULTS_SELECT:-}" ]; }; then rc=1; fi
  echo "--- faults: ${groups[$i]}"
  cat "$tmp/$i.log"
done
# Totals over the groups' key=value lines; a group that wrote none failed
# before its first scenario.
totals=$(cat "$tmp"/*.summary 2>/dev/null | tr ' ' '\n' | awk -F= '
  $1 != "" { s[$1] += $2 } END { for (k in s) printf "%s=%d ", k, s[k] }')
[ "$(ls "$tmp"/*.summary 2>/dev/null | wc -l)" -eq ${#groups[@]} ] || rc=1
line="suite=faults ${totals}seconds=$((SECONDS - start)) failed=$rc rounds=${LEASELOCK_FAULTS_ROUNDS:-1}"
echo "faults: $line"
if [ -n "${STRESS_OUT:-}" ]; then
  # One summary in the stress table's form (tests/history/table.py).
  get() { tr ' ' '\n' <<<"$totals" | sed -n "s/^$1=//p"; }
  mkdir -p "$STRESS_OUT" && printf '%s\n' tool=faults backend=faults-proxy \
    "grants=$(get grants)" "faults_injected=$(get faults)" "violations=$(get violations)" \
    "losses_reported=$(get losses)" "scenarios=$(get scenarios)" "failures=$rc" \
    >"$STRESS_OUT/faults.summary"
fi
exit $rc
