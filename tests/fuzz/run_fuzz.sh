#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded number of inputs.
#   run_fuzz.sh <target> <runs> <work-corpus-dir> <seed-dir> <regression-dir>
# The seeds are copied into the work corpus (in the build tree: libFuzzer writes new inputs
# there, never into the source tree); the regressions are run first, one by one. A crash
# leaves its input in the work dir as crash-*: commit it to the regression dir under a name
# that says what it broke.
set -euo pipefail
target=$1 runs=$2 work=$3 seeds=$4 regressions=$5
mkdir -p "$work"
if [ -d "$seeds" ]; then cp -n "$seeds"/* "$work"/ 2>/dev/null || true; fi
if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions" 2>/dev/null | grep -v README)" ]; then
  "$target" $(ls -d "$regressions"/* | grep -v README)
fi
cd "$work"
exec "$target" -runs="$runs" -seed=1 -timeout=10 -rss_limit_mb=4096 -max_len=4096 \
  -print_final_stats=1 "$work"
