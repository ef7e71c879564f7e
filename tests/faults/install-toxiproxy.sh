#!/bin/bash
# Builds Toxiproxy's server (Shopify) once with `go install` from the Go
# module proxy, cached under DIR (default build/tools), and prints the
# binary's path. Idempotent and quiet: the build's output is shown only
# when it fails.
#
#   bash tests/faults/install-toxiproxy.sh [DIR]
#
# TOXIPROXY_VERSION pins the release. v2.5.0 names its server command
# cmd/server; from v2.6 on it is cmd/toxiproxy-server.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
version=${TOXIPROXY_VERSION:-v2.5.0}
dir=${1:-$root/build/tools}
bin=$dir/toxiproxy-$version/server
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "install-toxiproxy: Go is missing (apt-get install golang-go)" >&2; exit 1; }
case $version in
  v2.[0-5].*) pkg=github.com/Shopify/toxiproxy/v2/cmd/server ;;
  *) pkg=github.com/Shopify/toxiproxy/v2/cmd/toxiproxy-server ;;
esac
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Outside the project's tree: no go.mod of ours is in play.
if ! (cd "$tmp" && GOBIN=$tmp/bin GOFLAGS=-buildvcs=false go install "$pkg@$version") >"$tmp/log" 2>&1; then
  echo "install-toxiproxy: go install $pkg@$version failed:" >&2
  cat "$tmp/log" >&2
  exit 1
fi
mkdir -p "$(dirname "$bin")"
mv "$tmp/bin/$(basename "$pkg")" "$bin"
echo "$bin"
