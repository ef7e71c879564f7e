#!/bin/bash
# OpenResty-style test: Debian's nginx with libnginx-mod-http-lua loads the
# LuaJIT build of the module; each request takes a lease through
# ngx.run_worker_thread and does a non-atomic increment of a shared counter
# file under it. Many concurrent requests over several workers must never
# overlap, the counter must equal the number of requests, and the fences
# must increase in the order the holders wrote them.
# Then, with one worker, lock:acquire_nb waits on the event loop (ngx.sleep
# between tries; a server backend's tries in a thread pool) while /ping on
# the same worker keeps being answered (nb_driver.py).
#
# usage: test_openresty.sh /abs/path/to/jit/leaselock.so
# The first part runs against SQLite, and MONGODB_URI / MYSQL_URI /
# POSTGRESQL_URI when set; the second needs all three (tests/with-servers.sh).
set -uo pipefail
mod=${1:?usage: $0 /path/to/jit/leaselock.so}
here=$(cd "$(dirname "$0")" && pwd)
requests=${LEASELOCK_NGINX_REQUESTS:-50}
modules=/usr/lib/nginx/modules

for f in "$modules/ndk_http_module.so" "$modules/ngx_http_lua_module.so"; do
  [ -e "$f" ] || { echo "openresty: $f missing (apt-get install libnginx-mod-http-lua)"; exit 1; }
done
command -v nginx >/dev/null || { echo "openresty: nginx missing"; exit 1; }
command -v curl >/dev/null || { echo "openresty: curl missing"; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/leaselock-nginx.XXXXXX")
nginx_pid=
cleanup() {
  [ -n "$nginx_pid" ] && stop_nginx
  rm -rf "$dir"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
user_line=
[ "$(id -u)" -eq 0 ] && user_line="user root;"
mkdir -p "$dir/tmp" "$dir/logs"

cat >"$dir/nginx.conf" <<CONF
load_module $modules/ndk_http_module.so;
load_module $modules/ngx_http_lua_module.so;
$user_line
daemon off;
worker_processes 3;
# nginx clears its workers' environment: the build tree's backend modules
# are found through this variable (the Makefile sets it), where an installed
# rock finds them beside leaselock.so.
env LEASELOCK_BACKEND_PATH;
pid $dir/nginx.pid;
error_log $dir/logs/error.log notice;
# Blocking leaselock calls run here, never on a worker's event loop.
thread_pool leaselock threads=4;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  lua_package_cpath "$(dirname "$mod")/?.so;;";
  lua_package_path "$here/?.lua;;";
  server {
    listen 127.0.0.1:$port;
    location = /ping { return 200 "pong\n"; }
    location = /take {
      content_by_lua_block {
        local args = ngx.req.get_uri_args()
        local ok, fence, count, code = ngx.run_worker_thread("leaselock",
          "ll_nginx_handler", "take", args.uri, args.key, args.dir)
        if not ok then
          ngx.status = 500
          ngx.say("thread failed: ", tostring(fence))
        elseif not fence then
          ngx.status = 500
          ngx.say("lease failed: ", tostring(count), " ", tostring(code))
        else
          ngx.say(fence, " ", count, " ", ngx.worker.pid())
        end
      }
    }
  }
}
CONF

# start_nginx CONF: runs nginx with CONF in the foreground (nginx_pid) and
# waits until $port answers /ping.
start_nginx() {
  nginx -p "$dir" -e "$dir/logs/error.log" -c "$1" &
  nginx_pid=$!
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$port/ping" >/dev/null 2>&1 && break
    kill -0 "$nginx_pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! curl -fsS "http://127.0.0.1:$port/ping" >/dev/null 2>&1; then
    echo "openresty: nginx did not start"; cat "$dir/logs/error.log"; exit 1
  fi
}
stop_nginx() {
  kill -QUIT "$nginx_pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$nginx_pid" 2>/dev/null
  wait "$nginx_pid" 2>/dev/null
  nginx_pid=
}
start_nginx "$dir/nginx.conf"

urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }

uris=("sqlite://$dir/locks.db")
for v in MONGODB_URI MYSQL_URI POSTGRESQL_URI; do
  [ -n "${!v:-}" ] && uris+=("${!v}")
done

passed=0; failed=0
for uri in "${uris[@]}"; do
  name=${uri%%:*}
  work="$dir/work-$name"; mkdir -p "$work"; chmod 777 "$work"
  key="nginx/$(date +%s%N)"
  url="http://127.0.0.1:$port/take?uri=$(urlencode "$uri")&key=$(urlencode "$key")&dir=$(urlencode "$work")"
  seq "$requests" | xargs -P "$requests" -I{} \
    sh -c 'curl -sS -o "$1/reply.$2" -w "%{http_code}\n" "$3" >"$1/status.$2"' _ "$work" {} "$url"
  problems=()
  bad=$(cat "$work"/status.* | grep -vc '^200$')
  [ "$bad" -eq 0 ] || problems+=("$bad requests failed: $(grep -h . "$work"/reply.* | grep -v '^[0-9]* [0-9]* [0-9]*$' | sort | uniq -c | head -3)")
  count=$(cat "$work/counter" 2>/dev/null || echo 0)
  [ "$count" = "$requests" ] || problems+=("counter is $count, expected $requests (an update was lost: overlap)")
  [ -e "$work/inside" ] && problems+=("a holder never left")
  if ! awk 'NR > 1 && $1 <= prev { bad = 1 } { prev = $1 } END { exit bad }' "$work/fences"; then
    problems+=("fences did not increase in holder order")
  fi
  if ! awk '$2 != NR { bad = 1 } END { exit bad }' "$work/fences"; then
    problems+=("counter values out of order")
  fi
  workers=$(awk '{print $3}' "$work"/reply.* 2>/dev/null | sort -u | wc -l)
  if [ ${#problems[@]} -eq 0 ]; then
    echo "ok: $name: $requests concurrent requests over $workers workers, counter $count, fences increasing"
    passed=$((passed + 1))
  else
    echo "FAIL: $name: ${problems[*]}"
    failed=$((failed + 1))
  fi
done

# The non-blocking wait: one worker. Requests wait with lock:acquire_nb on
# the event loop (ngx.sleep between one-try acquires; on the server
# backends each try runs in a thread of the pool "default" or "llnb");
# /ping on the same worker must keep being answered while they wait
# (tests/lua/openresty/nb_driver.py says what is measured). SQLite and
# every server backend: a missing server is a failure, not a skip.
stop_nginx
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$dir/nginx-nb.conf" <<CONF
load_module $modules/ndk_http_module.so;
load_module $modules/ngx_http_lua_module.so;
$user_line
daemon off;
worker_processes 1;
env LEASELOCK_BACKEND_PATH;  # as above
pid $dir/nginx.pid;
error_log $dir/logs/error.log notice;
# acquire_nb's pool by default, and one named by its pool option.
thread_pool default threads=4;
thread_pool llnb threads=4;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  lua_package_cpath "$(dirname "$mod")/?.so;;";
  lua_package_path "$here/?.lua;;";
  server {
    listen 127.0.0.1:$port;
    location = /ping { return 200 "pong\n"; }
    location ~ ^/nb/(take|abort|info|close|stats|bad)$ {
      set \$op \$1;
      content_by_lua_block {
        require("ll_nb_handler")[ngx.var.op](ngx.req.get_uri_args())
      }
    }
  }
}
CONF
start_nginx "$dir/nginx-nb.conf"
nb_uris=("sqlite sqlite://$dir/locks-nb.db")
for v in POSTGRESQL_URI MYSQL_URI MONGODB_URI; do
  if [ -z "${!v:-}" ]; then
    echo "FAIL: nb: $v is not set (run under tests/with-servers.sh)"
    failed=$((failed + 1))
    continue
  fi
  nb_uris+=("$(echo "$v" | sed 's/_URI$//' | tr 'A-Z' 'a-z') ${!v}")
done
for entry in "${nb_uris[@]}"; do
  if python3 "$here/nb_driver.py" "$port" "${entry%% *}" "${entry#* }" "nb/$(date +%s%N)"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done

if grep -q '\[alert\]\|\[emerg\]\|\[crit\]' "$dir/logs/error.log"; then
  echo "FAIL: nginx logged errors:"; grep '\[alert\]\|\[emerg\]\|\[crit\]' "$dir/logs/error.log" | head
  failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
