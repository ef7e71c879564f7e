#!/bin/bash
# The leaselock CLI against a throwaway SQLite database per test: exit
# statuses, the environment of the command, signals, loss of the lease (the
# command is gone before the database could grant the key again, also when
# leaselock is killed or stopped), status/list/release output, the cron
# options (-q, -E), prune, durations that parse back, bad input, and --help
# against the exit statuses of docs/cli.md and the man page (docs/leaselock.1).
#
#   bash tests/test_cli.sh path/to/leaselock      (TEST_FILTER=substr runs some;
#                                                  KEEP=1 keeps the files)
#
# Ends with "N passed, N failed" and exits non-zero on any failure.
set -uo pipefail

BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$BIN" ] || { echo "usage: $0 path/to/leaselock" >&2; exit 2; }
TOP=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-cli.XXXXXX")
unset LEASELOCK_URI LEASELOCK_KEY LEASELOCK_FENCE LEASELOCK_OWNER
BG=()
USERS=() GROUPS_MADE=()
cleanup() {
  for p in "${BG[@]+"${BG[@]}"}"; do kill -KILL "$p" 2>/dev/null; done
  # gone before their users are (a command dies with its leaselock run)
  for p in "${BG[@]+"${BG[@]}"}"; do wait "$p" 2>/dev/null; done
  for u in "${USERS[@]+"${USERS[@]}"}"; do userdel -f "$u" 2>/dev/null; done
  for g in "${GROUPS_MADE[@]+"${GROUPS_MADE[@]}"}"; do groupdel "$g" 2>/dev/null; done
  [ -n "${KEEP:-}" ] && echo "files kept in $TOP" >&2 || rm -rf "$TOP"
}
trap cleanup EXIT

passed=0; failed=0; cur_failed=0
T=; URI=; OUT=; ERR=; RC=

fail() { echo "    FAIL ${FUNCNAME[1]}: $*" >&2; cur_failed=1; }

# ll ARGS...: runs leaselock with the test's URI; sets RC, OUT, ERR (files).
ll() {
  "$BIN" --uri "$URI" "$@" >"$OUT" 2>"$ERR"
  RC=$?
}
# ll_bg ARGS...: starts leaselock in the background; its pid is in BGPID,
# its output in $T/bg.out / $T/bg.err.
ll_bg() {
  "$BIN" --uri "$URI" "$@" >"$T/bg.out" 2>"$T/bg.err" &
  BGPID=$!
  BG+=("$BGPID")
}
# expect_rc N: the last ll returned N.
expect_rc() {
  if [ "$RC" != "$1" ]; then
    fail "exit status $RC, want $1 (stderr: $(head -c 400 "$ERR"))"
    return 1
  fi
}
# expect_err TEXT / expect_out TEXT: the last ll's stderr/stdout contains TEXT.
expect_err() {
  grep -qF -- "$1" "$ERR" || { fail "stderr lacks \"$1\": $(head -c 400 "$ERR")"; return 1; }
}
expect_out() {
  grep -qF -- "$1" "$OUT" || { fail "stdout lacks \"$1\": $(head -c 400 "$OUT")"; return 1; }
}
# wait_state KEY WANT_RC: polls "status KEY" until it exits WANT_RC
# (0 held, 1 free), for at most about 20 s.
wait_state() {
  local i
  for ((i = 0; i < 400; i++)); do
    "$BIN" --uri "$URI" status "$1" >/dev/null 2>&1
    [ $? = "$2" ] && return 0
    sleep 0.05
  done
  fail "status $1 never exited $2"
  return 1
}
# wait_file PATH: waits (at most about 20 s) for PATH to exist.
wait_file() {
  local i
  for ((i = 0; i < 400; i++)); do
    [ -s "$1" ] && return 0
    sleep 0.05
  done
  fail "$1 never appeared"
  return 1
}
# wait_blocked PID: waits until PID is leaselock (not the shell forked to
# start it, which may block SIGTERM for a moment itself) and blocks SIGTERM
# (leaselock run has set up its signal handling), at most about 20 s.
wait_blocked() {
  local i blk
  for ((i = 0; i < 400; i++)); do
    blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
    [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$BIN" ] && [ -n "$blk" ] &&
      (((16#$blk >> 14) & 1)) && return 0
    sleep 0.05
  done
  fail "process $1 never blocked SIGTERM"
  return 1
}
# reap PID: waits for a background leaselock; its status is in BGRC.
reap() {
  wait "$1"
  BGRC=$?
}

run_test() {
  local f=${TEST_FILTER:-}
  [ -n "$f" ] && [[ $1 != *"$f"* ]] && return
  T="$TOP/$1"; mkdir -p "$T"
  URI="sqlite://$T/x.db"; OUT="$T/out"; ERR="$T/err"
  cur_failed=0
  "$1"
  if [ $cur_failed = 0 ]; then
    passed=$((passed + 1)); echo "  ok $1" >&2
  else
    failed=$((failed + 1)); echo "  not ok $1" >&2
  fi
}

# ---- tests -------------------------------------------------------------

test_help_version() {
  "$BIN" --help >"$T/h" 2>&1 || fail "--help exit $?"
  grep -q "Exit status" "$T/h" || fail "--help has no exit status table"
  grep -q "^  75 " "$T/h" || fail "--help does not list 75"
  grep -q "^  76 " "$T/h" || fail "--help does not list 76"
  "$BIN" run --help >/dev/null 2>&1 || fail "run --help exit $?"
  "$BIN" --version >"$T/v" 2>&1 || fail "--version exit $?"
  grep -qE '^leaselock [0-9]+\.[0-9]+' "$T/v" || fail "--version: $(cat "$T/v")"
}

test_env_vars() {
  # Stale values in the environment are replaced, not duplicated.
  LEASELOCK_KEY=stale LEASELOCK_FENCE=999 \
    ll run jobs/env -- sh -c 'env | grep "^LEASELOCK_" | sort' || true
  expect_rc 0 || return
  expect_out "LEASELOCK_KEY=jobs/env" || return
  grep -qE '^LEASELOCK_FENCE=[1-9][0-9]*$' "$OUT" || { fail "fence: $(cat "$OUT")"; return; }
  grep -qE '^LEASELOCK_OWNER=[0-9a-f]{32}$' "$OUT" || { fail "owner: $(cat "$OUT")"; return; }
  [ "$(grep -c '^LEASELOCK_KEY=' "$OUT")" = 1 ] || { fail "LEASELOCK_KEY twice"; return; }
  local f1; f1=$(sed -n 's/^LEASELOCK_FENCE=//p' "$OUT")
  ll run jobs/env -- sh -c 'echo "$LEASELOCK_FENCE"'
  expect_rc 0 || return
  [ "$(cat "$OUT")" -gt "$f1" ] || fail "second fence $(cat "$OUT") not above $f1"
  # The arguments reach the command unchanged.
  ll run jobs/env -- printf '<%s>' 'a b' '' '--ttl' '*'
  expect_rc 0 && [ "$(cat "$OUT")" = '<a b><><--ttl><*>' ] || fail "argv: $(cat "$OUT")"
}

test_exit_status() {
  ll run k -- sh -c 'exit 3'; expect_rc 3 || return
  ll run k -- true; expect_rc 0 || return
  ll run --wait forever k -- true; expect_rc 0 || return
  ll run k -- sh -c 'exit 255'; expect_rc 255 || return
  ll run k -- sh -c 'kill -TERM $$'; expect_rc 143 || return
  ll run k -- sh -c 'kill -KILL $$'; expect_rc 137 || return
  ll run k -- "$T/no-such-command"; expect_rc 127 || return
  expect_err "No such file or directory" || return
  : >"$T/not-exec"
  ll run k -- "$T/not-exec"; expect_rc 126 || return
  expect_err "Permission denied" || return
  # The lease is released each time: the key is free again.
  ll status k; expect_rc 1 || return
  expect_out "state:      free"
}

test_busy() {
  ll_bg run busy/key -- sleep 60
  local holder=$BGPID
  wait_state busy/key 0 || return
  ll run busy/key -- touch "$T/ran"
  expect_rc 75 || return
  expect_err "busy/key is busy: held by" || return
  expect_err "(sleep)" || return
  [ ! -e "$T/ran" ] || { fail "the command ran without the lock"; return; }
  ll run --wait 300ms busy/key -- touch "$T/ran"
  expect_rc 75 || return
  expect_err "gave up after --wait 300ms" || return
  [ ! -e "$T/ran" ] || { fail "the command ran without the lock"; return; }
  # A signal stops a waiting leaselock: 128+15, and the command never ran.
  "$BIN" --uri "$URI" run --wait 60s busy/key -- touch "$T/ran" 2>"$T/waiter.err" &
  local waiter=$!
  BG+=("$waiter")
  wait_blocked "$waiter" || return
  kill -TERM "$waiter"
  reap "$waiter"
  [ "$BGRC" = 143 ] || { fail "waiter exit $BGRC, want 143"; return; }
  grep -q "interrupted by signal 15 while waiting" "$T/waiter.err" ||
    { fail "waiter: $(cat "$T/waiter.err")"; return; }
  [ ! -e "$T/ran" ] || { fail "the command ran without the lock"; return; }
  # SIGTERM to leaselock is forwarded: sleep dies of it, 128+15.
  kill -TERM "$holder"
  reap "$holder"
  [ "$BGRC" = 143 ] || { fail "holder exit $BGRC, want 143"; return; }
  ll status busy/key; expect_rc 1
}

# run --fair waits in order of arrival: a one-try fair run behind a queued
# waiter is busy even once the holder is gone.
test_fair() {
  ll_bg run fair/key -- sleep 2
  local holder=$BGPID
  wait_state fair/key 0 || return
  "$BIN" --uri "$URI" run --fair --wait 30s fair/key -- sh -c 'echo first > "$0/first"; sleep 1' \
    "$T" 2>"$T/w.err" &
  local waiter=$!
  BG+=("$waiter")
  wait_blocked "$waiter" || return
  reap "$holder"
  # The holder is gone; the queued waiter goes first, not this run.
  ll run --fair fair/key -- touch "$T/cut-in"
  expect_rc 75 || return
  [ ! -e "$T/cut-in" ] || { fail "a one-try fair run cut in front of the queued waiter"; return; }
  reap "$waiter"
  [ "$BGRC" = 0 ] || { fail "waiter exit $BGRC: $(cat "$T/w.err")"; return; }
  [ -e "$T/first" ] || fail "the queued waiter never ran"
}

# run --reentrant inside a run of the same key enters its lease once more
# (status shows 2 holds, the same fence); without it the inner run is busy;
# another key or no run around it is an ordinary run.
test_reentrant() {
  local inner="'$BIN' --uri '$URI'"
  ll run re/key -- sh -c "$inner run --reentrant re/key -- sh -c \"$inner status --json re/key; \
    echo fence=\\\$LEASELOCK_FENCE\"; echo inner=\$?; $inner status --json re/key"
  expect_rc 0 || return
  grep -q '"holds":2' "$OUT" || { fail "inner status: $(cat "$OUT")"; return; }
  grep -q '^inner=0$' "$OUT" || { fail "inner run: $(cat "$OUT")"; return; }
  grep -q '"holds":1' "$OUT" || { fail "after the inner run: $(cat "$OUT")"; return; }
  local f; f=$(sed -n 's/^fence=//p' "$OUT")
  grep -q "\"fence\":$f," "$OUT" || { fail "fence $f not the lease's: $(cat "$OUT")"; return; }
  ll status re/key; expect_rc 1 || return
  # The inner command's exit status comes back through both runs.
  ll run re/key -- sh -c "$inner run --reentrant re/key -- sh -c 'exit 7'"
  expect_rc 7 || return
  # Without --reentrant the inner run is refused at once, even with a
  # --wait that would have made it wait for itself.
  ll run re/key -- sh -c "$inner run --wait 1h re/key -- true"
  expect_rc 75 || return
  expect_err "is held by the leaselock run around this one" || return
  expect_err "pass --reentrant to enter it again" || return
  # Another key: an ordinary run of its own.
  ll run re/key -- sh -c "$inner run --reentrant re/other -- $inner status re/other"
  expect_rc 0 || return
  expect_out "state:      held" || return
  # No run around it: an ordinary run.
  ll run --reentrant re/key -- true
  expect_rc 0
}

# A read-write run inside a run of the same KEY's read-write lock that
# would wait for it (a reader or writer inside the writer, a writer inside
# a reader) is refused at once as busy, even with a --wait; readers inside
# a reader go together; the command sees the KEY and holder kind.
test_rw_self_wait() {
  local inner="'$BIN' --uri '$URI'"
  ll run --exclusive rwself/key -- sh -c "$inner run --shared --wait 3s rwself/key -- true"
  expect_rc 75 || return
  expect_err "is held by the leaselock run around this one" || return
  expect_err "not entered again" || return
  ll run --exclusive rwself/key -- sh -c "$inner run --exclusive --wait 3s rwself/key -- true"
  expect_rc 75 || return
  ll run --shared rwself/key -- sh -c "$inner run --exclusive --wait 3s rwself/key -- true"
  expect_rc 75 || return
  expect_err "a reader cannot become the writer" || return
  ll run --shared rwself/key -- sh -c "$inner run --shared rwself/key -- \
    sh -c 'echo \"\$LEASELOCK_LOCK \$LEASELOCK_MODE\"'"
  expect_rc 0 || return
  expect_out "rwself/key shared" || return
  # Another key: an ordinary run.
  ll run --exclusive rwself/key -- sh -c "$inner run --exclusive rwself/other -- true"
  expect_rc 0
}

# --slots 1 inside a run holding the same KEY's only slot would wait for
# it: refused at once as busy, even with a --wait; with more slots a
# nested run takes a slot of its own.
test_slots_self_wait() {
  local inner="'$BIN' --uri '$URI'"
  ll run --slots 1 slotself/key -- sh -c "$inner run --slots 1 --wait 3s slotself/key -- true"
  expect_rc 75 || return
  expect_err "is held by the leaselock run around this one" || return
  expect_err "only slot" || return
  ll run --slots 2 slotself/key -- sh -c "$inner run --slots 2 slotself/key -- \
    sh -c 'echo \"\$LEASELOCK_LOCK \$LEASELOCK_MODE\"'"
  expect_rc 0 || return
  expect_out "slotself/key slots"
}

# run --slots 2: two runs hold a slot each (KEY/.slot/<i>, the lease's key
# in LEASELOCK_KEY), a third is busy (75) and comes in once one has left.
test_slots() {
  local a b
  "$BIN" --uri "$URI" run --slots 2 sem/key -- sh -c 'echo "$LEASELOCK_KEY" >"$0/a"; sleep 60' \
    "$T" 2>"$T/a.err" &
  a=$!; BG+=("$a")
  "$BIN" --uri "$URI" run --slots 2 sem/key -- sh -c 'echo "$LEASELOCK_KEY" >"$0/b"; sleep 60' \
    "$T" 2>"$T/b.err" &
  b=$!; BG+=("$b")
  wait_file "$T/a" || return
  wait_file "$T/b" || return
  grep -qx 'sem/key/\.slot/[01]' "$T/a" || { fail "first run's key: $(cat "$T/a")"; return; }
  grep -qx 'sem/key/\.slot/[01]' "$T/b" || { fail "second run's key: $(cat "$T/b")"; return; }
  [ "$(cat "$T/a")" != "$(cat "$T/b")" ] || { fail "both runs hold $(cat "$T/a")"; return; }
  ll run --slots 2 sem/key -- touch "$T/ran3"
  expect_rc 75 || return
  expect_err 'sem/key is busy: all 2 slots are held' || return
  [ ! -e "$T/ran3" ] || { fail "a third run got in"; return; }
  ll list sem/key/
  expect_out 'sem/key/.slot/0' || return
  expect_out 'sem/key/.slot/1' || return
  "$BIN" --uri "$URI" run --slots 2 --wait 30s sem/key -- touch "$T/ran4" 2>"$T/w.err" &
  local waiter=$!
  BG+=("$waiter")
  wait_blocked "$waiter" || return
  kill -TERM "$a"
  reap "$a"
  reap "$waiter"
  [ "$BGRC" = 0 ] && [ -e "$T/ran4" ] || { fail "waiter exit $BGRC: $(cat "$T/w.err")"; return; }
  kill -TERM "$b"
  reap "$b"
}

# run --shared runs go together; --exclusive is busy while they hold,
# waits for them to leave, and keeps new shared runs out while it waits
# and while it holds.
test_shared_exclusive() {
  local r1 w
  "$BIN" --uri "$URI" run --shared rw/key -- sh -c 'echo in >"$0/r1"; sleep 60' "$T" 2>"$T/r1.err" &
  r1=$!; BG+=("$r1")
  wait_file "$T/r1" || return
  ll run --shared rw/key -- sh -c 'echo "$LEASELOCK_KEY"'
  expect_rc 0 || return
  grep -qx 'rw/key/\.rw/r/[0-9a-f]\{32\}' "$OUT" || { fail "shared key: $(cat "$OUT")"; return; }
  ll run --exclusive rw/key -- touch "$T/x1"
  expect_rc 75 || return
  [ ! -e "$T/x1" ] || { fail "--exclusive ran beside a --shared run"; return; }
  "$BIN" --uri "$URI" run --exclusive --wait 30s rw/key -- sh -c 'echo in >"$0/x2"; sleep 3' "$T" \
    2>"$T/w.err" &
  w=$!; BG+=("$w")
  # The waiting writer holds rw/key/.rw/w: new readers wait behind it.
  wait_state rw/key/.rw/w 0 || return
  ll run --shared rw/key -- touch "$T/r2"
  expect_rc 75 || return
  [ ! -e "$T/r2" ] || { fail "a --shared run passed a waiting --exclusive one"; return; }
  [ ! -e "$T/x2" ] || { fail "--exclusive ran while a --shared run held"; return; }
  kill -TERM "$r1"
  reap "$r1"
  wait_file "$T/x2" || return
  ll run --shared rw/key -- touch "$T/r3"
  expect_rc 75 || return
  ll run --exclusive rw/key -- touch "$T/r3"
  expect_rc 75 || return
  reap "$w"
  [ "$BGRC" = 0 ] || { fail "--exclusive exit $BGRC: $(cat "$T/w.err")"; return; }
  ll run --shared rw/key -- true
  expect_rc 0
}

# --slots, --shared and --exclusive: one at most, none with --reentrant,
# --slots a whole number from 1 to 1000.
test_modes_bad() {
  local U=(--uri "$URI")
  bad 64 '--slots, --shared and --exclusive do not go together' "${U[@]}" run --slots 2 --shared k -- touch "$T/ran"
  bad 64 '--slots, --shared and --exclusive do not go together' "${U[@]}" run --exclusive --slots 2 k -- touch "$T/ran"
  bad 64 '--slots, --shared and --exclusive do not go together' "${U[@]}" run --shared --exclusive k -- touch "$T/ran"
  bad 64 '--reentrant does not go with --slots' "${U[@]}" run --reentrant --slots 3 k -- touch "$T/ran"
  bad 64 '--reentrant does not go with --shared' "${U[@]}" run --shared --reentrant k -- touch "$T/ran"
  bad 64 '--reentrant does not go with --exclusive' "${U[@]}" run --exclusive --reentrant k -- touch "$T/ran"
  bad 64 '--slots "0": expected a whole number from 1 to 1000' "${U[@]}" run --slots 0 k -- touch "$T/ran"
  bad 64 '--slots "1001"' "${U[@]}" run --slots 1001 k -- touch "$T/ran"
  bad 64 '--slots "2x"' "${U[@]}" run --slots 2x k -- touch "$T/ran"
  bad 64 '--slots needs a value' "${U[@]}" run k --slots
  # The records' suffixes must fit in the 255 bytes of a key.
  bad 64 'so it may have at most 245' "${U[@]}" run --slots 2 "$(printf 'x%.0s' {1..246})" -- touch "$T/ran"
  bad 64 'so it may have at most 216' "${U[@]}" run --exclusive "$(printf 'x%.0s' {1..217})" -- touch "$T/ran"
  ll run --shared --shared k -- true
  expect_rc 0
}

test_wait_then_acquire() {
  ll_bg run wait/key -- sh -c 'sleep 1; echo "$LEASELOCK_FENCE" > "$0/first-done"' "$T"
  local holder=$BGPID
  wait_state wait/key 0 || return
  # The second command may only start once the first has finished.
  ll run --wait 30s wait/key -- sh -c \
    'test -s "$0/first-done" || exit 9; echo "$LEASELOCK_FENCE"' "$T"
  expect_rc 0 || return
  reap "$holder"
  [ "$BGRC" = 0 ] || { fail "holder exit $BGRC"; return; }
  [ "$(cat "$OUT")" -gt "$(cat "$T/first-done")" ] || fail "fence did not grow"
}

# (SIGUSR1: a shell cannot trap HUP, INT or QUIT when it was started with
# them ignored, as under nohup or in a background job.)
test_signal_forwarded() {
  ll_bg run sig/key -- sh -c \
    'trap "echo got-usr1 > \"$0/usr1\"; exit 5" USR1; echo $$ > "$0/pid"; while :; do sleep 0.05; done' "$T"
  local holder=$BGPID
  wait_file "$T/pid" || return
  kill -USR1 "$holder"
  reap "$holder"
  [ "$BGRC" = 5 ] || { fail "exit $BGRC, want 5 (the command's own status)"; return; }
  grep -q got-usr1 "$T/usr1" 2>/dev/null || fail "the command did not see SIGUSR1"
}

test_lost_sigterm() {
  ll_bg run --ttl 1s lost/term -- sh -c 'echo $$ > "$0/pid"; exec sleep 60' "$T"
  local holder=$BGPID
  wait_file "$T/pid" || return
  wait_state lost/term 0 || return
  ll release --force lost/term
  expect_rc 0 || return
  expect_out "lost/term: released (a live lease was taken away)" || return
  reap "$holder"
  [ "$BGRC" = 76 ] || { fail "exit $BGRC, want 76; $(cat "$T/bg.err")"; return; }
  grep -q "lease on lost/term lost" "$T/bg.err" || { fail "no loss message: $(cat "$T/bg.err")"; return; }
  grep -q "sending SIGTERM" "$T/bg.err" || { fail "no SIGTERM message"; return; }
  ! grep -q "sending SIGKILL" "$T/bg.err" || { fail "SIGKILL was needed"; return; }
  ! kill -0 "$(cat "$T/pid")" 2>/dev/null || fail "the command is still running"
}

# running PID: PID exists and is not a zombie (a killed process may stay a
# zombie until its parent reaps it).
running() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
# gone PID...: waits (at most about 10 s) until no PID is running.
gone() {
  local i p alive
  for ((i = 0; i < 200; i++)); do
    alive=
    for p in "$@"; do running "$p" && alive+=" $p"; done
    [ -z "$alive" ] && return 0
    sleep 0.05
  done
  fail "still running:$alive ($(ps -o pid=,pgid=,stat=,args= -p "${alive# }" 2>/dev/null))"
  return 1
}
# A command that ignores SIGTERM (so does its sleep: ignored signals are
# inherited) and writes a timestamp to $T/beats every 20 ms, in the
# background; its pid in $T/pid, leaselock's in HOLDER.
beating_bg() {
  "$BIN" --uri "$1" run "${@:2}" -- sh -c \
    'trap "" TERM; echo $$ > "$0/pid"; while :; do date +%s%N >> "$0/beats"; sleep 0.02; done' "$T" \
    >"$T/bg.out" 2>"$T/bg.err" &
  HOLDER=$!
  BG+=("$HOLDER")
}
# second_run URI KEY: another run of KEY (waiting for it) writes its start
# time; no beat of the first command may come after it (checked once the
# first command is gone).
second_run() {
  "$BIN" --uri "$1" run --wait 20s "$2" -- sh -c 'date +%s%N > "$0/second"' "$T" 2>"$T/second.err"
  local rc=$?
  [ "$rc" = 0 ] || { fail "the second run exited $rc: $(cat "$T/second.err")"; return 1; }
  # Once the first command is gone, compare all its beats.
  gone "$(cat "$T/pid")"
  local last
  last=$(tail -n 1 "$T/beats")
  [ "$last" -lt "$(cat "$T/second")" ] ||
    { fail "the first command still ran $(( ($last - $(cat "$T/second")) / 1000000 ))ms after the second started"; return 1; }
}

# The renewal is stuck in a database another process has locked (SQLite
# waits up to busy_timeout_ms for it), and the command ignores SIGTERM. It
# must be killed before the lease expires in the database: the locker
# unlocks once that expiry has passed and a second run, waiting on the same
# key, starts at once. Not one beat of the first command may follow.
test_stopped_before_expiry_while_renewal_blocked() {
  local u="$URI?busy_timeout_ms=60000"
  beating_bg "$u" --ttl 1500ms lost/blocked
  local holder=$HOLDER
  wait_file "$T/pid" || return
  wait_state lost/blocked 0 || return
  python3 -c '
import sqlite3, sys, time, pathlib
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN IMMEDIATE")
pathlib.Path(sys.argv[2], "locked").write_text("1")
time.sleep(2.0)  # past the database expiry: the last renewal came before
db.execute("COMMIT")
' "${URI#sqlite://}" "$T" &
  local locker=$!
  BG+=("$locker")
  wait_file "$T/locked" || return
  second_run "$u" lost/blocked || return
  wait "$locker"
  reap "$holder"
  [ "$BGRC" = 76 ] || { fail "exit $BGRC, want 76; $(cat "$T/bg.err")"; return; }
  grep -q "lease on lost/blocked not renewed" "$T/bg.err" || { fail "no loss message: $(cat "$T/bg.err")"; return; }
  ! running "$(cat "$T/pid")" || fail "the command is still running"
}

# leaselock is stopped (SIGSTOP) past its TTL: the watchdog kills the
# command by the lease's local deadline, before another run takes the key.
# After SIGCONT, leaselock reports the loss.
test_supervisor_stopped() {
  beating_bg "$URI" --ttl 1s stop/key
  local holder=$HOLDER
  wait_file "$T/pid" || return
  wait_state stop/key 0 || return
  kill -STOP "$holder"
  second_run "$URI" stop/key
  local ok=$?
  kill -CONT "$holder"
  [ $ok = 0 ] || return
  reap "$holder"
  [ "$BGRC" = 76 ] || fail "exit $BGRC after SIGCONT, want 76; $(cat "$T/bg.err")"
}

# leaselock is SIGKILLed: its command and the command's own child die with
# it, promptly (they would run without the lock).
test_supervisor_killed() {
  ll_bg run kill/key -- sh -c 'sleep 60 & echo $! > "$0/gpid"; echo $$ > "$0/pid"; wait' "$T"
  local holder=$BGPID
  wait_file "$T/pid" || return
  wait_file "$T/gpid" || return
  running "$(cat "$T/gpid")" || { fail "no grandchild"; return; }
  kill -KILL "$holder"
  reap "$holder" 2>/dev/null # (no "Killed" notice)
  gone "$(cat "$T/pid")" "$(cat "$T/gpid")"
}

# What the command leaves behind in its process group is killed when it
# ends, before the lease is released: it would run without the lock.
test_leftovers_killed() {
  ll run left/key -- sh -c 'sleep 60 & echo $! > "$0/gpid"' "$T"
  expect_rc 0 || return
  gone "$(cat "$T/gpid")"
}

# --grace must fit in the TTL (SIGKILL comes before the lease's local
# deadline); an explicit one that does not is refused, the default shrinks.
test_grace_fits_ttl() {
  bad 64 '--grace 500ms does not fit in --ttl 1s: at most 400ms' --uri "$URI" run --ttl 1s --grace 500ms k -- touch "$T/ran"
  bad 64 '--grace 10s does not fit in --ttl 5s: at most 2s' --uri "$URI" run --grace 10s --ttl 5s k -- touch "$T/ran"
  ll run --ttl 1s --grace 400ms k -- true; expect_rc 0 || return
  ll run --ttl 1s k -- true; expect_rc 0 || return
  # The limit it prints is accepted when typed back.
  "$BIN" --uri "$URI" run --ttl 30d --grace 30d k -- true 2>"$ERR"
  local max
  max=$(sed -n 's/.*at most \([^ ]*\) .*/\1/p' "$ERR")
  [ -n "$max" ] || { fail "no limit: $(cat "$ERR")"; return; }
  ll run --ttl 30d --grace "$max" k -- true; expect_rc 0
}

test_lost_sigkill() {
  ll_bg run --ttl 1s --grace 300ms lost/kill -- sh -c \
    'trap "" TERM; echo $$ > "$0/pid"; while :; do sleep 0.05; done' "$T"
  local holder=$BGPID
  wait_file "$T/pid" || return
  wait_state lost/kill 0 || return
  ll release --force lost/kill; expect_rc 0 || return
  reap "$holder"
  [ "$BGRC" = 76 ] || { fail "exit $BGRC, want 76; $(cat "$T/bg.err")"; return; }
  grep -q "still running after the grace period: sending SIGKILL" "$T/bg.err" ||
    { fail "no SIGKILL message: $(cat "$T/bg.err")"; return; }
  ! kill -0 "$(cat "$T/pid")" 2>/dev/null || { fail "the command survived SIGKILL"; return; }
  # The grace it printed parses back (at most the 300ms asked for).
  local g
  g=$(sed -n 's/.*SIGKILL in \([^ ]*\)$/\1/p' "$T/bg.err")
  parsed_ms "$g" || return
  [ "$PARSED" -le 300 ] || fail "\"$g\" read back as ${PARSED}ms"
}

test_min_hold() {
  ll run --min-hold 30s mh/key -- true
  expect_rc 0 || return
  ll status mh/key; expect_rc 0 || return
  expect_out "state:      min-hold" || return
  expect_out "owner:      -" || return
  ll run mh/key -- touch "$T/ran"; expect_rc 75 || return
  expect_err "released but kept by --min-hold" || return
  [ ! -e "$T/ran" ] || fail "ran during min-hold"
}

test_status_list_json() {
  ll status app/a; expect_rc 2 || return
  expect_out "state:      free (no record)" || return
  ll run --label 'nightly "backup"' app/a -- true; expect_rc 0 || return
  local weird=$'app/we"ird\\key\n\ttab-é'
  ll run --label $'lab\x01el' "$weird" -- true; expect_rc 0 || return
  ll run other -- true; expect_rc 0 || return
  ll_bg run app/b -- sleep 60
  local holder=$BGPID
  wait_state app/b 0 || return

  ll status app/b; expect_rc 0 || return
  expect_out "state:      held" || return
  grep -qE '^owner:      [0-9a-f]{32}$' "$OUT" || { fail "owner line: $(cat "$OUT")"; return; }
  expect_out "fence:      1" || return
  grep -qE '^expires in: [0-9.]+s$' "$OUT" || { fail "expires line: $(cat "$OUT")"; return; }
  expect_out "holder:     $(hostname) pid $holder (sleep)" || return
  ll status app/a; expect_rc 1 || return
  expect_out "state:      free" || return

  ll list app/; expect_rc 0 || return
  [ "$(wc -l <"$OUT")" = 4 ] || { fail "list app/: $(cat "$OUT")"; return; }
  [ "$(head -1 "$OUT")" = "database:   $URI" ] || { fail "list's first line: $(cat "$OUT")"; return; }
  grep -q '^app/b  held  fence=1' "$OUT" || { fail "list line: $(cat "$OUT")"; return; }
  grep -qF 'app/we"ird\key\x0a\x09tab-é  free' "$OUT" || { fail "escaping: $(cat "$OUT")"; return; }

  ll list --json app/; expect_rc 0 || return
  python3 - "$OUT" "$weird" "$holder" <<'EOF' || { fail "list --json: $(cat "$OUT")"; return; }
import json, sys
recs = json.load(open(sys.argv[1], encoding="utf-8"))
assert [r["key"] for r in recs] == ["app/a", "app/b", sys.argv[2]], recs
a, b, w = recs
assert a["label"] == 'nightly "backup"' and a["state"] == "free" and a["owner"] is None, a
assert b["state"] == "held" and len(b["owner"]) == 32 and b["pid"] == int(sys.argv[3]), b
assert b["fence"] == 1 and 0 < b["expires_in_ms"] <= 30000, b
assert w["label"] == "lab\x01el", w
EOF
  # A label must be text; a command's file name need not be, and becomes
  # the default label with '?' for its bytes that are not UTF-8.
  ll run --label $'bad\xffx' lab/x -- true; expect_rc 64 || return
  expect_err "--label must be at most 255 bytes of UTF-8" || return
  ll run --label "$(printf 'x%.0s' {1..256})" lab/x -- true; expect_rc 64 || return
  printf '#!/bin/sh\nexit 0\n' >"$T/"$'bad\xffname' && chmod +x "$T/"$'bad\xffname'
  ll run lab/x -- "$T/"$'bad\xffname'; expect_rc 0 || return
  ll list --json lab/; expect_rc 0 || return
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r[0]["label"]=="bad?name", r' "$OUT" ||
    { fail "label from a file name that is not UTF-8: $(cat "$OUT")"; return; }
  ll list --json nothing/; expect_rc 0 || return
  [ "$(cat "$OUT")" = "[]" ] || { fail "empty list: $(cat "$OUT")"; return; }
  ll list; expect_rc 0 || return
  [ "$(wc -l <"$OUT")" = 6 ] || { fail "list: $(cat "$OUT")"; return; }
  ll status --json app/b; expect_rc 0 || return
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["key"]=="app/b" and r["state"]=="held"' "$OUT" ||
    fail "status --json: $(cat "$OUT")"
  ll status --json app/none; expect_rc 2 || return
  [ "$(cat "$OUT")" = null ] || fail "status --json of a missing key: $(cat "$OUT")"
  kill -TERM "$holder"; reap "$holder"
}

test_release_force() {
  ll_bg run --ttl 1s rel/key -- sleep 60
  local holder=$BGPID
  wait_state rel/key 0 || return
  ll release rel/key; expect_rc 64 || return
  expect_err "release needs --force" || return
  ll status rel/key; expect_rc 0 || return
  ll release --force rel/key; expect_rc 0 || return
  expect_out "rel/key: released (a live lease was taken away)" || return
  # Free now, and the fence survives: the next holder gets a larger one.
  ll run rel/key -- sh -c 'echo "$LEASELOCK_FENCE"'; expect_rc 0 || return
  [ "$(cat "$OUT")" = 2 ] || { fail "fence after force release: $(cat "$OUT")"; return; }
  ll release --force rel/key; expect_rc 0 || return
  expect_out "rel/key: was not held" || return
  ll release --force never/used; expect_rc 0 || return
  expect_out "never/used: was not held"
  reap "$holder"
  [ "$BGRC" = 76 ] || fail "the holder whose lease was taken exited $BGRC, want 76"
}

# parsed_ms DURATION: the CLI's own reading of DURATION, in ms, in PARSED
# (a --min-hold on a fresh key, read back from status --json; the time the
# two calls take is in it). Fails when the CLI refuses DURATION.
parsed_ms() {
  local k="rt/$((++RT_N))"
  "$BIN" --uri "$URI" run --min-hold "$1" "$k" -- true 2>"$T/rt.err" ||
    { fail "\"$1\", printed by the CLI, does not parse back: $(cat "$T/rt.err")"; return 1; }
  PARSED=$("$BIN" --uri "$URI" status --json "$k" | sed -n 's/.*"expires_in_ms":\([0-9-]*\).*/\1/p')
}
RT_N=0

# Every duration the CLI prints reads back through its own parser, as about
# the same value (within 1% and the second the round trip takes).
test_durations_parse_back() {
  local d ms
  for d in 5500ms 45s 2m 150s 125m 2h 27h 29d; do
    ll run --min-hold "$d" "held/$d" -- true; expect_rc 0 || return
  done
  ll list held/; expect_rc 0 || return
  grep -o 'expires_in=[^ ]*' "$OUT" | cut -d= -f2 >"$T/printed"
  ll status held/27h; expect_rc 0 || return
  sed -n 's/^expires in: //p' "$OUT" >>"$T/printed"
  ll run --wait 100ms held/2m -- true; expect_rc 75 || return
  sed -n 's/.*expires in \([^ ,]*\).*/\1/p' "$ERR" >>"$T/printed"
  sed -n 's/.*gave up after --wait \([^ )]*\).*/\1/p' "$ERR" >>"$T/printed"
  [ "$(wc -l <"$T/printed")" -ge 11 ] || { fail "durations found: $(cat "$T/printed")"; return; }
  while read -r d; do
    ms=$(echo "$d" | awk '
      match($0, /^[0-9]+(\.[0-9]+)?/) {
        u = substr($0, RLENGTH + 1)
        f = u == "ms" ? 1 : u == "s" ? 1e3 : u == "m" ? 6e4 : u == "h" ? 3.6e6 : u == "d" ? 8.64e7 : -1
        if (f > 0) { printf "%.0f\n", substr($0, 1, RLENGTH) * f; exit }
      }
      { print -1 }')
    parsed_ms "$d" || return
    [ "$PARSED" -le "$ms" ] && [ $((ms - PARSED)) -le $((ms / 100 + 1000)) ] ||
      { fail "\"$d\" (${ms}ms by its text) was read back as ${PARSED}ms"; return; }
  done <"$T/printed"
}

# The exit statuses of docs/cli.md's table, one a line ("0", "126",
# "128+N", ...).
readme_statuses() {
  sed -n '/^## Exit statuses/,/^## /p' "$SRC/docs/cli.md" |
    sed -n 's/^| \([0-9][^|]*\) |.*/\1/p' |
    tr '/' '\n' | sed 's/[^0-9+N-]//g' | grep -E '^[0-9]+(\+N)?$'
}

test_help_lists_readme_statuses() {
  "$BIN" --help >"$T/h" 2>&1 || { fail "--help exit $?"; return; }
  local st n=0
  for st in $(readme_statuses); do
    n=$((n + 1))
    grep -qF -- "  $st " "$T/h" || fail "--help does not list exit status $st"
  done
  [ "$n" -ge 10 ] || fail "read only $n statuses from docs/cli.md's table"
  # 70 means the same in both: what EXIT_INTERNAL covers in cli/.
  grep -A1 '^  70 ' "$T/h" | grep -q 'signal handling' || fail "--help: 70 lacks signals"
  grep -A1 '^  70 ' "$T/h" | grep -q 'cannot start CMD' || fail "--help: 70 lacks CMD"
  grep '^| 70 ' "$SRC/docs/cli.md" | grep -q 'signal handling' || fail "docs/cli.md: 70 lacks signals"
  grep '^| 70 ' "$SRC/docs/cli.md" | grep -q 'cannot start CMD' || fail "docs/cli.md: 70 lacks CMD"
}

# The man page (docs/leaselock.1) names every option and exit status that
# --help names.
test_man_page_matches_help() {
  local man="$SRC/docs/leaselock.1" o st
  [ -f "$man" ] || { fail "no $man"; return; }
  "$BIN" --help >"$T/h" 2>&1
  sed 's/\\-/-/g; s/\\f[BIRP]//g' "$man" >"$T/man.txt"
  for o in $(grep -oE '(^|[ ,\[])--?[a-zA-Z][a-zA-Z-]*' "$T/h" | sed 's/^[ ,[]//' | sort -u); do
    grep -qF -- "$o" "$T/man.txt" || fail "the man page lacks $o"
  done
  for st in $(sed -n 's/^  \([0-9][0-9+N-]*\) .*/\1/p' "$T/h"); do
    grep -A1 -x '\.TP' "$T/man.txt" | grep -qxF -- "$st" || fail "the man page lacks exit status $st"
  done
  for c in run status list top release prune; do
    grep -q "^\.SS.*$c" "$T/man.txt" || fail "the man page has no section for $c"
  done
  if command -v groff >/dev/null; then
    groff -man -Tutf8 -ww -z "$man" 2>"$T/groff.err"
    [ ! -s "$T/groff.err" ] || fail "groff: $(head -c 300 "$T/groff.err")"
  fi
}

# -q: a busy run prints nothing and exits 75; -E N changes the status of a
# busy run (and of --wait running out), as flock(1) -E does.
test_quiet_conflict_exit_code() {
  ll_bg run cron/key -- sleep 60
  local holder=$BGPID
  wait_state cron/key 0 || return
  ll run -q cron/key -- touch "$T/ran"
  expect_rc 75 || return
  [ ! -s "$OUT" ] && [ ! -s "$ERR" ] || { fail "-q printed: $(cat "$OUT" "$ERR")"; return; }
  ll run --quiet --wait 200ms cron/key -- touch "$T/ran"
  expect_rc 75 || return
  [ ! -s "$ERR" ] || { fail "--quiet printed: $(cat "$ERR")"; return; }
  ll run -E 0 cron/key -- touch "$T/ran"
  expect_rc 0 || return
  expect_err "cron/key is busy: held by" || return
  ll run -q -E 0 cron/key -- touch "$T/ran"
  expect_rc 0 || return
  [ ! -s "$ERR" ] || { fail "-q -E 0 printed: $(cat "$ERR")"; return; }
  ll run --conflict-exit-code=3 --wait 100ms cron/key -- touch "$T/ran"
  expect_rc 3 || return
  ll run --conflict-exit-code 255 cron/key -- touch "$T/ran"
  expect_rc 255 || return
  [ ! -e "$T/ran" ] || { fail "the command ran without the lock"; return; }
  # -E is for a busy key only: a free key runs CMD with its own status,
  # and -q leaves CMD's output alone.
  ll run -q -E 0 other/key -- sh -c 'echo hello; exit 4'
  expect_rc 4 || return
  expect_out "hello" || return
  # Errors are still printed with -q.
  ll run -q --ttl abc k -- true
  expect_rc 64 || return
  expect_err 'invalid duration "abc"' || return
  kill -TERM "$holder"
  reap "$holder"
}

test_conflict_exit_code_bad() {
  local U=(--uri "$URI")
  bad 64 '-E "256": expected an exit status, a whole number from 0 to 255' "${U[@]}" run -E 256 k -- touch "$T/ran"
  bad 64 '-E "-1": expected an exit status' "${U[@]}" run -E -1 k -- touch "$T/ran"
  bad 64 '--conflict-exit-code "abc": expected an exit status' "${U[@]}" run --conflict-exit-code abc k -- touch "$T/ran"
  bad 64 '--conflict-exit-code "": expected an exit status' "${U[@]}" run --conflict-exit-code= k -- touch "$T/ran"
  bad 64 '--conflict-exit-code "1.5": expected an exit status' "${U[@]}" run --conflict-exit-code 1.5 k -- touch "$T/ran"
  bad 64 '-E "0001": expected an exit status' "${U[@]}" run -E 0001 k -- touch "$T/ran"
  bad 64 'option -E needs a value' "${U[@]}" run -E
  bad 64 'unknown option -x' "${U[@]}" run -x k -- touch "$T/ran"
}

# prune: deletes expired records only (never a live one or one inside its
# min-hold), under PREFIX, at least --older-than ago; prints how many.
test_prune() {
  ll run jobs/a -- true; ll run jobs/b -- true; ll run other/c -- true
  ll run --min-hold 1m jobs/hold -- true
  ll_bg run jobs/live -- sleep 60
  local holder=$BGPID
  wait_state jobs/live 0 || return
  ll prune --older-than 1h jobs/
  expect_rc 0 || return
  expect_out "pruned 0 records" || return
  sleep 0.3
  ll prune --older-than 200ms jobs/
  expect_rc 0 || return
  expect_out "pruned 2 records" || return
  ll list
  [ "$(wc -l <"$OUT")" = 4 ] || { fail "left: $(cat "$OUT")"; return; }
  expect_out "jobs/hold" && expect_out "jobs/live" && expect_out "other/c" || return
  ll status jobs/a; expect_rc 2 || return
  ll prune
  expect_rc 0 || return
  expect_out "pruned 1 record" || return
  ll status jobs/live; expect_rc 0 || return
  ll status jobs/hold; expect_rc 0 || return
  # A pruned key starts its fence again.
  ll run jobs/a -- sh -c 'echo "$LEASELOCK_FENCE"'
  [ "$(cat "$OUT")" = 1 ] || { fail "fence after prune: $(cat "$OUT")"; return; }
  kill -TERM "$holder"
  reap "$holder"
  local U=(--uri "$URI")
  bad 64 'unknown option --bogus' "${U[@]}" prune --bogus
  bad 64 'prune takes one PREFIX' "${U[@]}" prune a b
  bad 64 'invalid duration "x"' "${U[@]}" prune --older-than x
  bad 64 'invalid duration "-1s"' "${U[@]}" prune --older-than -1s
  bad 64 'option --older-than needs a value' "${U[@]}" prune --older-than
  bad 64 'prefix is not valid UTF-8' "${U[@]}" prune $'\xff'
  "$BIN" prune --help >/dev/null || fail "prune --help exit $?"
}

# bad RC MESSAGE ARGS...: leaselock ARGS fails with RC and MESSAGE on
# stderr, and the command after "--" (touch ran) does not run.
bad() {
  local want=$1 msg=$2; shift 2
  rm -f "$T/ran"
  "$BIN" "$@" >"$OUT" 2>"$ERR"
  RC=$?
  if [ "$RC" != "$want" ] || ! grep -qF -- "$msg" "$ERR"; then
    fail "leaselock $*: exit $RC, stderr \"$(head -c 300 "$ERR")\"; want $want and \"$msg\""
  fi
  [ ! -e "$T/ran" ] || fail "leaselock $*: the command ran"
}

test_bad_input() {
  local U=(--uri "$URI") key256
  key256=$(printf 'k%.0s' $(seq 256))
  bad 64 'invalid duration "abc"' "${U[@]}" run --ttl abc k -- touch "$T/ran"
  bad 64 'invalid duration "-1s"' "${U[@]}" run --ttl -1s k -- touch "$T/ran"
  bad 64 '--ttl "0": must be at least 1ms' "${U[@]}" run --ttl 0 k -- touch "$T/ran"
  bad 64 '--ttl: duration "31d" is too long: at most 30 days' "${U[@]}" run --ttl 31d k -- touch "$T/ran"
  bad 64 '--ttl: duration is empty' "${U[@]}" run --ttl= k -- touch "$T/ran"
  bad 64 'option --ttl needs a value' "${U[@]}" run --ttl
  bad 64 'invalid duration "abc"' "${U[@]}" run --wait abc k -- touch "$T/ran"
  bad 64 'invalid duration "-1s"' "${U[@]}" run --min-hold -1s k -- touch "$T/ran"
  bad 64 'unknown unit "x"' "${U[@]}" run --grace 5x k -- touch "$T/ran"
  bad 64 'key is empty' "${U[@]}" run "" -- touch "$T/ran"
  bad 64 'key is 256 bytes long (at most 255)' "${U[@]}" run "$key256" -- touch "$T/ran"
  bad 64 'key is not valid UTF-8' "${U[@]}" run $'\xff' -- touch "$T/ran"
  bad 64 'missing "--" before the command' "${U[@]}" run k
  bad 64 'unexpected argument "touch": put the command after "--"' "${U[@]}" run k touch "$T/ran"
  bad 64 'missing command after "--"' "${U[@]}" run k --
  bad 64 'missing KEY' "${U[@]}" run -- touch "$T/ran"
  bad 64 'unknown option --bogus' "${U[@]}" run --bogus k -- touch "$T/ran"
  bad 64 'unknown option --bogus' --bogus status k
  bad 64 'unknown command "frob"' "${U[@]}" frob
  bad 64 'missing command (run, status, list, top, release or prune)'
  bad 64 'missing KEY' "${U[@]}" status
  bad 64 'status takes one KEY' "${U[@]}" status a b
  bad 64 'key is empty' "${U[@]}" status ""
  bad 64 'key is 256 bytes long' "${U[@]}" release --force "$key256"
  bad 64 '--uri is empty' --uri "" status k
  bad 64 'unknown URI scheme "foo"' --uri foo://x run k -- touch "$T/ran"
  bad 64 'malformed URI "nonsense"' --uri nonsense status k
  bad 64 'unknown URI scheme "foo"' list --uri foo://x
  : >"$T/file"
  bad 69 "'$T/file': Not a directory" --uri "sqlite://$T/file/x.db" run k -- touch "$T/ran"
  LEASELOCK_URI="sqlite://$T/file/x.db" bad 69 "making its directory: '$T/file': Not a directory" status k
  LEASELOCK_URI="foo://x" bad 64 'unknown URI scheme "foo"' status k
}

# --verbose (-v) prints the core's log events on stderr; without it, a
# run that succeeds prints nothing.
test_verbose() {
  ll --verbose run v/key -- true
  expect_rc 0 || return
  expect_err 'leaselock run: DEBUG acquire "v/key" (fence 1): acquired for 30000 ms' || return
  expect_err 'leaselock run: DEBUG release "v/key" (fence 1): released' || return
  ll run v/key -- true
  expect_rc 0 || return
  [ ! -s "$ERR" ] || { fail "stderr without --verbose: $(head -c 200 "$ERR")"; return; }
  ll_bg run v/key -- sleep 60
  local holder=$BGPID
  wait_state v/key 0 || return
  ll -v run --wait 200ms v/key -- true
  expect_rc 75 || return
  expect_err 'DEBUG wait "v/key" (fence 0): held by another owner: waiting up to 200 ms in all' || return
  expect_err 'INFO timeout "v/key"' || return
  ll -v status v/key
  expect_rc 0 || return
  kill -TERM "$holder"
  reap "$holder"
}

# status -v adds how the database makes a grant survive a failover (the
# record's lines first, the exit status the record's); on the servers
# whose variable is set, their level, primary and max_ttl too.
test_status_verbose() {
  ll status -v d/key; expect_rc 2 || return
  expect_out "state:      free (no record)" || return
  expect_out "durability: standalone (durability=report)" || return
  expect_out "detail:     embedded SQLite: one file on one machine" || return
  expect_out "primary:    - (none recorded)" || return
  expect_out "fences:     no floor (no failover seen)" || return
  expect_out "lock-delay: none" || return
  expect_out "max_ttl:    none (no bound)" || return
  ll_bg run d/key -- sleep 60
  local holder=$BGPID
  wait_state d/key 0 || return
  ll status d/key --verbose; expect_rc 0 || return
  expect_out "state:      held" || return
  [ "$(sed -n 10p "$OUT")" = "durability: standalone (durability=report)" ] ||
    { fail "the durability lines follow the record's: $(cat "$OUT")"; return; }
  kill -TERM "$holder"; reap "$holder"
  ll status; expect_rc 64
  ll status -v --json d/key; expect_rc 64 || return
  expect_err "--verbose adds lines of text: it does not go with --json" || return
  ll list -v; expect_rc 64 || return
  expect_err "unknown option -v" || return
  local name var u
  for name in mysql postgresql; do
    var=${name^^}_URI
    u=${!var:-}
    [ -n "$u" ] || continue
    "$BIN" --uri "$u" status -v "d/$RANDOM/$name" >"$OUT" 2>"$ERR"; RC=$?
    expect_rc 2 || return
    expect_out "durability: standalone (durability=report)" || return
    grep -qE '^primary:    [^-].+' "$OUT" || { fail "$name: primary: $(cat "$OUT")"; return; }
    expect_out "max_ttl:    1m (the longest TTL granted, and the lock-delay)" || return
    "$BIN" --uri "$u?durability=off" status -v d/key >"$OUT" 2>"$ERR"; RC=$?
    expect_rc 2 || return
    expect_out "(durability=off)" || return
    "$BIN" --uri "$u" run --ttl 61s d/key -- touch "$T/ran" >"$OUT" 2>"$ERR"; RC=$?
    expect_rc 64 || return
    expect_err "over this table's max_ttl of 60000 ms" || return
    [ ! -e "$T/ran" ] || { fail "$name: the command ran with a TTL over max_ttl"; return; }
  done
}

# ---- which database; several users -------------------------------------

# Accounts of their own (useradd) for the tests that need other users:
# root only. A skip says why, once per test.
as_root_or_skip() {
  [ "$(id -u)" = 0 ] && command -v useradd >/dev/null && command -v setpriv >/dev/null && return 0
  echo "    skip ${FUNCNAME[1]}: needs root (useradd, setpriv) to make users of its own" >&2
  return 1
}
# with_retry CMD...: useradd and groupadd refuse while another process
# holds /etc/passwd's lock (another suite may be making users too).
with_retry() {
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do "$@" 2>"$T/useradd.err" && return 0; sleep 0.3; done
  fail "$* failed: $(cat "$T/useradd.err")"; return 1
}
# make_group NAME: a throwaway group llt<pid><NAME>, its name in GROUP.
make_group() {
  GROUP=llt$$$1
  with_retry groupadd "$GROUP" || return 1
  GROUPS_MADE+=("$GROUP")
}
# make_user NAME [GROUP]: a throwaway account llt<pid><NAME> whose home
# directory is $T/home-NAME (made, its own), in GROUP too when given; its
# name in NEWUSER. $T and the directories above it become searchable.
make_user() {
  NEWUSER=llt$$$1
  with_retry useradd -M -d "$T/home-$1" -s /bin/sh ${2:+-G "$2"} "$NEWUSER" || return 1
  USERS+=("$NEWUSER")
  mkdir -p "$T/home-$1" && chown "$NEWUSER:" "$T/home-$1"
  chmod 755 "$TOP" "$T"
}
# as_cmd USER: AS, the command prefix that runs a command as USER (its
# groups too) in this environment; setpriv execs it, so that the pid of a
# background "${AS[@]}" CMD & is CMD's.
as_cmd() {
  AS=(setpriv --reuid="$1" --regid="$(id -g "$1")" --init-groups --)
}
# as USER CMD... / as_g USER CMD...: CMD as USER, as_g with the umask of a
# group's work (002).
as() {
  local u=$1; shift
  as_cmd "$u"; "${AS[@]}" "$@"
}
as_g() {
  local u=$1; shift
  as_cmd "$u"; (umask 002 && exec "${AS[@]}" "$@")
}

# status and list name the database they read (text forms), -v says which
# one and where it came from, and a busy run names it: the same job run
# from cron, a shell and sudo may otherwise be on different databases
# without a word.
test_database_shown() {
  ll status db/key; expect_rc 2 || return
  expect_out "database:   $URI" || return
  ll list; expect_rc 0 || return
  [ "$(head -1 "$OUT")" = "database:   $URI" ] || { fail "list: $(cat "$OUT")"; return; }
  ll -v status db/key; expect_rc 2 || return
  expect_err "leaselock status: DEBUG database $URI (--uri)" || return
  LEASELOCK_URI=$URI "$BIN" -v list >"$OUT" 2>"$ERR"; RC=$?
  expect_rc 0 || return
  expect_err "leaselock list: DEBUG database $URI (LEASELOCK_URI)" || return
  ll_bg run db/key -- sleep 60
  local holder=$BGPID
  wait_state db/key 0 || return
  ll run db/key -- true; expect_rc 75 || return
  expect_err "db/key is busy: held by" || return
  expect_err "(database $URI)" || return
  kill -TERM "$holder"; reap "$holder"
}

# The default database is the account's, whatever HOME and XDG_STATE_HOME
# say: "HOME=/a leaselock run backup" and "HOME=/b leaselock run backup"
# are one lock (they were two databases, and both ran). Under a user of
# its own, whose home is a throwaway directory.
test_default_ignores_home() {
  as_root_or_skip || return
  make_user h || return
  local u=$NEWUSER want="sqlite://$T/home-h/.local/state/leaselock/locks.db"
  as_cmd "$u"
  "${AS[@]}" env -u LEASELOCK_URI HOME=/a "$BIN" run backup -- sleep 60 >"$T/bg.out" 2>"$T/bg.err" &
  local holder=$!
  BG+=("$holder")
  local i
  for i in $(seq 100); do
    as "$u" env -u LEASELOCK_URI HOME=/b "$BIN" status backup >"$OUT" 2>"$ERR" && break
    sleep 0.2
  done
  expect_out "state:      held" || return
  expect_out "database:   $want" || return
  as "$u" env -u LEASELOCK_URI HOME=/b XDG_STATE_HOME=/c "$BIN" run backup -- true >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 75 || return
  expect_err "(database $want)" || return
  as "$u" env -u LEASELOCK_URI -u HOME "$BIN" -v run --wait 0 backup -- true >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 75 || return
  expect_err "DEBUG database $want (the default, in the home directory of user $u)" || return
  kill -TERM "$holder"; reap "$holder"
  [ ! -e /a ] && [ ! -e /b ] && [ ! -e /c ] || fail "a directory was made from HOME or XDG_STATE_HOME"
  # A default that cannot be opened: the message names it, and why it is
  # the one (the user did not choose it).
  make_user n || return
  chown root: "$T/home-n" && chmod 555 "$T/home-n"
  as "$NEWUSER" env -u LEASELOCK_URI "$BIN" status backup >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 69 || return
  expect_err "cannot open the lock database sqlite://$T/home-n/.local/state/leaselock/locks.db (the default, in the home directory of user $NEWUSER)" || return
}

# Several users share one database through a group: a setgid directory of
# the group, and a umask of 002. The directories and files leaselock makes
# (the database, -wal, -shm, -wake) are the group's to write: a second
# user gets the lock, not "Permission denied" (directories were 0700 and
# the file 0644 whatever the umask).
test_shared_database_group() {
  as_root_or_skip || return
  make_group g || return
  local g=$GROUP
  make_user a "$g" || return
  local a=$NEWUSER
  make_user b "$g" || return
  local b=$NEWUSER
  install -d -m 2770 -g "$g" "$T/shared"
  local u="sqlite://$T/shared/app/locks.db"
  as_cmd "$a"
  (umask 002 && exec "${AS[@]}" "$BIN" --uri "$u" run share/key -- sleep 60) >"$T/bg.out" 2>"$T/bg.err" &
  local holder=$!
  BG+=("$holder")
  local i
  for i in $(seq 100); do
    as_g "$b" "$BIN" --uri "$u" status share/key >"$OUT" 2>"$ERR" && break
    sleep 0.2
  done
  expect_out "state:      held" || { cat "$T/bg.err" >&2; return; }
  as_g "$b" "$BIN" --uri "$u" run --wait 0 share/key -- true >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 75 || return
  # b waits (its listener makes -wake), and gets the key once a is gone.
  as_cmd "$b"
  (umask 002 && exec "${AS[@]}" "$BIN" --uri "$u" run --wait 30s share/key -- true) \
    >"$OUT" 2>"$ERR" &
  local waiter=$!
  BG+=("$waiter")
  for i in $(seq 100); do
    [ -e "$T/shared/app/locks.db-wake" ] && break
    sleep 0.1
  done
  kill -TERM "$holder"; reap "$holder"
  reap "$waiter"
  [ "$BGRC" = 0 ] || { fail "b's waiting run: exit $BGRC: $(cat "$ERR")"; return; }
  local f want
  [ "$(stat -c '%a %G' "$T/shared/app")" = "2775 $g" ] ||
    { fail "directory: $(stat -c '%a %G' "$T/shared/app")"; return; }
  for f in locks.db locks.db-wake; do
    [ "$(stat -c '%a %G' "$T/shared/app/$f")" = "664 $g" ] ||
      { fail "$f: $(stat -c '%a %G' "$T/shared/app/$f")"; return; }
  done
  # -wal and -shm exist while a connection is open
  as_g "$a" "$BIN" --uri "$u" run share/key -- sh -c \
    'stat -c "%n %a %G" "$0"-wal "$0"-shm' "$T/shared/app/locks.db" >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 0 || return
  [ "$(grep -c " 664 $g\$" "$OUT")" = 2 ] || fail "-wal, -shm: $(cat "$OUT")"
}

# A user who may only read the database (0644 in a 0755 directory) gets
# status and list; anything else fails saying the file is read-only for
# it (status failed with "attempt to write a readonly database").
test_readonly_status() {
  as_root_or_skip || return
  make_user r || return
  local r=$NEWUSER
  mkdir -m 755 "$T/ro"
  local u="sqlite://$T/ro/locks.db"
  "$BIN" --uri "$u" run ro/key -- true || { fail "run as root"; return; }
  # No connection open: no -shm, and the reader cannot make one.
  as "$r" "$BIN" --uri "$u" status ro/key >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 1 || return
  expect_out "state:      free" || return
  as "$r" "$BIN" --uri "$u" list --json >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 0 || return
  expect_out '"key":"ro/key"' || return
  # While a holder has it open (its -wal and -shm there, read-only to r).
  "$BIN" --uri "$u" run ro/key -- sleep 60 >"$T/bg.out" 2>"$T/bg.err" &
  local holder=$!
  BG+=("$holder")
  wait_state_uri "$u" ro/key 0 || return
  as "$r" "$BIN" --uri "$u" status ro/key >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 0 || return
  expect_out "state:      held" || return
  as "$r" "$BIN" --uri "$u" run --wait 0 ro/other -- true >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 69 || return
  expect_err "the database is read-only for this user" || return
  # refused before anything changed: not an acquire of unknown outcome
  ! grep -q "outcome unknown" "$ERR" || { fail "read-only write: $(cat "$ERR")"; return; }
  kill -TERM "$holder"; reap "$holder"
}
# wait_state_uri URI KEY WANT_RC: wait_state on another database.
wait_state_uri() {
  local saved=$URI rc=0
  URI=$1
  wait_state "$2" "$3" || rc=1
  URI=$saved
  return $rc
}

# status of a semaphore or read-write lock adds up its records (held: exit
# 0, with its holders), list shows it as one lock, and a released --shared
# run leaves no record behind.
test_status_modes() {
  ll_bg run --slots 3 m/sem -- sleep 60
  local s=$BGPID
  wait_state m/sem 0 || return
  ll status m/sem; expect_rc 0 || return
  expect_out "mode:       semaphore" || return
  expect_out "state:      held" || return
  expect_out "slots:      1 used" || return
  expect_out "holder:     m/sem/.slot/" || return
  ll status --json m/sem; expect_rc 0 || return
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["mode"]=="semaphore" and r["state"]=="held" and r["used"]==1 and len(r["holders"])==1 and r["holders"][0]["pid"] > 0, r' "$OUT" ||
    { fail "status --json: $(cat "$OUT")"; return; }
  ll_bg run --shared m/rw -- sleep 60
  local r1=$BGPID
  ll_bg run --shared m/rw -- sleep 60
  local r2=$BGPID
  local i
  for ((i = 0; i < 400; i++)); do
    ll status m/rw
    [ "$RC" = 0 ] && grep -q "^readers:    2" "$OUT" && break
    sleep 0.05
  done
  expect_rc 0 || return
  expect_out "mode:       rwlock" || return
  expect_out "readers:    2" || return
  ll list m/; expect_rc 0 || return
  grep -q '^m/rw  held  rwlock  readers=2  writer=no' "$OUT" || { fail "list: $(cat "$OUT")"; return; }
  grep -q '^m/sem  held  semaphore  used=1' "$OUT" || { fail "list: $(cat "$OUT")"; return; }
  kill -TERM "$s" "$r1" "$r2"; reap "$s"; reap "$r1"; reap "$r2"
  ll status m/sem; expect_rc 1 || return
  expect_out "state:      free" || return
  # Released readers delete their records: nothing left of m/rw at all.
  ll status m/rw; expect_rc 2 || return
  for ((i = 0; i < 10; i++)); do ll run --shared m/rw -- true; expect_rc 0 || return; done
  ll list m/rw; expect_rc 0 || return
  [ "$(grep -vc '^database: ' "$OUT")" = 0 ] ||
    { fail "released readers left records: $(cat "$OUT")"; return; }
}

# A semaphore's fair waiters: the one holding its turn is next, the others
# are queued behind it (status's waiters).
test_status_fair_semaphore() {
  ll_bg run --slots 1 fs/k -- sleep 60
  local holder=$BGPID
  wait_state fs/k 0 || return
  "$BIN" --uri "$URI" run --slots 1 --fair --wait 30s fs/k -- true 2>/dev/null &
  local w1=$!; BG+=("$w1")
  "$BIN" --uri "$URI" run --slots 1 --fair --wait 30s fs/k -- true 2>/dev/null &
  local w2=$!; BG+=("$w2")
  local i
  for ((i = 0; i < 400; i++)); do
    ll status fs/k
    grep -qE '^waiters:    next [0-9a-f]{8}, 1 queued$' "$OUT" && break
    sleep 0.05
  done
  grep -qE '^waiters:    next [0-9a-f]{8}, 1 queued$' "$OUT" || { fail "waiters: $(cat "$OUT")"; return; }
  expect_out "slots:      1 used" || return
  kill -TERM "$holder"; reap "$holder"; reap "$w1"; reap "$w2"
  [ "$BGRC" = 0 ] || fail "a fair waiter exited $BGRC"
}

# status shows how long the key has been held and who waits (the reserved
# next owner, the fair queue); list --held lists the held keys only.
test_status_waiters() {
  ll run free/k -- true; expect_rc 0 || return
  ll_bg run w/k -- sleep 60
  local holder=$BGPID
  wait_state w/k 0 || return
  ll status w/k; expect_rc 0 || return
  expect_out "waiters:    none" || return
  grep -qE '^held for:   [0-9.]+(ms|s) \(since [0-9:]{8}\)$' "$OUT" || { fail "held for: $(cat "$OUT")"; return; }
  "$BIN" --uri "$URI" run --fair --wait 30s w/k -- true 2>/dev/null &
  local w1=$!; BG+=("$w1")
  "$BIN" --uri "$URI" run --fair --wait 30s w/k -- true 2>/dev/null &
  local w2=$!; BG+=("$w2")
  local i
  for ((i = 0; i < 400; i++)); do
    ll status w/k
    grep -qE '^waiters:    next [0-9a-f]{8}, 2 queued$' "$OUT" && break
    sleep 0.05
  done
  grep -qE '^waiters:    next [0-9a-f]{8}, 2 queued$' "$OUT" || { fail "waiters: $(cat "$OUT")"; return; }
  ll list --held; expect_rc 0 || return
  [ "$(grep -vc '^database: ' "$OUT")" = 1 ] && grep -q '^w/k  held  .*waiters=next' "$OUT" ||
    { fail "list --held: $(cat "$OUT")"; return; }
  ll list --held --json; expect_rc 0 || return
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert [x["key"] for x in r]==["w/k"] and r[0]["queued"]==2 and len(r[0]["next_owner"])==32, r' "$OUT" ||
    { fail "list --held --json: $(cat "$OUT")"; return; }
  kill -TERM "$holder"; reap "$holder"; reap "$w1"; reap "$w2"
}

# top --once prints a table, --json an array; a dead local holder is marked.
test_top_once_json() {
  ll top --once; expect_rc 0 || return
  [ "$(wc -l <"$OUT")" = 1 ] && expect_out "KEY" || { fail "empty top: $(cat "$OUT")"; return; }
  ll_bg run --label job t/a -- sleep 60
  local holder=$BGPID
  wait_state t/a 0 || return
  ll run --slots 2 t/sem -- true; expect_rc 0 || return
  ll top --once; expect_rc 0 || return
  grep -qE "^t/a +lock +held +$(hostname) pid $holder \(job\) +1 " "$OUT" || { fail "top --once: $(cat "$OUT")"; return; }
  grep -qE '^t/sem +semaphore +free ' "$OUT" || { fail "top --once: $(cat "$OUT")"; return; }
  ll top --once --prefix t/s; expect_rc 0 || return
  ! grep -q '^t/a ' "$OUT" && expect_out "t/sem" || { fail "top --prefix: $(cat "$OUT")"; return; }
  ll top --json --once; expect_rc 0 || return
  python3 - "$OUT" "$holder" <<'PY' || { fail "top --json: $(cat "$OUT")"; return; }
import json, sys
locks = json.load(open(sys.argv[1]))
assert [l["key"] for l in locks] == ["t/a", "t/sem"], locks
a = locks[0]
assert a["mode"] == "lock" and a["state"] == "held" and a["pid"] == int(sys.argv[2]), a
assert a["label"] == "job" and a["fence"] == 1 and a["dead"] is False and a["held_ms"] >= 0, a
assert locks[1]["mode"] == "semaphore" and locks[1]["state"] == "free", locks[1]
PY
  # Its holder killed without a release: the record lives on, marked dead.
  kill -KILL "$holder"; reap "$holder"
  ll top --once; expect_rc 0 || return
  grep -qE "^t/a +lock +held +$(hostname) pid $holder \(job\) DEAD " "$OUT" || { fail "dead holder: $(cat "$OUT")"; return; }
  ll top --json --once; expect_rc 0 || return
  python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))[0]["dead"] is True' "$OUT" ||
    { fail "dead in --json: $(cat "$OUT")"; return; }
  ll top --interval 10ms --once; expect_rc 64 || return
  expect_err '--interval "10ms": must be at least 100ms' || return
  ll top extra; expect_rc 64 || return
  ll top </dev/null; expect_rc 64 || return
  expect_err "top needs a terminal" || return
}

# top in a real terminal (tmux): shows a held key, refreshes after its
# release, sorts on a key, filters by a typed prefix, quits on q with
# status 0 and the terminal restored; Ctrl-C quits as cleanly.
test_top_terminal() {
  command -v tmux >/dev/null || { fail "tmux is missing (make deps)"; return; }
  TM=(tmux -S "$T/tmux.sock")
  ll run other/x -- true; expect_rc 0 || return
  ll_bg run --label first tt/k -- sleep 60
  local holder=$BGPID
  wait_state tt/k 0 || return
  "${TM[@]}" new-session -d -s top -x 160 -y 30 \
    "echo before; '$BIN' --uri '$URI' top --interval 100ms; echo \"top exited \$?\"; sleep 60" ||
    { fail "tmux new-session"; return; }
  top_terminal_steps "$holder"
  "${TM[@]}" kill-server 2>/dev/null
  [ "$cur_failed" = 0 ] || return
  # Ctrl-C quits as cleanly, the terminal's modes restored.
  TM=(tmux -S "$T/tmux2.sock")
  "${TM[@]}" new-session -d -s top -x 160 -y 30 \
    "'$BIN' --uri '$URI' top; echo \"top exited \$?\"; stty -a | grep -o ' icanon '; sleep 60" ||
    { fail "tmux new-session"; return; }
  until_screen '^tt/k ' && "${TM[@]}" send-keys -t top C-c && until_screen '^top exited 0$' &&
    until_screen '^ icanon *$'
  "${TM[@]}" kill-server 2>/dev/null
}

# until_screen ERE: waits (at most about 10 s) for the tmux pane to match.
until_screen() {
  local i
  for ((i = 0; i < 200; i++)); do
    "${TM[@]}" capture-pane -p -t top >"$T/screen"
    grep -qE -- "$1" "$T/screen" && return 0
    sleep 0.05
  done
  fail "the screen never matched $1: $(cat "$T/screen")"
  return 1
}

# test_top_terminal's keys and what each must show.
top_terminal_steps() {
  until_screen "^tt/k +lock +held +$(hostname) pid $1 \(first\)" || return
  ! grep -q "^before" "$T/screen" || { fail "top is not on the alternate screen"; return; }
  kill -TERM "$1"; reap "$1"
  until_screen '^tt/k +lock +free ' || return
  "${TM[@]}" send-keys -t top s
  until_screen 'sort MODE' || return
  "${TM[@]}" send-keys -t top / t t / Enter
  until_screen 'prefix "tt/"' || return
  ! grep -q '^other/x' "$T/screen" || { fail "prefix tt/ still shows other/x"; return; }
  "${TM[@]}" send-keys -t top q
  until_screen '^top exited 0$' || return
  grep -q '^before' "$T/screen" || fail "the terminal was not restored: $(cat "$T/screen")"
}

for t in $(declare -F | awk '{print $3}' | grep '^test_'); do
  run_test "$t"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
