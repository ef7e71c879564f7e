#!/bin/bash
# make bench-contention: bench/contention (built by mk/contention.mk) on
# every backend whose URI is set (tests/with-servers.sh sets them), with
# CONTENTION_WORKERS processes and then threads on one key, and one table.
#
#   CONTENTION_WORKERS  "2 8 32"      CONTENTION_SECONDS  5
#   CONTENTION_HOLD_MS  1
#   CONTENTION_MODES    "procs threads fair-procs"   CONTENTION_BACKENDS (all whose URI is set)
#
# The last column marks the contention goals on the rows they are about
# (8 workers): procs: fairness >= 0.3, every worker granted, useful >= 0.8,
# hand-off p50 <= 2 ms (PostgreSQL, SQLite: notification) or 10 ms, at
# most 3 requests per grant; fair-procs: fairness >= 0.8 and wait p99 <=
# (workers + 1) x (hold + hand-off p99); and issue 26's: fair-procs with
# 8 workers useful >= 0.7 and fairness >= 0.9 (use7, fair9), procs with
# 32 workers useful >= 0.75 (use75). "+" met, "-" not, per goal; "." on
# the other rows.
set -uo pipefail
bin=${1:?usage: contention.sh BINARY}
workers=${CONTENTION_WORKERS:-2 8 32}
seconds=${CONTENTION_SECONDS:-5}
hold=${CONTENTION_HOLD_MS:-1}
modes=${CONTENTION_MODES:-procs threads fair-procs}
only=${CONTENTION_BACKENDS:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-contention.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

backends=("sqlite sqlite://$tmp/locks.db")
[ -n "${MONGODB_URI:-}" ] && backends+=("mongodb $MONGODB_URI")
[ -n "${MYSQL_URI:-}" ] && backends+=("mysql $MYSQL_URI")
pg=${POSTGRESQL_URI:-}
[ -n "$pg" ] && backends+=("postgresql $pg")

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }
# goals NAME MODE N LINE: the goal marks of one row (see the top).
goals() {
  local name=$1 mode=$2 n=$3 line=$4
  local f u h50 h99 rq p99 lo
  f=$(field fairness "$line"); u=$(field useful "$line"); lo=$(field fewest "$line")
  if [ "$n" = 32 ] && [ "$mode" = procs ]; then
    awk -v u="$u" 'BEGIN { printf "use75%s\n", (u >= 0.75) ? "+" : "-" }'; return
  fi
  [ "$n" = 8 ] || { echo "."; return; }
  h50=$(field handoff_p50_ms "$line"); h99=$(field handoff_p99_ms "$line")
  rq=$(field requests_per_grant "$line"); p99=$(field wait_p99_ms "$line")
  case $mode in
    procs)
      local hmax=10; [ "$name" = sqlite ] || [ "$name" = postgresql ] && hmax=2
      awk -v f="$f" -v lo="$lo" -v u="$u" -v h="$h50" -v hm="$hmax" -v rq="$rq" 'BEGIN {
        printf "fair%s,useful%s,handoff%s,req%s\n", (f >= 0.3 && lo > 0) ? "+" : "-",
          (u >= 0.8) ? "+" : "-", (h <= hm) ? "+" : "-", (rq <= 3) ? "+" : "-" }' ;;
    fair-procs)
      awk -v f="$f" -v u="$u" -v p="$p99" -v n="$n" -v hold="$hold" -v h99="$h99" 'BEGIN {
        printf "fair%s,p99%s,use7%s,fair9%s\n", (f >= 0.8) ? "+" : "-",
          (p <= (n + 1) * (hold + h99)) ? "+" : "-", (u >= 0.7) ? "+" : "-", (f >= 0.9) ? "+" : "-" }' ;;
    *) echo "." ;;
  esac
}

printf '%-10s %-12s %3s %7s %9s %8s %7s %9s %9s %9s %11s %11s %8s  %s\n' backend mode n grants fewest/most \
  fairness useful wait_p50 wait_p99 wait_max handoff_p50 handoff_p99 req/grant goals
rc=0
for b in "${backends[@]}"; do
  name=${b%% *}; uri=${b#* }
  [ -n "$only" ] && [[ " $only " != *" $name "* ]] && continue
  for mode in $modes; do
    for n in $workers; do
      if ! line=$("$bin" "$uri" "$n" "$mode" "$seconds" "$hold" 2>"$tmp/err"); then
        echo "$name $mode $n: failed: $(head -c 300 "$tmp/err")"; rc=1; continue
      fi
      printf '%-10s %-12s %3s %7s %9s %8s %7s %9s %9s %9s %11s %11s %8s  %s\n' "$name" "$mode" "$n" \
        "$(field grants "$line")" "$(field fewest "$line")/$(field most "$line")" \
        "$(field fairness "$line")" "$(field useful "$line")" "$(field wait_p50_ms "$line")" \
        "$(field wait_p99_ms "$line")" "$(field wait_max_ms "$line")" \
        "$(field handoff_p50_ms "$line")" "$(field handoff_p99_ms "$line")" \
        "$(field requests_per_grant "$line")" "$(goals "$name" "$mode" "$n" "$line")"
    done
  done
done
echo "(times in ms; fairness = fewest / most grants per worker; useful = grants / (seconds / (hold + pair)), hold and acquire+release pair each measured alone, uncontended; req/grant = database requests of the workers per grant)"
exit $rc
