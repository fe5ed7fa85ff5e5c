#!/bin/sh
# Runs in a guest whose kernel exports dma-bufs (/dev/udmabuf: Debian's 6.12 kernel builds it in;
# 6.1 does not): dmabuf_e2e_test against regcached on the sim (the whole data path), on verbs
# (rxe0: its answer to ibv_reg_dmabuf_mr), and on the emulated ConnectX when the emulator's
# rdma-core stand-ins are given. Usage: dmabuf_in_guest.sh <dmabuf_e2e_test> [<shim dir>]
set -u
test_bin=$1
shims=${2:-}
if [ ! -e /dev/udmabuf ]; then
  echo "skipped: this guest's kernel ($(uname -r)) has no /dev/udmabuf (CONFIG_UDMABUF)"
  exit 77
fi
status=0
echo "=== dma-bufs on sim"
REGCACHE_TEST_DEVICE=sim "$test_bin" --gtest_brief=1 || status=1
echo "=== dma-bufs on verbs (rxe0)"
REGCACHE_TEST_DEVICE=verbs "$test_bin" --gtest_brief=1 || status=1
if [ -n "$shims" ]; then
  for image in mlx5_0 mlx5_1; do
    echo "=== dma-bufs on the emulated ConnectX ($image)"
    LD_LIBRARY_PATH=$shims REGCACHE_TEST_DEVICE=mlx5:$image "$test_bin" --gtest_brief=1 || status=1
  done
fi
exit $status
