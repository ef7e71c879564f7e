#!/bin/bash
# What make bench needs beyond tools/deps.sh: Debian's redis-server (the
# local Redis the "what users pick instead" comparison starts and stops on
# its own port). Installed when root; otherwise the exact command is printed
# and the run goes on without the Redis comparisons.
set -uo pipefail
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "bench: redis-server is missing (sudo apt-get install -y redis-server); the Redis comparisons are skipped" >&2
  exit 0
fi
echo "bench: installing redis-server" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# Debian's postinst would start the system's Redis on port 6379; the
# benchmark starts its own, so keep the service down.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends redis-server >&2 ||
  echo "bench: could not install redis-server; the Redis comparisons are skipped" >&2
exit 0
