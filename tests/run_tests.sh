#!/usr/bin/env bash
# The test command behind `make test`: builds and runs every ctest label this machine can run,
# says what it skipped and why, and exits non-zero on any failure.
#
#   unit, integration   in the dev build (GCC); again in the asan build (clang++ with -Werror and
#                       -Wthread-safety, so that build is also the lock check, under ASan+UBSan),
#                       and in the tsan build (clang++, ThreadSanitizer)
#   fuzz                in the asan build, which links tests/fuzz's targets with libFuzzer: each
#                       target for a bounded number of inputs (label unit; every other build
#                       replays their corpus and regressions as unit tests)
#   emu                 the hw tier's tests and the backend's fault tests against the emulated
#                       ConnectX (hca/mlx5emu, docs/mlx5emu.md): in the dev, asan and tsan builds
#                       (under tsan, races with an emulator frame are suppressed: it reads the
#                       caller's device memory as a NIC does, outside the C++ memory model)
#   hw                  only where a ConnectX (mlx5) device is present
#   vm                  only where the Soft-RoCE guest can run (tests/vm/vmrun: qemu, a Debian
#                       kernel package); its packages are installed here, not by `make run`.
#                       Those also labelled vm_memory (dma-bufs, hugetlbfs files: they need the
#                       guest's kernel) run again in the asan and tsan builds (their test
#                       daemons wait longer for a UMR under tsan: tests/e2e/regcached_process.h)
#
# Environment (for quick local iterations only; CI sets none of them): REGCACHE_SKIP_ASAN=1,
# REGCACHE_SKIP_TSAN=1, REGCACHE_SKIP_VM=1 skip
# those passes. JOBS overrides the build/test parallelism (default: nproc).
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=${JOBS:-$(nproc)}
passed=0
failed=0
skipped=0
notes=()
timings=()
started=$SECONDS
phase_start=$SECONDS

phase_done() {  # phase_done <title>: records how long the phase since the last call took
  timings+=("$1: $((SECONDS - phase_start)) s")
  phase_start=$SECONDS
}

build() {  # build <preset>
  cmake --preset "$1" >/dev/null || return 1
  cmake --build --preset "$1" -j "$jobs"
}

count_label() {  # count_label <preset> <label-regex>
  (cd "build/$1" && ctest -N -L "$2" 2>/dev/null | sed -n 's/^Total Tests: //p')
}

run_label() {  # run_label <preset> <label-regex> <title>
  local n log
  n=$(count_label "$1" "$2")
  if [ "${n:-0}" -eq 0 ]; then
    notes+=("$3: no tests with this label yet")
    return 0
  fi
  log=$(mktemp)
  echo "=== $3 ($n tests, build/$1)"
  (cd "build/$1" && ctest -L "$2" -j "$jobs" --output-on-failure --timeout 600) 2>&1 | tee "$log"
  local ok bad skip
  ok=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2 \1/p' "$log" |
       awk '{print $1-$2}')
  bad=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log")
  skip=$(grep -c '^[[:space:]]*[0-9]* - .* (Skipped)$' "$log")  # ctest counts these as passed
  if [ -z "$ok" ]; then  # ctest itself failed before summarizing
    bad=$n
    ok=0
    skip=0
  fi
  if [ "$skip" -gt 0 ]; then
    notes+=("$3: $skip test(s) skipped themselves (exit 77; see their output above)")
  fi
  passed=$((passed + ok - skip))
  skipped=$((skipped + skip))
  failed=$((failed + bad))
  rm -f "$log"
}

deploy/install-deps.sh || exit 1

echo "=== build (dev)"
if ! build dev; then
  echo "summary: 0 passed, 1 failed (dev build failed)"
  exit 1
fi
run_label dev '^unit$' "unit"
run_label dev '^integration$' "integration"

# hw: real ConnectX only.
if grep -q '^mlx5' <<<"$(ls /sys/class/infiniband/ 2>/dev/null)"; then
  run_label dev '^hw$' "hw (ConnectX)"
else
  n=$(count_label dev '^hw$')
  skipped=$((skipped + ${n:-0}))
  notes+=("hw: skipped ${n:-0} test(s): no ConnectX device here (/sys/class/infiniband has no mlx5_*)")
fi

run_label dev '^emu$' "emu (the emulated ConnectX)"
# How much of the mlx5 backend the emu tier runs: the dev build's gcov twins of the emu programs
# (label emu_coverage), at least 90% of hca/mlx5's lines or the run fails.
echo "=== emu: line coverage of hca/mlx5 (tests/emu/coverage.sh)"
if JOBS=$jobs tests/emu/coverage.sh 90; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  notes+=("emu coverage: tests/emu/coverage.sh failed (its output is above)")
fi

phase_done "dev build + unit, integration, hw, emu"

# vm: tests in a qemu guest with Soft-RoCE (tests/vm, docs/vm.md). Its packages are installed
# only here; `vmrun --prepare` fetches and caches the guest kernel (a download on a clean
# machine) and says why when the guest cannot run here (exit 77).
vm_ready=0  # 1 once the guest can boot: the asan pass then runs vm_memory in it too
vm_packages=(qemu-system-x86 busybox-static kmod cpio iproute2 ibverbs-utils rdmacm-utils)
n=$(count_label dev '^vm$')
if [ "${n:-0}" -eq 0 ]; then
  notes+=("vm: no tests with this label")
elif [ "${REGCACHE_SKIP_VM:-0}" = "1" ]; then
  skipped=$((skipped + n))
  notes+=("vm: skipped $n test(s) because REGCACHE_SKIP_VM=1")
elif ! deploy/install-deps.sh "${vm_packages[@]}"; then
  skipped=$((skipped + n))
  notes+=("vm: skipped $n test(s): could not install its packages (${vm_packages[*]})")
else
  echo "=== vm: guest kernel and initramfs (cached after the first run)"
  log=$(mktemp)
  tests/vm/vmrun --prepare --verbose 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    vm_ready=1
    run_label dev '^vm$' "vm (Soft-RoCE guest)"
  elif [ "$rc" -eq 77 ]; then
    skipped=$((skipped + n))
    notes+=("vm: skipped $n test(s): $(sed -n 's/^vmrun: skipped: //p' "$log" | tail -n 1)")
  else
    failed=$((failed + 1))
    notes+=("vm: tests/vm/vmrun --prepare failed (exit $rc; its output is above)")
  fi
  rm -f "$log"
fi
phase_done "vm tier (Soft-RoCE guest)"

# preset_pass <preset> <skip-var> <title> <label-regex> [env...]: builds the preset and runs
# the labels in it, unless the skip variable is 1.
preset_pass() {
  local preset=$1 skip=$2 title=$3 labels=$4
  shift 4
  if [ "${!skip:-0}" = "1" ]; then
    notes+=("$preset: skipped because $skip=1")
    return 0
  fi
  echo "=== build ($preset)"
  if build "$preset"; then
    local kv
    for kv in "$@"; do export "${kv?}"; done
    run_label "$preset" "$labels" "$title"
    # Memory clients bring (dma-bufs, hugetlbfs files) needs the guest's kernel: those vm tests
    # again under each sanitizer, the guest running this build's binaries.
    if [ "$vm_ready" = 1 ]; then
      run_label "$preset" '^vm_memory$' "vm_memory (the guest) in the $preset build"
    else
      notes+=("$preset: vm_memory not run: the guest did not boot here (see vm above)")
    fi
    for kv in "$@"; do unset "${kv%%=*}"; done
  else
    failed=$((failed + 1))
    notes+=("$preset: build failed")
  fi
  phase_done "$preset build + $title"
}

# asan: clang++ -Werror -Wthread-safety with ASan+UBSan (one build for three checks: the lock
# annotations are checked while it compiles, and its unit label runs the fuzz targets).
preset_pass asan REGCACHE_SKIP_ASAN \
  "unit (with the fuzz targets)+integration+emu in the clang -Werror build (thread-safety checked) under asan+ubsan" \
  '^(unit|integration|emu)$' ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1
# tsan: each test carries its suppressions (tests/tsan.supp, set by regcache_test_env).
preset_pass tsan REGCACHE_SKIP_TSAN "unit+integration+emu under tsan" '^(unit|integration|emu)$'

echo
echo "=== what ran and what did not"
for n in "${notes[@]}"; do echo "- $n"; done
echo "=== time taken ($((SECONDS - started)) s in all)"
for t in "${timings[@]}"; do echo "- $t"; done
echo "summary: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
