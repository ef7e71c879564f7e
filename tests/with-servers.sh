#!/bin/bash
# Runs "$@" with the test database servers started around it.
#
# Each tests/servers/<name>.sh answers "start DIR" by starting a server on
# 127.0.0.1 (its own port and data directory under DIR) and printing
# NAME=VALUE lines (e.g. MONGODB_URI=mongodb://127.0.0.1:40123/leaselock_test),
# and "stop DIR" by stopping it. A server whose variable is already set in
# the environment (MONGODB_URI, MYSQL_URI, POSTGRESQL_URI) is not started: the
# suites then run against the server the user named.
#
# LEASELOCK_SERVERS_PID (this shell's pid) names the process whose end the
# servers watch: they exit with it, even if this script is killed before
# its trap runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-servers.XXXXXX")
touch "$run/.start"
started=()

stop_all() {
  for s in "${started[@]+"${started[@]}"}"; do
    bash "$root/tests/servers/$s.sh" stop "$run/$s" >/dev/null 2>&1 || true
  done
  # The same-machine release channels of these servers (named after their
  # ports: never used again) that the run made; a watcher of another run
  # whose file goes makes it again.
  find /dev/shm /tmp -maxdepth 1 \( -name 'leaselock-mysql-*.wake' -o \
    -name 'leaselock-mongodb-*.wake' \) -newer "$run/.start" -delete 2>/dev/null || true
  rm -rf "$run"
}
trap stop_all EXIT
trap 'exit 130' INT TERM
export LEASELOCK_SERVERS_PID=$$
# The name earlier versions read for the PostgreSQL server.
if [ -z "${POSTGRESQL_URI:-}" ] && [ -n "${POSTGRES_URI:-}" ]; then
  export POSTGRESQL_URI=$POSTGRES_URI
fi
# libmongoc keeps its counters in /dev/shm/mongoc-<pid> and leaves the file
# behind when a process is killed; a later process given the same pid then
# prints "Falling back to malloc for counters" on stderr, which tests that
# read a child's stderr take for a failure. The suites need no counters.
export MONGOC_DISABLE_SHM=1

# The servers start side by side (each on its own free port and
# directory), which shortens make test by the slower ones' start-up; each
# one's lines are read once all have answered.
for script in "$root"/tests/servers/*.sh; do
  [ -e "$script" ] || continue
  name=$(basename "$script" .sh)
  var=$(sed -n 's/^# provides: *//p' "$script" | head -1)
  if [ -n "$var" ] && [ -n "${!var:-}" ]; then
    echo "servers: $name: using $var from the environment" >&2
    continue
  fi
  mkdir -p "$run/$name"
  started+=("$name")
  { bash "$script" start "$run/$name" >"$run/$name.out"; echo $? >"$run/$name.rc"; } &
done
wait
for name in "${started[@]+"${started[@]}"}"; do
  if [ "$(cat "$run/$name.rc" 2>/dev/null)" = 0 ]; then
    while IFS= read -r line; do
      case $line in *=*) export "$line"; echo "servers: $name: ${line%%=*} set" >&2;; esac
    done <"$run/$name.out"
  else
    echo "servers: $name failed to start (see $run/$name); its suites will fail" >&2
  fi
done

"$@"
