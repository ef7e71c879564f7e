#!/bin/bash
# provides: MONGODB_URI
#
# MongoDB test server: mongo-java-server (memory backend) through the
# launcher in tests/mongo-server, built once with Maven (jars cached in
# ~/.m2). "start DIR" binds a free port on 127.0.0.1 and prints
# MONGODB_URI=mongodb://127.0.0.1:PORT/leaselock_test (and the server's pid
# as LEASELOCK_MONGO_SERVER_PID); the server exits with the process
# LEASELOCK_SERVERS_PID names (tests/with-servers.sh exports its own pid),
# or, when it is unset, with the process that started this script. "stop
# DIR" stops it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

case $cmd in
start)
  mkdir -p "$dir"
  launcher=$(bash "$root/tests/mongo-server/build.sh")
  watch=${LEASELOCK_SERVERS_PID:-$PPID}
  # No stdin (the server would exit at once on EOF): it watches $watch.
  $launcher --parent "$watch" --no-stdin >"$dir/port" 2>"$dir/server.log" </dev/null &
  echo $! >"$dir/pid"
  for _ in $(seq 1 300); do
    if [ -s "$dir/port" ] && grep -q '^[0-9][0-9]*$' "$dir/port"; then
      echo "MONGODB_URI=mongodb://127.0.0.1:$(head -1 "$dir/port")/leaselock_test"
      # For make bench-python, which places the server's threads on CPUs.
      echo "LEASELOCK_MONGO_SERVER_PID=$(cat "$dir/pid")"
      exit 0
    fi
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "mongodb.sh: the server did not start; see $dir/server.log" >&2
  cat "$dir/server.log" >&2 || true
  exit 1
  ;;
stop)
  [ -s "$dir/pid" ] || exit 0
  pid=$(cat "$dir/pid")
  kill "$pid" 2>/dev/null || exit 0
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2;;
esac
