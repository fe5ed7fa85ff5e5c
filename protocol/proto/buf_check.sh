#!/usr/bin/env bash
# The API's conventions, checked by buf (docs/api.md): `lint` runs `buf lint` (STANDARD rules,
# protocol/proto/buf.yaml); `breaking` runs `buf breaking` against the committed v1 baseline
# (protocol/proto/v1_baseline.binpb, an image of the proto as v1 was published; regenerate it only
# for a new major version: `buf build -o v1_baseline.binpb` in protocol/proto).
# Usage: buf_check.sh lint|breaking <protocol/proto dir> <tool dir for buf if it is not on PATH>
# buf comes from PATH, or from the npm registry (@bufbuild/buf, pinned) into the tool dir; when
# neither works (no npm, no network) the check is skipped with exit 77 and says why.
set -uo pipefail
mode=$1
proto_dir=$2
tools=$(realpath -m "$3")
readonly BUF_VERSION=1.75.0

buf=$(command -v buf || true)
if [ -z "$buf" ]; then
  buf="$tools/node_modules/.bin/buf"
  if [ ! -x "$buf" ]; then
    if ! command -v npm >/dev/null; then
      echo "SKIP: buf is not on PATH and npm is missing to install @bufbuild/buf"
      exit 77
    fi
    mkdir -p "$tools"
    # One install at a time when ctest runs lint and breaking in parallel.
    (
      flock 9
      [ -x "$buf" ] || npm install --silent --no-audit --no-fund --prefix "$tools" \
        "@bufbuild/buf@$BUF_VERSION"
    ) 9>"$tools/.install.lock"
    if [ ! -x "$buf" ]; then
      echo "SKIP: could not install @bufbuild/buf@$BUF_VERSION with npm (no network?)"
      exit 77
    fi
  fi
fi

cd "$proto_dir" || exit 1
case "$mode" in
  lint)
    "$buf" lint && echo "buf lint: clean (STANDARD)"
    ;;
  breaking)
    [ -f v1_baseline.binpb ] || { echo "v1_baseline.binpb is missing"; exit 1; }
    "$buf" breaking --against v1_baseline.binpb && echo "buf breaking: no breaking change from v1"
    ;;
  *)
    echo "usage: $0 lint|breaking <proto dir> <tool dir>" >&2
    exit 2
    ;;
esac
