#!/bin/bash
# make bench-contention: bench/contention (built by mk/contention.mk) on
# every backend whose URI is set (tests/with-servers.sh sets them), with
# CONTENTION_WORKERS processes and then threads on one key, and one table.
#
#   CONTENTION_WORKERS  "2 8 32"      CONTENTION_SECONDS  5
#   CONTENTION_HOLD_MS  1
#   CONTENTION_MODES    "procs threads"   CONTENTION_BACKENDS (all whose URI is set)
set -uo pipefail
bin=${1:?usage: contention.sh BINARY}
workers=${CONTENTION_WORKERS:-2 8 32}
seconds=${CONTENTION_SECONDS:-5}
hold=${CONTENTION_HOLD_MS:-1}
modes=${CONTENTION_MODES:-procs threads}
only=${CONTENTION_BACKENDS:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-contention.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

backends=("sqlite sqlite://$tmp/locks.db")
[ -n "${MONGODB_URI:-}" ] && backends+=("mongodb $MONGODB_URI")
[ -n "${MYSQL_URI:-}" ] && backends+=("mysql $MYSQL_URI")
pg=${POSTGRESQL_URI:-}
[ -n "$pg" ] && backends+=("postgresql $pg")

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }
printf '%-10s %-7s %3s %7s %9s %8s %7s %9s %9s %9s %11s %11s %8s\n' backend mode n grants fewest/most \
  fairness useful wait_p50 wait_p99 wait_max handoff_p50 handoff_p99 req/grant
rc=0
for b in "${backends[@]}"; do
  name=${b%% *}; uri=${b#* }
  [ -n "$only" ] && [[ " $only " != *" $name "* ]] && continue
  for mode in $modes; do
    for n in $workers; do
      if ! line=$("$bin" "$uri" "$n" "$mode" "$seconds" "$hold" 2>"$tmp/err"); then
        echo "$name $mode $n: failed: $(head -c 300 "$tmp/err")"; rc=1; continue
      fi
      printf '%-10s %-7s %3s %7s %9s %8s %7s %9s %9s %9s %11s %11s %8s\n' "$name" "$mode" "$n" \
        "$(field grants "$line")" "$(field fewest "$line")/$(field most "$line")" \
        "$(field fairness "$line")" "$(field useful "$line")" "$(field wait_p50_ms "$line")" \
        "$(field wait_p99_ms "$line")" "$(field wait_max_ms "$line")" \
        "$(field handoff_p50_ms "$line")" "$(field handoff_p99_ms "$line")" \
        "$(field requests_per_grant "$line")"
    done
  done
done
echo "(times in ms; fairness = fewest / most grants per worker; useful = grants / (seconds / (hold + uncontended pair)); req/grant = database requests of the workers per grant)"
exit $rc
