#!/bin/bash
# backends.sh WHAT - the one place that says which backends a build
# compiles: SQLite always (built into the core), the others when pkg-config
# finds their client library, each as a module of its own
# (leaselock_backend_<name>.so from csrc/SOURCES.<name>, loaded at the
# first URI of its scheme: csrc/ll_core_api.h). The Makefile (and through
# it the rockspec) and setup.py ask it.
#
#   names       the backends found, e.g. "sqlite mongodb mysql postgresql"
#   modules     those built as modules, e.g. "mongodb mysql postgresql"
#   defines     their macros: "LEASELOCK_WITH_MONGODB ..." (SQLite needs none)
#   cflags      the compiler flags: -D<macro> for each, then pkg-config --cflags
#   libs        pkg-config --libs of the core's libraries (SQLite's)
#   libs NAME   pkg-config --libs of module NAME's client library
#   package NAME  its pkg-config package
#
# PKG_CONFIG names the pkg-config to run (default pkg-config). Without
# SQLite's (libsqlite3-dev) it says so and fails.
set -uo pipefail
pc=${PKG_CONFIG:-pkg-config}

# backend    pkg-config package   macro that compiles it in
table="
sqlite       sqlite3              -
mongodb      libmongoc-1.0        LEASELOCK_WITH_MONGODB
mysql        libmariadb           LEASELOCK_WITH_MYSQL
postgresql   libpq                LEASELOCK_WITH_POSTGRESQL
"

names=() pkgs=() defines=()
while read -r name pkg macro; do
  [ -n "$name" ] || continue
  if "$pc" --exists "$pkg" 2>/dev/null; then
    names+=("$name"); pkgs+=("$pkg")
    [ "$macro" = - ] || defines+=("$macro")
  fi
done <<<"$table"
if [ "${names[0]:-}" != sqlite ]; then
  echo "leaselock needs SQLite 3 (pkg-config $(sed -n 's/^sqlite *\([^ ]*\).*/\1/p' <<<"$table"); Debian: libsqlite3-dev)" >&2
  exit 1
fi

# The pkg-config package of backend $1 among those found.
package() {
  local i
  for i in "${!names[@]}"; do
    [ "${names[$i]}" = "$1" ] && { echo "${pkgs[$i]}"; return 0; }
  done
  echo "backends.sh: no backend \"$1\" found (found: ${names[*]})" >&2
  return 1
}

case ${1:-} in
names) echo "${names[*]}" ;;
modules) echo "${names[*]:1}" ;;
defines) echo "${defines[*]}" ;;
cflags) echo "${defines[*]/#/-D}" "$("$pc" --cflags "${pkgs[@]}" 2>/dev/null)" ;;
libs) "$pc" --libs "$(package "${2:-sqlite}")" 2>/dev/null ;;
package) package "${2:?usage: $0 package NAME}" ;;
*) echo "usage: $0 names|modules|defines|cflags|libs [NAME]|package NAME" >&2; exit 2 ;;
esac
