#!/usr/bin/env bash
# What `cmake --install` ships works outside the tree:
#   1. installs the build into a temporary prefix;
#   2. the installed libregcache.so holds only the client (nm: no servers, cache, devices) and
#      needs no other library of the project (ldd);
#   3. a C program builds against it with `pkg-config --cflags --libs regcache` alone, and a C++
#      one through the CMake package (find_package(regcache) + regcache::client_cpp);
#   4. both run against the INSTALLED regcached (sim device, sockets in a temp dir): connect,
#      allocate, register, print the rkey, release;
#   5. a C++ program with its own copy of google.rpc's generated code (as every program using
#      the googleapis protos has) loads next to libregcache.so and reads a daemon error's
#      reason through the client (the library must carry no generated google.rpc code: two
#      copies abort at load).
# Usage: check_install.sh <source-root> <build-dir> <c-compiler> <c++-compiler> <googleapis-dir>
set -euo pipefail
src=$1 build=$2 cc=$3 cxx=$4 googleapis=$5
here=$src/tests/install
work=$(mktemp -d /tmp/regcache-install-XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "install check: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
fail() { echo "install check: $*" >&2; exit 1; }

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log"; fail "cmake --install failed"; }
for f in bin/regcached bin/regcachectl include/regcache/regcache.h include/regcache/client.h \
         lib/systemd/system/regcached.service etc/regcache/regcached.conf; do
  [ -e "$prefix/$f" ] || fail "$f not installed"
done
# The installed unit starts the installed daemon with the installed flag file.
grep -q "^ExecStart=.*/bin/regcached --flagfile=.*/regcache/regcached.conf" \
  "$prefix/lib/systemd/system/regcached.service" || fail "the unit's ExecStart names no regcached"
pc=$(find "$prefix" -name regcache.pc | head -1)
[ -n "$pc" ] || fail "regcache.pc not installed"
libdir=$(dirname "$(dirname "$pc")")
lib=$libdir/libregcache.so
[ -e "$lib" ] || fail "libregcache.so not next to pkgconfig/ ($libdir)"
[ -e "$libdir/cmake/regcache/regcacheConfig.cmake" ] || fail "CMake package not installed"
[ -e "$libdir/cmake/regcache/regcacheConfigVersion.cmake" ] || fail "CMake version file missing"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libregcache.so.0 ] || fail "SONAME is '$soname', want libregcache.so.0"
echo "installed: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

# 2. Only the client. Every symbol the library defines in regcache:: belongs to the client
# (api), base/, the generated regcache.v1 code or the protocol (protocol/); none is a server's,
# the cache's or a device's. (tests/layering refuses such an include at build time already;
# this checks what the linker actually put in.)
nm -C --defined-only "$lib" | cut -d' ' -f3- |
  sed -E 's/^(typeinfo name for |typeinfo for |vtable for |VTT for |guard variable for )//' |
  grep -E '^regcache::' >"$work/symbols" || true
[ -s "$work/symbols" ] || fail "nm found no regcache:: symbol in $lib"
grep -vE '^regcache::(api|base|v1|protocol)::' \
  "$work/symbols" >"$work/foreign" || true
grep -E '^regcache::[A-Za-z_:]*(ControlServer|GrpcServer|MetricsServer|SessionCloser|HttpEndpoint|ServiceImpl)' \
  "$work/symbols" >>"$work/foreign" || true
if [ -s "$work/foreign" ]; then
  head -20 "$work/foreign" >&2
  fail "libregcache.so holds code that is not the client's ($(wc -l <"$work/foreign") symbols)"
fi
if ldd "$lib" | grep -E 'libregcache_|libjemalloc|not found'; then
  fail "libregcache.so needs a library it should not"
fi
echo "libregcache.so: client only ($(wc -l <"$work/symbols") regcache:: symbols), SONAME $soname"

# 3. Build outside the tree against the installed files only.
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs regcache) || fail "pkg-config does not find regcache"
echo "pkg-config --cflags --libs regcache: $flags"
# shellcheck disable=SC2086  # the flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic-errors "$here/hello.c" -o "$work/hello_c" $flags
cmake -S "$here/cpp" -B "$work/cpp" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DGOOGLEAPIS_DIR="$googleapis" \
  >"$work/cpp.log" 2>&1 || {
  cat "$work/cpp.log"; fail "the CMake package does not configure"; }
cmake --build "$work/cpp" >>"$work/cpp.log" 2>&1 || {
  cat "$work/cpp.log"; fail "the C++ program does not build through the CMake package"; }

# 4. Against the installed daemon.
sock=$work/sock
"$prefix/bin/regcached" --device=sim --socket_dir="$sock" >"$work/regcached.log" 2>&1 &
pid=$!
for _ in $(seq 100); do  # up to 10 s for both sockets
  [ -S "$sock/control.sock" ] && [ -S "$sock/grpc.sock" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ -S "$sock/grpc.sock" ] || { cat "$work/regcached.log"; fail "installed regcached did not start"; }
export LD_LIBRARY_PATH=$libdir
out=$("$work/hello_c" "$sock") || { cat "$work/regcached.log"; fail "the C program failed"; }
echo "$out"
grep -qE '^c: session=[0-9]+ rkey=0x[0-9a-f]+ ' <<<"$out" || fail "no rkey from the C program"
out=$("$work/cpp/hello_cpp" "$sock") || { cat "$work/regcached.log"; fail "the C++ program failed"; }
echo "$out"
grep -qE '^c\+\+: session=[0-9]+ rkey=0x[0-9a-f]+$' <<<"$out" || fail "no rkey from the C++ program"
out=$("$work/cpp/coexist" "$sock") || { cat "$work/regcached.log"; fail "the program with its own google.rpc failed"; }
echo "$out"
[ "$out" = "coexist: own google.rpc.Status code=5; Sessions refused with ADMIN_REQUIRED" ] ||
  fail "coexist printed '$out'"
# The programs resolved the installed library, not the build tree's.
# (ldd's output taken whole first: `ldd | grep -q` under pipefail fails when grep stops reading
# early and ldd dies of SIGPIPE.)
loaded=$(ldd "$work/hello_c")
grep -qF "$libdir/libregcache.so.0" <<<"$loaded" || fail "hello_c did not load $lib"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" -eq 0 ] || { cat "$work/regcached.log"; fail "regcached exited $rc after SIGTERM"; }
echo "install: ok"
