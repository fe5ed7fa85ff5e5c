#!/bin/sh
# Runs in the guest: mounts hugetlbfs, reserves huge pages, and runs hugetlbfs_e2e_test against
# regcached on the sim (the refusal), on verbs (rxe0) and, when the emulator's rdma-core
# stand-ins are given, on the emulated ConnectX. Usage: hugetlbfs_in_guest.sh <test> [<shim dir>]
set -u
test_bin=$1
shims=${2:-}
mkdir -p /mnt/huge
if ! mount -t hugetlbfs none /mnt/huge; then
  echo "skipped: this guest cannot mount hugetlbfs"
  exit 77
fi
echo 16 > /proc/sys/vm/nr_hugepages
echo "huge pages reserved: $(cat /proc/sys/vm/nr_hugepages)"
export REGCACHE_TEST_HUGETLBFS=/mnt/huge
status=0
echo "=== hugetlbfs files on sim"
REGCACHE_TEST_DEVICE=sim "$test_bin" --gtest_brief=1 || status=1
echo "=== hugetlbfs files on verbs (rxe0)"
REGCACHE_TEST_DEVICE=verbs "$test_bin" --gtest_brief=1 || status=1
if [ -n "$shims" ]; then
  for image in mlx5_0 mlx5_1; do
    echo "=== hugetlbfs files on the emulated ConnectX ($image)"
    LD_LIBRARY_PATH=$shims REGCACHE_TEST_DEVICE=mlx5:$image "$test_bin" --gtest_brief=1 || status=1
  done
fi
exit $status
