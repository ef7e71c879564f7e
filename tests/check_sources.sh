#!/bin/bash
# The rockspec lists the core's C sources literally (rockspecs run in a
# sandbox and cannot read csrc/SOURCES); this keeps the two lists equal,
# in order. The Makefile and setup.py read csrc/SOURCES directly.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
want=$(grep -v '^#' "$root/csrc/SOURCES" | sed '/^[[:space:]]*$/d')
status=0; checked=0
for spec in "$root"/leaselock-*.rockspec; do
  [ -e "$spec" ] || { echo "check_sources: no rockspec found"; exit 1; }
  got=$(grep -o '"csrc/[^"]*\.c"' "$spec" | tr -d '"')
  checked=$((checked + 1))
  if [ "$got" = "$want" ]; then
    echo "ok: $(basename "$spec") lists csrc/SOURCES ($(wc -l <<<"$want") files)"
  else
    echo "FAIL: $(basename "$spec") differs from csrc/SOURCES:"
    diff <(echo "$want") <(echo "$got") | sed 's/^/  /'
    status=1
  fi
  for f in $got; do
    [ -e "$root/$f" ] || { echo "FAIL: $(basename "$spec"): $f does not exist"; status=1; }
  done
done
[ $status -eq 0 ] && echo "$checked passed, 0 failed" || echo "0 passed, $checked failed"
exit $status
