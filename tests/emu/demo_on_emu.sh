#!/usr/bin/env bash
# `make run`'s demo against regcached on the emulated ConnectX: the daemon on --device=<spec>
# (the mlx5 backend over the emulator), the demo client in its own process (allocate, register,
# a peer write that must land in the client's memory through the daemon's requester queue pair,
# invalidate, the same write refused), regcachectl status, then SIGTERM: the daemon must drain
# and exit 0.
# The programs are the ones `make run` uses; the emu tier puts the emulator in front of
# rdma-core for all of them (LD_LIBRARY_PATH, tests/emu/CMakeLists.txt).
#   demo_on_emu.sh <regcached> <regcache_demo> <regcachectl> [device spec]
# The spec defaults to REGCACHE_HW_DEVICE (the emu tier sets it per capability image).
set -euo pipefail
daemon_bin=$1 demo=$2 ctl=$3 spec=${4:-${REGCACHE_HW_DEVICE:-mlx5}}
dir=$(mktemp -d /tmp/regcache-emu-demo-XXXXXX)
log="$dir/regcached.log"
"$daemon_bin" --device="$spec" --peer_on_any_device --socket_dir="$dir" >"$log" 2>&1 &
daemon=$!
cleanup() {
  if kill -0 "$daemon" 2>/dev/null; then kill -KILL "$daemon" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  [ -S "$dir/control.sock" ] && [ -S "$dir/grpc.sock" ] && break
  sleep 0.1
done
if ! [ -S "$dir/grpc.sock" ]; then
  echo "regcached on $spec did not come up:" >&2
  cat "$log" >&2
  exit 1
fi
out=$("$demo" --socket_dir="$dir" --rounds=20)
echo "$out"
grep -q "on device ${spec}" <<<"$out" || { echo "the demo did not run on ${spec}" >&2; exit 1; }
grep -q "landed" <<<"$out" || { echo "the peer write did not land" >&2; exit 1; }
"$ctl" --socket_dir="$dir" status
kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
cat "$log"
if [ "$rc" -ne 0 ]; then
  echo "regcached exited $rc after SIGTERM" >&2
  exit 1
fi
echo "regcached on $spec served the demo and exited 0 after draining"
