#!/usr/bin/env bash
# Fails when the program needs libibverbs or libmlx5: an emu program must run the backend
# against the emulator only.
#   check_no_rdma_core.sh <program>
set -euo pipefail
needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
if grep -E '^lib(ibverbs|mlx5)\.so' <<<"$needed"; then
  echo "$1 needs rdma-core's libraries (above): it would not run on the emulator" >&2
  exit 1
fi
echo "$1 needs: $(tr '\n' ' ' <<<"$needed")"
