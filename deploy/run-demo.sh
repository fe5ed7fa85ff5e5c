#!/usr/bin/env bash
# What `make run` runs after building: the most complete real thing the tree can do.
# Usage: deploy/run-demo.sh <build-dir>
#
# Starts regcached on the simulated device with its sockets in a temp dir, runs the demo client
# against it (allocate shared memory, register, a peer write landing in the client's memory,
# invalidate, the same write refused, measured latencies), shows regcachectl, then stops the
# daemon with SIGTERM and checks that it drained and exited 0. Short benchmark runs follow.
set -euo pipefail
build=${1:?usage: run-demo.sh <build-dir>}

ran=0
if [ -x "$build/server/regcached" ] && [ -x "$build/tools/regcache_demo" ]; then
  dir=$(mktemp -d /tmp/regcache-demo-XXXXXX)
  log="$dir/regcached.log"
  echo "=== regcached --device=sim --socket_dir=$dir (log: $log)"
  "$build/server/regcached" --device=sim --socket_dir="$dir" >"$log" 2>&1 &
  daemon=$!
  stop_daemon() {
    if kill -0 "$daemon" 2>/dev/null; then kill -KILL "$daemon" 2>/dev/null || true; fi
    rm -rf "$dir"
  }
  trap stop_daemon EXIT
  for _ in $(seq 1 100); do  # up to 10 s for both sockets
    [ -S "$dir/control.sock" ] && [ -S "$dir/grpc.sock" ] && break
    sleep 0.1
  done
  if ! [ -S "$dir/grpc.sock" ]; then
    echo "run-demo: regcached did not come up:" >&2
    cat "$log" >&2
    exit 1
  fi
  echo "=== regcache_demo (a separate client process)"
  "$build/tools/regcache_demo" --socket_dir="$dir"
  echo "=== regcachectl status / stats (cache)"
  "$build/tools/regcachectl" --socket_dir="$dir" status
  "$build/tools/regcachectl" --socket_dir="$dir" stats | grep '^cache\.' | sed -n '1,12p'  # reads it all: no SIGPIPE under pipefail
  echo "=== SIGTERM: regcached drains and exits"
  kill -TERM "$daemon"
  rc=0
  wait "$daemon" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run-demo: regcached exited $rc after SIGTERM" >&2
    cat "$log" >&2
    exit 1
  fi
  echo "regcached exited 0 after draining"
  ran=1
fi
if [ -x "$build/bench/shm_bench" ]; then
  echo "=== shm_bench (short run, 1k grants, one thread; full run: $build/bench/shm_bench)"
  "$build/bench/shm_bench" --benchmark_min_time=0.05 \
    --benchmark_filter='Floor|Nop|RoundTrip/real_time/threads:1$|Hit/grants:1000/real_time/threads:1$'
  ran=1
fi
for b in grpc_bench umr_encode_bench sim_bench; do
  if [ -x "$build/bench/$b" ]; then
    echo "=== $b (short run; full run: $build/bench/$b)"
    "$build/bench/$b" --benchmark_min_time=0.05
    ran=1
  fi
done
if [ "$ran" -eq 0 ]; then
  echo "run-demo: nothing to run in $build yet" >&2
  exit 1
fi
