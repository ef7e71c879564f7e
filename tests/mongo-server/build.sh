#!/bin/bash
# Builds the MongoDB test server launcher once and prints the command line
# that runs it (java -cp ... leaselock.LeaselockMongoServer). Output goes to
# OUT (default build/mongo-server at the top of the tree); Maven keeps the
# jars in ~/.m2 (fetched once from Maven Central). Rebuilds when pom.xml or
# the launcher source is newer than the build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$root/build/mongo-server}
case $out in /*) ;; *) out=$root/$out;; esac
stamp=$out/classes/leaselock/LeaselockMongoServer.class
src=$here/src/main/java/leaselock/LeaselockMongoServer.java
stale() {
  [ ! -s "$out/classpath.txt" ] || [ ! -e "$stamp" ] || [ "$here/pom.xml" -nt "$stamp" ] \
    || [ "$src" -nt "$stamp" ]
}
mkdir -p "$out"
# One build at a time (parallel test runs share this output).
exec 9>"$out/.build.lock"
flock 9
if stale; then
  command -v mvn >/dev/null || { echo "mongo-server: mvn not found (run: make deps)" >&2; exit 1; }
  command -v java >/dev/null || { echo "mongo-server: java not found (run: make deps)" >&2; exit 1; }
  if ! mvn -B -q -f "$here/pom.xml" -Dleaselock.out="$out" compile >"$out/build.log" 2>&1; then
    echo "mongo-server: maven build failed; see $out/build.log" >&2
    tail -20 "$out/build.log" >&2
    exit 1
  fi
  touch "$stamp"
fi
echo "java -XX:+UseSerialGC -cp $out/classes:$(cat "$out/classpath.txt") leaselock.LeaselockMongoServer"
