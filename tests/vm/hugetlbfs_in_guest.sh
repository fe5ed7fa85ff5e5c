#!/bin/sh
# Runs in the guest: mounts hugetlbfs, reserves huge pages, and runs hugetlbfs_e2e_test against
# regcached on the sim (the refusal), on verbs (rxe0) and, when the emulator's rdma-core
# stand-ins are given, on the emulated ConnectX. Usage:
#   hugetlbfs_in_guest.sh <test> [<shim dir> [<devices> [<filter>]]]
# <devices>: of sim, verbs, mlx5_0, mlx5_1 (default: all; the ASan build runs fewer).
# <filter>: the tests' --gtest_filter (default: all).
set -u
test_bin=$1
shims=${2:-}
devices=${3:-sim verbs mlx5_0 mlx5_1}
filter=${4:-*}  # --gtest_filter
mkdir -p /mnt/huge
if ! mount -t hugetlbfs none /mnt/huge; then
  echo "skipped: this guest cannot mount hugetlbfs"
  exit 77
fi
echo 16 > /proc/sys/vm/nr_hugepages
echo "huge pages reserved: $(cat /proc/sys/vm/nr_hugepages)"
export REGCACHE_TEST_HUGETLBFS=/mnt/huge
exec "$(dirname "$0")/on_devices.sh" "hugetlbfs files" "$test_bin" "$shims" "$devices" "$filter"
