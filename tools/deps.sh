#!/bin/bash
# Installs what leaselock's build, tests and demo need from Debian, when run
# as root; otherwise prints the exact command and fails.
set -euo pipefail

packages=(
  build-essential pkg-config
  libsqlite3-dev sqlite3
  libmongoc-dev libbson-dev
  libmariadb-dev mariadb-server
  galera-4 mariadb-backup socat
  libpq-dev postgresql
  lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev lua-compat53-dev lua-busted luarocks
  nginx libnginx-mod-http-lua
  python3-dev python3-venv
  faketime libfaketime tmux
  clang libclang-rt-14-dev clang-format valgrind
  default-jre-headless maven curl
  golang-go
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

# A JDK already on PATH (Java 17+) is enough for the MongoDB test server.
if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
  m2=(); for p in "${missing[@]}"; do
    case $p in default-jre-headless|maven) ;; *) m2+=("$p");; esac
  done
  missing=("${m2[@]+"${m2[@]}"}")
  [ ${#missing[@]} -eq 0 ] && exit 0
fi

# A Go toolchain already on PATH is enough to build Toxiproxy (the fault
# suite's proxy, tests/faults/install-toxiproxy.sh).
if command -v go >/dev/null 2>&1; then
  m2=(); for p in "${missing[@]}"; do [ "$p" = golang-go ] || m2+=("$p"); done
  missing=("${m2[@]+"${m2[@]}"}")
  [ ${#missing[@]} -eq 0 ] && exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "leaselock needs these Debian packages:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# Debian's postinst scripts would start the servers; the tests start their
# own on private ports, so keep the system services down.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
