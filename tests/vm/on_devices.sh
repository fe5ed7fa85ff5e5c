#!/bin/sh
# Runs in the guest: a test program against regcached on each device named, as the guest scripts
# of the vm tier need (dmabuf_in_guest.sh, hugetlbfs_in_guest.sh). Exit 1 if any run failed.
#   on_devices.sh <what> <test> <shim dir or ""> <devices> <gtest filter>
# <devices>: of sim, verbs (rxe0), mlx5_0, mlx5_1 (the emulated ConnectX: needs the shim dir).
set -u
what=$1
test_bin=$2
shims=$3
devices=$4
filter=$5
status=0
for device in $devices; do
  case $device in
    sim) echo "=== $what on sim"; env=REGCACHE_TEST_DEVICE=sim ;;
    verbs) echo "=== $what on verbs (rxe0)"; env=REGCACHE_TEST_DEVICE=verbs ;;
    mlx5_*)
      [ -n "$shims" ] || continue
      echo "=== $what on the emulated ConnectX ($device)"
      env="LD_LIBRARY_PATH=$shims REGCACHE_TEST_DEVICE=mlx5:$device" ;;
    *) echo "unknown device $device"; exit 2 ;;
  esac
  # shellcheck disable=SC2086  # $env is one or two assignments
  env $env "$test_bin" --gtest_brief=1 "--gtest_filter=$filter" || status=1
done
exit $status
