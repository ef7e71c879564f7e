# checks.sh - the counting checks of the packaging scripts (sourced by
# test_packaging.sh and test_wheel.sh): ok/fail count, check runs a
# command as one check, finish prints the tally and exits with it.
passed=0 failed=0

ok() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() { # check WHAT CMD... : ok when CMD succeeds
  local what=$1; shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}
