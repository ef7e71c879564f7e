#!/bin/bash
# server-suite.sh NAME VAR TESTS PROGRAM - one server backend's suite: the
# contract suite, the 8-thread + 4-process exclusion test and the backend's
# own tests (TESTS/PROGRAM), against the server whose URI is in $VAR
# (tests/with-servers.sh sets it; set it yourself to test another server).
# Every part runs even after a failure; an unset VAR, a program that was
# not built (its client library was not found) or a missing faketime (the
# clock-skew tests) fails the suite.
set -uo pipefail
name=${1:?usage: server-suite.sh NAME VAR TESTS PROGRAM}; var=${2:?}; tests=${3:?}; prog=${4:?}
fail() { echo "$name: $*"; echo "$name: 0 passed, 1 failed"; exit 1; }

uri=${!var:-}
[ -n "$uri" ] || fail "$var is not set: run it through tests/with-servers.sh (make test does), or set it"
[ -x "$tests/$prog" ] || fail "$tests/$prog was not built: its client library was not found (make deps)"
command -v faketime >/dev/null || fail "faketime is missing (make deps)"

rc=0
# The MongoDB test server exits with the process it watches (--parent):
# that must be the one tests/with-servers.sh exported.
if [ "$name" = mongodb ] && [ -n "${LEASELOCK_MONGO_SERVER_PID:-}" ]; then
  watched=$(tr '\0' '\n' </proc/"$LEASELOCK_MONGO_SERVER_PID"/cmdline 2>/dev/null | sed -n '/^--parent$/{n;p;}')
  if [ -z "${LEASELOCK_SERVERS_PID:-}" ] || [ "$watched" != "$LEASELOCK_SERVERS_PID" ]; then
    echo "$name: the test server watches pid '$watched', not LEASELOCK_SERVERS_PID '${LEASELOCK_SERVERS_PID:-}'"
    rc=1
  fi
fi
echo "--- $name: contract"; "$tests/test_contract" "$uri" || rc=1
echo "--- $name: exclusion"; "$tests/test_exclusion" "$uri" || rc=1
echo "--- $name: $prog"; "$tests/$prog" "$uri" || rc=1
exit $rc
