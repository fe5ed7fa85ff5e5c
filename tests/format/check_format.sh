#!/usr/bin/env bash
# Fails when a C++ source of the project is not as clang-format (the repository's .clang-format)
# would write it, and names the files. Fix with: tests/format/check_format.sh --fix
#
#   check_format.sh [--fix] <source-root> [clang-format]
set -uo pipefail
fix=0
if [ "${1:-}" = "--fix" ]; then
  fix=1
  shift
fi
root=${1:?source root}
clang_format=${2:-clang-format}
cd "$root" || exit 2

# The project's own sources: tracked files when this is a git checkout, else every file under
# the code folders (a source tarball).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.h' '*.cc')
else
  mapfile -t files < <(find base umr hca cache odp service protocol client server tools bench tests include \
                         \( -name '*.h' -o -name '*.cc' \) 2>/dev/null | sort)
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check_format: no sources found under $root" >&2
  exit 2
fi

if [ $fix -eq 1 ]; then
  "$clang_format" -i --style=file "${files[@]}"
  exit $?
fi

bad=()
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from clang-format's output:"
  printf '  %s\n' "${bad[@]}"
  echo "fix: tests/format/check_format.sh --fix ."
  exit 1
fi
echo "check_format: ${#files[@]} files formatted as .clang-format says"
