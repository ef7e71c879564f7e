#!/bin/bash
# place-servers.sh CPUS - moves every thread of the test database servers
# that tests/with-servers.sh started (their pids in LEASELOCK_*_SERVER_PID)
# and of their child processes onto CPUS (a taskset list such as "1" or
# "0"). Processes a server forks later (PostgreSQL's backends) inherit it.
# Prints the servers it placed; exits 1 when there was none to place.
set -uo pipefail
cpus=${1:?usage: place-servers.sh CPUS}
placed=()
for var in LEASELOCK_MONGO_SERVER_PID LEASELOCK_MYSQL_SERVER_PID LEASELOCK_POSTGRESQL_SERVER_PID; do
  pid=${!var:-}
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || continue
  ok=yes
  for p in "$pid" $(pgrep -P "$pid"); do
    taskset -a -p -c "$cpus" "$p" >/dev/null 2>&1 || ok=
  done
  [ -n "$ok" ] && placed+=("$(ps -o comm= -p "$pid")")
done
[ ${#placed[@]} -gt 0 ] || exit 1
echo "${placed[*]}"
