#!/bin/sh
# Runs in a guest whose kernel exports dma-bufs (/dev/udmabuf: Debian's 6.12 kernel builds it in;
# 6.1 does not): dmabuf_e2e_test against regcached on the sim (the whole data path), on verbs
# (rxe0: its answer to ibv_reg_dmabuf_mr), and on the emulated ConnectX when the emulator's
# rdma-core stand-ins are given. Usage:
#   dmabuf_in_guest.sh <dmabuf_e2e_test> [<shim dir> [<devices> [<filter>]]]
# <devices>: of sim, verbs, mlx5_0, mlx5_1 (default: all; the ASan build runs fewer).
# <filter>: the tests' --gtest_filter (default: all).
set -u
test_bin=$1
shims=${2:-}
devices=${3:-sim verbs mlx5_0 mlx5_1}
filter=${4:-*}  # --gtest_filter
if [ ! -e /dev/udmabuf ]; then
  echo "skipped: this guest's kernel ($(uname -r)) has no /dev/udmabuf (CONFIG_UDMABUF)"
  exit 77
fi
exec "$(dirname "$0")/on_devices.sh" "dma-bufs" "$test_bin" "$shims" "$devices" "$filter"
