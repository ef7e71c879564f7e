#!/bin/bash
# valgrind memcheck on the C suites and the CLI.
#
#   bash tests/test_valgrind.sh BUILD [full]
#
# BUILD holds tests/test_contract and leaselock (a build without
# sanitizers). Runs the contract suite on fake:// and on SQLite (less the
# tests that mostly wait: TEST_SKIP_SLOW), and the CLI
# (run, status, list, release, bad input) on SQLite, each under
#   valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
# with tests/valgrind.supp. "full" adds the SQLite suite, the exclusion test
# and the in-process fault suite. A run fails when valgrind reports an error
# (its log is not empty) or the program's own status is not the one wanted;
# the log tells them apart where a wanted status is 1 too.
#
# Forked children (the contract suite's fork tests) are checked like their
# parent but stay silent (--child-silent-after-fork): a child's error still
# fails it through its exit status.
#
# Ends with "N passed, N failed".
set -uo pipefail

BUILD=$(cd "$1" && pwd)
MODE=${2:-quick}
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-valgrind.XXXXXX")
trap 'rm -rf "$TOP"' EXIT
unset LEASELOCK_URI

VG=(valgrind -q --fair-sched=yes --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
  --child-silent-after-fork=yes --suppressions="$HERE/valgrind.supp")
passed=0; failed=0; n=0

# vg NAME WANT_RC CMD...: runs CMD under valgrind; its output in $TOP/NAME.out.
vg() {
  local name=$1 want=$2; shift 2
  n=$((n + 1))
  local log="$TOP/$n.vg" out="$TOP/$n.out"
  local t0=$SECONDS
  "${VG[@]}" --log-file="$log" "$@" >"$out" 2>&1
  local rc=$?
  if [ -s "$log" ] || [ "$rc" != "$want" ]; then
    failed=$((failed + 1))
    echo "  not ok $name (exit $rc, want $want; $((SECONDS - t0)) s)" >&2
    grep -E "^  not ok|FAIL" "$out" >&2
    tail -n 20 "$out" >&2
    cat "$log" >&2
  else
    passed=$((passed + 1))
    echo "  ok $name ($((SECONDS - t0)) s)" >&2
  fi
}

DB="sqlite://$TOP/vg.db"
CLI="$BUILD/leaselock"

# The contract suite less its tests that mostly wait (TEST_SKIP_SLOW): the
# plain suites run those, and their time under valgrind is sleep.
export TEST_SKIP_SLOW=1
vg "contract fake://" 0 "$BUILD/tests/test_contract" fake://
vg "contract sqlite" 0 "$BUILD/tests/test_contract" "sqlite://$TOP/contract.db"

vg "cli run" 0 "$CLI" --uri "$DB" run --ttl 3s --label vg jobs/a -- sleep 1.5
vg "cli run (exit status)" 3 "$CLI" --uri "$DB" run jobs/a -- sh -c 'exit 3'
# A second run while a first one holds the key: busy.
"$CLI" --uri "$DB" run jobs/busy -- sleep 30 >/dev/null 2>&1 &
holder=$!
for ((i = 0; i < 200; i++)); do
  "$CLI" --uri "$DB" status jobs/busy >/dev/null 2>&1 && break
  sleep 0.05
done
vg "cli run (busy)" 75 "$CLI" --uri "$DB" run jobs/busy -- true
vg "cli status (held)" 0 "$CLI" --uri "$DB" status jobs/busy
vg "cli status --json" 0 "$CLI" --uri "$DB" status --json jobs/busy
vg "cli list --json" 0 "$CLI" --uri "$DB" list --json
vg "cli release --force" 0 "$CLI" --uri "$DB" release --force jobs/busy
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
vg "cli run --fair" 0 "$CLI" --uri "$DB" run --fair --wait 5s jobs/fair -- true
vg "cli run --slots" 0 "$CLI" --uri "$DB" run --slots 2 jobs/sem -- true
vg "cli run --shared" 0 "$CLI" --uri "$DB" run --shared jobs/rw -- true
vg "cli run --exclusive" 0 "$CLI" --uri "$DB" run --exclusive jobs/rw -- true
vg "cli run --reentrant" 0 "$CLI" --uri "$DB" run --reentrant jobs/re -- true
vg "cli bad option" 64 "$CLI" --uri "$DB" run --bogus jobs/a -- true
vg "cli bad URI" 64 "$CLI" --uri "nosuch://x:secret@h/db" status jobs/a
: >"$TOP/plain-file"
vg "cli unusable database" 69 "$CLI" --uri "sqlite://$TOP/plain-file/x.db" status jobs/a
# A backend module loaded (dlopen, its client library) at the first URI of
# its scheme; nothing listens on port 1 of loopback.
for b in $(bash "$HERE/../tools/backends.sh" modules); do
  uri="$b://u:p@127.0.0.1:1/db?connect_timeout=1"
  [ "$b" = mongodb ] && uri="mongodb://127.0.0.1:1/db?serverSelectionTimeoutMS=300"
  vg "cli loads the $b module" 69 "$CLI" --uri "$uri" list
done

if [ "$MODE" = full ]; then
  vg "cli run (no such command)" 127 "$CLI" --uri "$DB" run jobs/a -- /nonexistent/cmd
  vg "cli status (free)" 1 "$CLI" --uri "$DB" status jobs/a
  vg "cli status (no record)" 2 "$CLI" --uri "$DB" status jobs/none
  vg "cli list" 0 "$CLI" --uri "$DB" list jobs/
  vg "cli bad duration" 64 "$CLI" --uri "$DB" run --ttl 5parsecs jobs/a -- true
  vg "exclusion sqlite" 0 "$BUILD/tests/test_exclusion" "sqlite://$TOP/exclusion.db"
  mkdir -p "$TOP/faults"
  vg "in-process faults" 0 "$BUILD/tests/test_inproc_faults" "$TOP/faults"
fi

echo "valgrind: $passed passed, $failed failed"
[ $failed -eq 0 ]
