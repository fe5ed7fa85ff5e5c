#!/bin/sh
# The end-to-end suites that spawn regcached, with the daemon on the ConnectX
# (REGCACHE_TEST_DEVICE=mlx5, or REGCACHE_HW_DEVICE's spec): the cache, the service, the fast
# path, the client cache and a remote node in its own process, unchanged on real UMR keys.
# Usage: e2e_on_mlx5.sh <test binary>...
set -u
export REGCACHE_TEST_DEVICE="${REGCACHE_HW_DEVICE:-mlx5}"
status=0
for t in "$@"; do
  echo "=== $(basename "$t") on $REGCACHE_TEST_DEVICE"
  "$t" --gtest_brief=1 || status=1
done
exit $status
