#!/usr/bin/env bash
# What `make run` runs after building: the most complete real thing the tree can do.
# Usage: deploy/run-demo.sh <build-dir>
set -euo pipefail
build=${1:?usage: run-demo.sh <build-dir>}

ran=0
if [ -x "$build/tests/demo/sim_demo" ]; then
  echo "=== sim_demo: register, peer write, invalidate, refused — on the simulated HCA"
  "$build/tests/demo/sim_demo"
  ran=1
fi
for b in umr_encode_bench sim_bench; do
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
