#!/usr/bin/env bash
# Installs the Debian 12 packages regcache needs to build, test and run, if any are missing.
# Idempotent: does nothing (and needs no root) when everything is present.
# Usage: deploy/install-deps.sh [extra-package ...]
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config python3 clang
  libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libbenchmark-dev libgtest-dev libgmock-dev
  libibverbs-dev ibverbs-providers libjemalloc-dev
  libmicrohttpd-dev  # the /metrics endpoint's HTTP (server/internal/http_endpoint.h)
  libucx-dev ccache clang-format python3-yaml lld
  python3-venv python3-wheel  # tests/install: the Python package pip-installed into a venv
  prometheus  # promtool: the /metrics test runs `promtool check metrics` (docs/metrics.md)
  golang-github-gogo-googleapis-dev npm  # google/rpc protos (error details); buf for the API tests
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  # npm only runs the API tests' buf; one from elsewhere (NodeSource's nodejs bundles it, and
  # conflicts with Debian's package) serves as well.
  if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then
    continue
  fi
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != *"install ok installed"* ]]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: run as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
