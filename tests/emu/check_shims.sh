#!/bin/sh
# check_shims.sh <shim dir> <program>...: with LD_LIBRARY_PATH=<shim dir>, every program loads
# libibverbs.so.1 and libmlx5.so.1 from the shim directory (the emulator), not rdma-core's.
set -u
dir=$1
shift
status=0
for p in "$@"; do
  out=$(LD_LIBRARY_PATH="$dir" ldd "$p")
  for lib in libibverbs.so.1 libmlx5.so.1; do
    line=$(printf '%s\n' "$out" | grep "$lib =>")
    case "$line" in
      *"$dir/$lib"*) echo "$(basename "$p"): $lib from the emulator" ;;
      "") echo "$(basename "$p"): does not need $lib" ;;
      *) echo "$(basename "$p"): $lib not from $dir: $line"; status=1 ;;
    esac
  done
done
exit $status
