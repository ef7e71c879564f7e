#!/bin/bash
# The Python suite on each CPython version named (3.11 3.12 ...), found
# under pyenv's versions directory (~/.pyenv/versions, or $PYENV_ROOT/versions):
# for each, the extension is built with that interpreter into
# BUILD/python-versions/<version>, the test packages (pytest, Hypothesis,
# setuptools) are installed from PyPI into a directory beside it, and
# tests/python runs on embedded SQLite (the python suite covers the server
# backends with the default interpreter), less the tests marked slow (they
# mostly wait; the python suite runs them). A version the machine lacks is
# reported as skipped, never passed over silently.
#
#   tests/python/run_versions.sh BUILD VERSION...
# Environment: PY_VERSIONS_DEPS (pip requirement specs, one argument each,
# separated by spaces), PYTEST_ARGS, PYTHON (the python suite's interpreter:
# a version that is the very same interpreter is not run a second time,
# and says so).
set -uo pipefail
build=$1; shift
top=$(cd "$(dirname "$0")/../.." && pwd)
versions_dir=${PYENV_ROOT:-$HOME/.pyenv}/versions
shown_dir=${versions_dir/#$HOME/\~}
real_exe='import os, sys; print(os.path.realpath(sys.executable))'
default_exe=$(${PYTHON:-python3} -c "$real_exe" 2>/dev/null)
read -r -a deps_specs <<< "${PY_VERSIONS_DEPS:-pytest>=7 hypothesis>=6.80,<7 setuptools>=61}"
ran=(); skipped=(); failed=()

for v in "$@"; do
  dir=$(ls -d "$versions_dir/$v".* 2>/dev/null | grep -E "/${v//./\\.}\.[0-9]+$" | sort -V | tail -n 1)
  py=$dir/bin/python$v
  if [ -z "$dir" ] || [ ! -x "$py" ]; then
    echo "python$v: skipped: not found under $shown_dir"
    skipped+=("$v")
    continue
  fi
  full=$("$py" -c 'import platform; print(platform.python_version())')
  if [ -n "$default_exe" ] && [ "$("$py" -c "$real_exe")" = "$default_exe" ]; then
    echo "python$v: $full is ${PYTHON:-python3}, which the python suite builds and tests on every backend: not run twice"
    ran+=("$full(python suite)")
    continue
  fi
  out=$top/$build/python-versions/$full
  deps=$out/deps
  mkdir -p "$out"
  echo "python$v: $py ($full)"
  stamp="$deps/.ready ${deps_specs[*]}"
  if [ ! -f "$deps/.ready" ] || [ "$(cat "$deps/.ready")" != "$stamp" ]; then
    rm -rf "$deps"
    if ! "$py" -m pip install -q --disable-pip-version-check --target "$deps" "${deps_specs[@]}"; then
      echo "python$v: FAILED: cannot install ${deps_specs[*]}"
      failed+=("$v"); continue
    fi
    echo "$stamp" > "$deps/.ready"
  fi
  if ! (cd "$top" && PYTHONPATH=$deps LEASELOCK_WERROR=1 "$py" setup.py -q build \
          --build-base "$out/build" --build-lib "$out/lib" --build-temp "$out/temp" -j 2 \
          >"$out/build.log" 2>&1); then
    cat "$out/build.log"
    echo "python$v: FAILED: the extension does not build"
    failed+=("$v"); continue
  fi
  # shellcheck disable=SC2086  # PYTEST_ARGS: several arguments
  if (cd "$top/tests/python" && env -u MONGODB_URI -u MYSQL_URI -u POSTGRESQL_URI \
        PYTHONPATH="$out/lib:$deps" PYTHONDONTWRITEBYTECODE=1 \
        "$py" -m pytest -q -p no:cacheprovider -m "not slow" ${PYTEST_ARGS:-} .); then
    ran+=("$full")
  else
    echo "python$v: FAILED: tests/python"
    failed+=("$v")
  fi
done

echo "python versions: passed ${ran[*]:-none}; skipped ${skipped[*]:-none}; failed ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
