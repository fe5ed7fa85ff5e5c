#!/usr/bin/env bash
# Line coverage of the mlx5 backend (hca/mlx5) under the emu tier: the dev build's gcov twins of
# the tier's programs (REGCACHE_EMU_COVERAGE, hca/mlx5/CMakeLists.txt) run under label
# emu_coverage; then each source's covered lines and the lines never run. Fails when the
# folder's total is under the floor.
#   tests/emu/coverage.sh [floor-percent]     (default 90)
set -euo pipefail
cd "$(dirname "$0")/../.."
floor=${1:-90}
build=build/dev
if ! grep -q '^REGCACHE_EMU_COVERAGE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  cmake --preset dev >/dev/null
fi
ninja -C "$build" -j "${JOBS:-$(nproc)}" mlx5_hw_test_cov emu_backend_test_cov \
  regcache_mlx5_probe regcache_emu_ibverbs regcache_emu_mlx5 >/dev/null
objs=$PWD/$build/hca/mlx5/CMakeFiles/regcache_hca_mlx5_cov_objs.dir
find "$objs" -name '*.gcda' -delete
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! (cd "$build" && ctest -L '^emu_coverage$' -j "${JOBS:-$(nproc)}" --output-on-failure \
        >"$work/ctest.log" 2>&1); then
  cat "$work/ctest.log"
  echo "the emu tests failed in their coverage build"
  exit 1
fi
total=0
covered=0
for src in hca/mlx5/mlx5_device.cc hca/mlx5/internal/*.cc; do
  rel=${src#hca/mlx5/}
  g="$work/$(basename "$src").gcov"
  # Sources are named relative to the build folder; -t writes every file's report to stdout,
  # of which this source's is kept.
  (cd "$build" && gcov -t "$objs/$rel.gcda" 2>/dev/null) |
    awk -v want="$src" '/^ *-: *0:Source:/ { keep = index($0, want) > 0 } keep' >"$g" || true
  [ -f "$g" ] || { echo "$src: no coverage data"; continue; }
  run=$(grep -cE '^ *[0-9]+\*?:' "$g" || true)
  never=$(grep -cE '^ *#####:' "$g" || true)
  total=$((total + run + never))
  covered=$((covered + run))
  printf '%-40s %4d of %4d lines\n' "$src" "$run" "$((run + never))"
  grep -E '^ *#####:' "$g" | sed -E "s/^ *#####: *([0-9]+):(.*)/    $(basename "$src"):\1:\2/" || true
done
pct=$((covered * 1000 / (total > 0 ? total : 1)))
printf 'hca/mlx5 under emu: %d of %d lines, %d.%d%%\n' "$covered" "$total" $((pct / 10)) $((pct % 10))
[ $((pct / 10)) -ge "$floor" ] || { echo "below the ${floor}% floor"; exit 1; }
