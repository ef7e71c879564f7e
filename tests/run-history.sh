#!/bin/bash
# run-history.sh SECONDS SUMMARY_DIR -- RUN_PY... [-- EXTRA...] - the
# history checker (tests/history/run.py, given with its options as RUN_PY)
# on every backend in turn, SECONDS per round, EXTRA options added; with a
# SUMMARY_DIR ("" for none) each backend's counts go to
# SUMMARY_DIR/history-<backend>.summary. SQLite uses a fresh file; each
# server backend the URI in its variable (tests/with-servers.sh sets them).
# Every backend runs even after a failure; an unset variable is a failure.
set -uo pipefail
secs=${1:?usage: run-history.sh SECONDS SUMMARY_DIR -- RUN_PY... [-- EXTRA...]}; summary=$2
shift 2; [ "${1:-}" = -- ] && shift
run=() extra=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do run+=("$1"); shift; done
[ "${1:-}" = -- ] && shift && extra=("$@")

rc=0
for b in sqlite:- mongodb:MONGODB_URI mysql:MYSQL_URI postgresql:POSTGRESQL_URI; do
  name=${b%%:*} var=${b#*:}
  if [ "$var" = - ]; then uri=sqlite; else uri=${!var:-}; fi
  if [ -z "$uri" ]; then
    echo "history $name: $var is not set (run under tests/with-servers.sh, or set it)"
    rc=1; continue
  fi
  out=()
  [ -n "$summary" ] && out=(--summary "$summary/history-$name.summary")
  "${run[@]}" --backend "$name" --uri "$uri" --seconds "$secs" "${extra[@]+"${extra[@]}"}" \
    "${out[@]+"${out[@]}"}" || rc=1
done
exit $rc
