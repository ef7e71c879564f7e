#!/bin/bash
# backends.sh WHAT - the one place that says which backends a build
# compiles in: SQLite always, the others when pkg-config finds their client
# library. The Makefile (and through it the rockspec) and setup.py ask it.
#
#   names    the backends found, e.g. "sqlite mongodb mysql postgresql"
#   defines  their macros: "LEASELOCK_WITH_MONGODB ..." (SQLite needs none)
#   cflags   the compiler flags: -D<macro> for each, then pkg-config --cflags
#   libs     pkg-config --libs of their libraries
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

case ${1:-} in
names) echo "${names[*]}" ;;
defines) echo "${defines[*]}" ;;
cflags) echo "${defines[*]/#/-D}" "$("$pc" --cflags "${pkgs[@]}" 2>/dev/null)" ;;
libs) "$pc" --libs "${pkgs[@]}" 2>/dev/null ;;
*) echo "usage: $0 names|defines|cflags|libs" >&2; exit 2 ;;
esac
