#!/bin/bash
# make demo: several "leaselock run" processes contend for one key on the
# embedded default database and take turns.
#
#   bash tools/demo.sh path/to/leaselock [WORKERS] [RUNS]
#
# Each worker runs "leaselock run --wait 60s KEY -- sh critical.sh" RUNS
# times. The protected command does a non-atomic read-increment-write of a
# shared counter file (with a pause in the middle, so an overlap would lose
# updates), appends "fence=N worker=W" to a log, and marks its presence with
# a directory that only one process can create. Afterwards the script checks
# that the counter equals the number of runs, that the fences in log order
# strictly increase and that no run found the marker taken; it exits
# non-zero if any check fails.
set -uo pipefail

BIN=${1:?usage: demo.sh path/to/leaselock [WORKERS] [RUNS]}
WORKERS=${2:-4}
RUNS=${3:-20}
KEY=leaselock-demo/counter
unset LEASELOCK_URI # the embedded default database

dir=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo 0 >"$dir/counter"
: >"$dir/log"

cat >"$dir/critical.sh" <<'EOF'
# $1: the demo directory, $2: the worker number. Runs under the lock.
d=$1 w=$2
if ! mkdir "$d/in-cs" 2>/dev/null; then
  echo "fence=$LEASELOCK_FENCE worker=$w" >>"$d/overlaps"
fi
n=$(cat "$d/counter")
sleep 0.01
echo $((n + 1)) >"$d/counter"
echo "fence=$LEASELOCK_FENCE worker=$w" >>"$d/log"
printf '  worker %s  fence=%-6s counter=%s\n' "$w" "$LEASELOCK_FENCE" $((n + 1))
rmdir "$d/in-cs" 2>/dev/null
exit 0
EOF

# the default database, as leaselock resolves it (the account's home)
db=$(getent passwd "$(id -u)" | cut -d: -f6)/.local/state/leaselock/locks.db
echo "leaselock demo: $WORKERS workers x $RUNS runs of"
echo "  leaselock run --wait 60s $KEY -- sh critical.sh"
echo "on the embedded default database ($db)"
echo

start=$(date +%s.%N)
pids=()
for ((w = 1; w <= WORKERS; w++)); do
  (
    for ((i = 1; i <= RUNS; i++)); do
      "$BIN" run --wait 60s --ttl 10s --label "demo worker $w" "$KEY" -- \
        sh "$dir/critical.sh" "$dir" "$w" || exit $?
      sleep 0.05 # the rest of the job, outside the lock
    done
  ) &
  pids+=($!)
done
worker_failed=0
for p in "${pids[@]}"; do
  wait "$p" || { echo "a worker failed (exit $?)" >&2; worker_failed=1; }
done
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

total=$((WORKERS * RUNS))
counter=$(cat "$dir/counter")
lines=$(wc -l <"$dir/log")
overlaps=0
[ -e "$dir/overlaps" ] && overlaps=$(wc -l <"$dir/overlaps")
# Fences in log order must strictly increase; count the hand-overs too.
read -r bad first last switches < <(awk '
  { split($1, a, "="); split($2, b, "="); f = a[2] + 0
    if (NR > 1 && f <= prev) bad++
    if (NR == 1) first = f
    if (NR > 1 && b[2] != pw) sw++
    prev = f; pw = b[2] }
  END { printf "%d %d %d %d\n", bad, first, prev, sw }' "$dir/log")

echo
ok=1
[ "$worker_failed" = 0 ] || ok=0
[ "$counter" = "$total" ] || { echo "LOST UPDATES: counter $counter, want $total"; ok=0; }
[ "$lines" = "$total" ] || { echo "log has $lines lines, want $total"; ok=0; }
[ "$bad" = 0 ] || { echo "FENCES OUT OF ORDER: $bad times"; ok=0; }
[ "$overlaps" = 0 ] || { echo "OVERLAPS:"; cat "$dir/overlaps"; ok=0; }
printf 'demo: %d workers x %d runs = %d critical sections, counter %s, fences %s..%s strictly increasing: %s, %s hand-overs between workers, %s overlaps, %ss\n' \
  "$WORKERS" "$RUNS" "$total" "$counter" "$first" "$last" \
  "$([ "$bad" = 0 ] && echo yes || echo NO)" "$switches" "$overlaps" "$elapsed"
if [ $ok = 1 ]; then
  echo "demo: PASS (0 overlaps)"
else
  echo "demo: FAIL"
  exit 1
fi
