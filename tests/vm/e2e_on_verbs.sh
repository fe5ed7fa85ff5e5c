#!/bin/sh
# Runs in the Soft-RoCE guest (tests/vm/vmrun): the end-to-end suites that spawn regcached, now
# with --device=verbs (REGCACHE_TEST_DEVICE), so the cache, the service, the fast path and the
# client cache run unchanged on real memory windows. Usage: e2e_on_verbs.sh <test binary>...
set -u
export REGCACHE_TEST_DEVICE=verbs
status=0
for t in "$@"; do
  echo "=== $(basename "$t") on verbs"
  "$t" --gtest_brief=1 || status=1
done
exit $status
