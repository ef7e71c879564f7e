#!/bin/bash
# provides: MYSQL_URI
#
# A throwaway MariaDB server for the suites: "start DIR" initialises a data
# directory under DIR, starts mariadbd on 127.0.0.1 on a free port, creates
# the database leaselock_test and the user leaselock (with a password), and
# prints MYSQL_URI=..., LEASELOCK_MYSQL_RESTART=... (the command the SQL
# suite runs to restart the server mid-hold) and LEASELOCK_MYSQL_SOCKET=...
# (its unix socket, for the ?socket= test). "stop DIR" stops it;
# "restart DIR [SECONDS]" stops it, waits SECONDS (default 0) and starts it
# again on the same port and data.
set -euo pipefail
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|restart DIR" >&2; exit 2; }
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

mariadbd=$(command -v mariadbd || command -v mysqld || echo /usr/sbin/mariadbd)
client=$(command -v mariadb || command -v mysql || true)
install_db=$(command -v mariadb-install-db || command -v mysql_install_db || true)

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

user_opt=()
[ "$(id -u)" -eq 0 ] && user_opt=(--user=root)

run_server() { # port
  "$mariadbd" --no-defaults "${user_opt[@]}" --datadir="$dir/data" \
    --bind-address=127.0.0.1 --port="$1" --socket="$dir/mysqld.sock" \
    --pid-file="$dir/mysqld.pid" --log-error="$dir/mysqld.log" \
    --skip-name-resolve --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
    --innodb-flush-log-at-trx-commit=2 --max-connections=200 --skip-log-bin \
    </dev/null >>"$dir/mysqld.out" 2>&1 &
  echo $! >"$dir/mysqld.pid.launch"
}

wait_ready() { # seconds
  local i
  for ((i = 0; i < $1 * 10; i++)); do
    if [ -S "$dir/mysqld.sock" ] && "$client" --no-defaults -uroot --socket="$dir/mysqld.sock" \
         -e 'SELECT 1' >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "$(cat "$dir/mysqld.pid.launch")" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

stop_server() {
  local pid
  pid=$(cat "$dir/mysqld.pid.launch" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 300; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

case $cmd in
start)
  [ -n "$client" ] && [ -n "$install_db" ] && [ -x "$mariadbd" ] || {
    echo "mysql.sh: mariadb-server is not installed (apt-get install mariadb-server)" >&2; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  "$install_db" --no-defaults "${user_opt[@]}" --datadir="$dir/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 || {
    echo "mysql.sh: mariadb-install-db failed (see $dir/install.log)" >&2; exit 1; }
  for attempt in 1 2 3; do
    port=$(free_port)
    run_server "$port"
    if wait_ready 60; then break; fi
    stop_server
    port=
  done
  [ -n "$port" ] || { echo "mysql.sh: mariadbd did not start (see $dir/mysqld.log)" >&2; exit 1; }
  echo "$port" >"$dir/port"
  password=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  "$client" --no-defaults -uroot --socket="$dir/mysqld.sock" <<SQL
CREATE DATABASE leaselock_test;
CREATE USER 'leaselock'@'%' IDENTIFIED BY '$password';
CREATE USER 'leaselock'@'localhost' IDENTIFIED BY '$password';
GRANT ALL ON leaselock_test.* TO 'leaselock'@'%';
GRANT ALL ON leaselock_test.* TO 'leaselock'@'localhost';
SQL
  echo "MYSQL_URI=mysql://leaselock:$password@127.0.0.1:$port/leaselock_test"
  echo "LEASELOCK_MYSQL_RESTART=bash $self restart $dir"
  echo "LEASELOCK_MYSQL_SOCKET=$dir/mysqld.sock"
  # For make bench-core, which places the server's threads on CPUs.
  echo "LEASELOCK_MYSQL_SERVER_PID=$(cat "$dir/mysqld.pid.launch")"
  ;;
stop)
  stop_server
  ;;
restart)
  port=$(cat "$dir/port")
  stop_server
  rm -f "$dir/mysqld.sock"
  sleep "${3:-0}"
  for attempt in 1 2 3 4 5; do
    run_server "$port"
    wait_ready 60 && exit 0
    stop_server
    sleep 0.5
  done
  echo "mysql.sh: restart failed (see $dir/mysqld.log)" >&2; exit 1
  ;;
*) echo "usage: $0 start|stop|restart DIR" >&2; exit 2 ;;
esac
