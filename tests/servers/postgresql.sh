#!/bin/bash
# provides: POSTGRESQL_URI
#
# A throwaway PostgreSQL server for the suites: "start DIR" runs initdb in a
# data directory, starts postgres on 127.0.0.1 on a free port, creates the
# role leaselock (with a password, scram-sha-256 over TCP) and the database
# leaselock_test, and prints POSTGRESQL_URI=..., LEASELOCK_POSTGRESQL_RESTART=...
# (the command the SQL suite runs to restart the server mid-hold) and
# LEASELOCK_POSTGRESQL_SOCKET_DIR=... (its unix socket's directory, for the
# socket forms of the URI).
# "stop DIR" stops it; "restart DIR [SECONDS]" stops it, waits SECONDS
# (default 0) and starts it again on the same port and data.
#
# PostgreSQL refuses to run as root: as root the server runs as the system
# user "postgres" (or "nobody"), and its files live in a directory of their
# own (DIR's parents may not be reachable by that user); DIR/pgdir names it.
set -euo pipefail
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|restart DIR" >&2; exit 2; }
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

bindir=${PG_BINDIR:-}
if [ -z "$bindir" ]; then
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && bindir=$d; done
  [ -n "$bindir" ] || bindir=$(dirname "$(command -v initdb || echo /usr/bin/initdb)")
fi

as_user=()
if [ "$(id -u)" -eq 0 ]; then
  if id postgres >/dev/null 2>&1; then runas=postgres; else runas=nobody; fi
  as_user=(runuser -u "$runas" --)
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_server() { # port
  "${as_user[@]}" "$bindir/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $1 -k $pg -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB" \
    start >"$pg/pg_ctl.out" 2>&1
}

stop_server() {
  [ -d "$pg/data" ] || return 0
  "${as_user[@]}" "$bindir/pg_ctl" -D "$pg/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
}

case $cmd in
start)
  [ -x "$bindir/initdb" ] || { echo "postgresql.sh: postgresql is not installed (apt-get install postgresql)" >&2; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  pg=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-pg.XXXXXX")
  echo "$pg" >"$dir/pgdir"
  chmod 755 "$pg"
  [ ${#as_user[@]} -gt 0 ] && chown "$runas" "$pg"
  password=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf '%s\n' "$password" >"$pg/pw" && chmod 644 "$pg/pw"
  "${as_user[@]}" "$bindir/initdb" -D "$pg/data" -U postgres -E UTF8 --locale=C \
    --no-sync --auth-local=trust --auth-host=scram-sha-256 --pwfile="$pg/pw" >"$pg/initdb.log" 2>&1 || {
    echo "postgresql.sh: initdb failed (see $pg/initdb.log)" >&2; exit 1; }
  rm -f "$pg/pw"
  port=
  for attempt in 1 2 3; do
    p=$(free_port)
    if start_server "$p"; then port=$p; break; fi
  done
  [ -n "$port" ] || { echo "postgresql.sh: postgres did not start (see $pg/server.log)" >&2; exit 1; }
  echo "$port" >"$dir/port"
  "${as_user[@]}" "$bindir/psql" -X -q -h "$pg" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE leaselock LOGIN PASSWORD '$password'" \
    -c "CREATE DATABASE leaselock_test OWNER leaselock" >/dev/null
  echo "POSTGRESQL_URI=postgresql://leaselock:$password@127.0.0.1:$port/leaselock_test"
  echo "LEASELOCK_POSTGRESQL_RESTART=bash $self restart $dir"
  # Its unix socket directory, for the socket forms of the URI.
  echo "LEASELOCK_POSTGRESQL_SOCKET_DIR=$pg"
  # For make bench-core, which places the server's processes on CPUs.
  echo "LEASELOCK_POSTGRESQL_SERVER_PID=$(head -1 "$pg/data/postmaster.pid")"
  ;;
stop)
  pg=$(cat "$dir/pgdir" 2>/dev/null) || exit 0
  stop_server
  case $pg in */leaselock-pg.*) rm -rf "$pg" ;; esac
  ;;
restart)
  pg=$(cat "$dir/pgdir"); port=$(cat "$dir/port")
  stop_server
  sleep "${3:-0}"
  for attempt in 1 2 3 4 5; do
    start_server "$port" && exit 0
    sleep 0.5
  done
  echo "postgresql.sh: restart failed (see $pg/server.log)" >&2; exit 1
  ;;
*) echo "usage: $0 start|stop|restart DIR" >&2; exit 2 ;;
esac
