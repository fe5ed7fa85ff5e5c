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
#      copies abort at load);
#   6. the registered allocator: a C program built with `pkg-config ... regcache_alloc` and a C++
#      one through regcache::alloc allocate, register and free against the installed daemon,
#      with jemalloc as the process's malloc (as regcache_alloc.h says);
#   7. the Python package: pip-installed offline from the install tree into a fresh virtual
#      environment, its version the project's, it loads the installed library and registers,
#      describes, revokes (callback) and releases against the installed daemon; and the copy in
#      the prefix's dist-packages imports as it is.
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
         include/regcache/descriptor.h include/regcache/sim_peer.h \
         include/regcache/regcache_alloc.h \
         lib/systemd/system/regcached.service etc/regcache/regcached.conf \
         share/regcache/python/pyproject.toml share/regcache/python/regcache/_installed.py; do
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
alloc_lib=$libdir/libregcache_alloc.so
[ -e "$alloc_lib" ] || fail "libregcache_alloc.so not next to libregcache.so"
alloc_needs=$(ldd "$alloc_lib")
grep -q 'libjemalloc' <<<"$alloc_needs" || fail "libregcache_alloc.so does not need jemalloc"
if grep -E 'not found' <<<"$alloc_needs"; then fail "libregcache_alloc.so misses a library"; fi
alloc_exports=$(nm -D --defined-only "$alloc_lib" | awk '$2 == "T" {print $3}' | sort | tr '\n' ' ')
[ "$alloc_exports" = "regcache_alloc_fini regcache_alloc_info regcache_alloc_init regcache_free regcache_malloc regcache_malloc_key " ] ||
  fail "libregcache_alloc.so exports '$alloc_exports'"
echo "libregcache.so: client only ($(wc -l <"$work/symbols") regcache:: symbols), SONAME $soname"

# 3. Build outside the tree against the installed files only.
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs regcache) || fail "pkg-config does not find regcache"
echo "pkg-config --cflags --libs regcache: $flags"
# shellcheck disable=SC2086  # the flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic-errors "$here/hello.c" -o "$work/hello_c" $flags
alloc_flags=$(pkg-config --cflags --libs regcache_alloc) || fail "pkg-config does not find regcache_alloc"
echo "pkg-config --cflags --libs regcache_alloc: $alloc_flags"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror "$here/hello_alloc.c" -o "$work/hello_alloc" $alloc_flags -ldl
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
for prog in "$work/hello_alloc" "$work/cpp/hello_alloc_cmake"; do
  out=$("$prog" "$sock") || { cat "$work/regcached.log"; fail "$(basename "$prog") failed"; }
  echo "$out"
  grep -qE '^alloc: rkey=0x[0-9a-f]+ malloc=libjemalloc\.so' <<<"$out" ||
    fail "$(basename "$prog") printed '$out' (want an rkey and jemalloc as malloc)"
done
# The programs resolved the installed library, not the build tree's.
# (ldd's output taken whole first: `ldd | grep -q` under pipefail fails when grep stops reading
# early and ldd dies of SIGPIPE.)
loaded=$(ldd "$work/hello_c")
grep -qF "$libdir/libregcache.so.0" <<<"$loaded" || fail "hello_c did not load $lib"
loaded=$(ldd "$work/hello_alloc")
grep -qF "$libdir/libregcache_alloc.so.0" <<<"$loaded" || fail "hello_alloc did not load $alloc_lib"

# 6. The Python package, as a user installs it: a virtual environment, pip with no index. The
# environment sees the system's packages for the build's setuptools and wheel (Debian's
# python3-setuptools, python3-wheel: pip builds without fetching them); Debian's interpreter,
# whose packages those are.
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
"$python" -m venv --system-site-packages "$work/venv" >"$work/venv.log" 2>&1 || {
  cat "$work/venv.log"; fail "python3 -m venv failed (Debian: python3-venv)"; }
"$work/venv/bin/pip" install --no-build-isolation --no-index "$prefix/share/regcache/python" \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; fail "pip install of the Python package failed"; }
want_version=$(sed -n 's/^project(regcache VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
shown=$(cd "$work" && env -u REGCACHE_LIB -u LD_LIBRARY_PATH -u PYTHONPATH \
        "$work/venv/bin/pip" show regcache) || fail "pip does not show the regcache package"
grep -qx "Version: $want_version" <<<"$shown" || fail "the pip package's version is not $want_version"
out=$(cd "$work" && env -u REGCACHE_LIB -u LD_LIBRARY_PATH -u PYTHONPATH \
      "$work/venv/bin/python" "$here/hello.py" "$sock" "$prefix") || {
  cat "$work/regcached.log"; fail "the Python program failed in the virtual environment"; }
echo "$out"
[ "$out" = "python: version=$want_version rkey=${out#*rkey=}" ] && grep -q " revoked$" <<<"$out" ||
  fail "the Python program printed '$out'"
site=$(find "$prefix/lib" -path '*dist-packages/regcache/__init__.py' | head -1)
[ -n "$site" ] || fail "the Python package is not under the prefix's dist-packages"
(cd "$work" && env -u REGCACHE_LIB -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$(dirname "$site")")" \
  "$python" -c "import regcache, sys; sys.exit(not regcache.library_path.startswith('$prefix'))") ||
  fail "the package in the prefix's dist-packages does not load the installed library"

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" -eq 0 ] || { cat "$work/regcached.log"; fail "regcached exited $rc after SIGTERM"; }
echo "install: ok"
