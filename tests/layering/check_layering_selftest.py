#!/usr/bin/env python3
"""Proves check_layering.py catches violations: builds small trees with known defects in a
temporary folder and asserts on the checker's verdict and message."""
import os
import subprocess
import sys
import tempfile

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_layering.py")
TABLE = """
set(REGCACHE_ALLOWED_base "")
set(REGCACHE_ALLOWED_umr "base")
set(REGCACHE_ALLOWED_hca "base;umr")
set(REGCACHE_ALLOWED_hca_sim "base;umr;hca")
set(REGCACHE_ALLOWED_hca_mlx5 "base;umr;hca")
set(REGCACHE_ALLOWED_cache "base;umr;hca")
set(REGCACHE_ALLOWED_odp "base;umr;hca;cache")
set(REGCACHE_ALLOWED_service "base;umr;hca;cache;odp;protocol")
set(REGCACHE_ALLOWED_protocol "base")
set(REGCACHE_ALLOWED_client "base;protocol")
set(REGCACHE_ALLOWED_server "base;umr;hca;cache;service;protocol")
set(REGCACHE_ALLOWED_tools "base;protocol;client")
"""


def run(files):
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "cmake"))
        with open(os.path.join(root, "cmake", "Regcache.cmake"), "w") as f:
            f.write(TABLE)
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
        return p.returncode, p.stdout


failures = []


def expect(name, files, code, needle=None):
    rc, out = run(files)
    if rc != code or (needle is not None and needle not in out):
        failures.append(f"{name}: rc={rc} (want {code}), output:\n{out}")


expect("clean tree passes", {
    "base/a.h": '#include "base/b.h"\n#include <vector>\n',
    "umr/w.h": '#include "base/a.h"\n',
    "hca/sim/s.cc": '#include "hca/device.h"\n#include "umr/w.h"\n',
    "cache/c_test.cc": '#include "hca/sim/sim.h"\n',  # tests may use the sim fake
    "hca/mlx5/m.cc": "#include <infiniband/mlx5dv.h>\n",
    "server/g.cc": '#include <grpcpp/grpcpp.h>\n#include "regcache/v1/regcache.pb.h"\n',
    "server/daemon_main.cc": '#include "hca/sim/sim_device.h"\n',  # composition root
}, 0, "layering: clean")
expect("backend from library code is caught", {"server/server.cc": '#include "hca/sim/sim_device.h"\n'},
       1, "'server' may not include 'hca/sim/sim_device.h'")
expect("upward include is caught", {"umr/w.h": '#include "cache/pool.h"\n'},
       1, "umr/w.h:1: 'umr' may not include 'cache/pool.h'")
expect("sibling backend include is caught", {"hca/mlx5/m.cc": '#include "hca/sim/sim.h"\n'},
       1, "'hca/mlx5' may not include 'hca/sim/sim.h'")
expect("backend from cache library code is caught", {"cache/pool.cc": '#include "hca/sim/sim.h"\n'},
       1, "'cache' may not include 'hca/sim/sim.h'")
expect("rdma-core outside a backend is caught", {"cache/c.cc": "#include <infiniband/verbs.h>\n"},
       1, "rdma-core belongs to hca/mlx5, hca/verbs and hca/mlx5emu only")
expect("grpc below api is caught", {"cache/c.cc": "#include <grpcpp/grpcpp.h>\n"},
       1, "gRPC and protobuf belong to protocol/, client/, server/ and tools/ only")
expect("protobuf generated header below api is caught", {"hca/h.h": '#include "api/x.pb.h"\n'},
       1, "gRPC and protobuf belong to protocol/, client/, server/ and tools/ only")

expect("another folder's internal header is refused", {
    "cache/internal/x.h": "",
    "server/a.cc": '#include "cache/internal/x.h"\n',
}, 1, "internal to 'cache'")

expect("a folder's own internal header and its tests are fine", {
    "cache/internal/x.h": "",
    "cache/c.cc": '#include "cache/internal/x.h"\n',
    "cache/internal/x_test.cc": '#include "cache/internal/x.h"\n',
}, 0)

expect("the public client includes nothing of the daemon", {
    "include/regcache/client.h": '#include "cache/reg_cache.h"\n#include "absl/status/status.h"\n',
    "cache/reg_cache.h": "",
}, 1, "the public client may not include 'cache/reg_cache.h'")

# The two towers: the client speaks the protocol and needs base/, nothing of the daemon.
expect("the client tower over the protocol is clean", {
    "protocol/shm_protocol.h": '#include "base/a.h"\n',
    "client/ring_client.cc": '#include "protocol/shm_protocol.h"\n#include <grpcpp/grpcpp.h>\n',
    "client/client_pd.cc": "#include <infiniband/verbs.h>\n",
    "tools/ctl_main.cc": '#include "protocol/shm_protocol.h"\n',
    "server/grpc.cc": '#include "protocol/shm_protocol.h"\n#include "service/daemon.h"\n',
}, 0, "layering: clean")
for daemon_header in ("service/daemon.h", "cache/reg_cache.h", "odp/servicer.h", "hca/device.h",
                      "umr/wqe.h"):
    folder = daemon_header.split("/")[0]
    expect(f"a client file that includes {daemon_header} is refused", {
        "client/client.cc": f'#include "{daemon_header}"\n',
    }, 1, f"'client' may not include '{daemon_header}' (folder '{folder}')")
expect("a client test may not use the sim either", {
    "client/grant_cache_test.cc": '#include "hca/sim/sim_device.h"\n',
}, 1, "'client' may not include 'hca/sim/sim_device.h'")
expect("the protocol depends on base only", {
    "protocol/ring_codec.h": '#include "cache/reg_cache.h"\n',
}, 1, "'protocol' may not include 'cache/reg_cache.h'")
expect("the server may not include the client", {
    "server/control_server.cc": '#include "client/internal/ring_client.h"\n',
}, 1, "'server' may not include 'client/internal/ring_client.h'")
expect("a tool uses the client's public side, not its internals", {
    "client/internal/ring_client.h": "",
    "tools/ctl_main.cc": '#include "client/internal/ring_client.h"\n',
}, 1, "internal to 'client'")
expect("rdma-core in another client file is caught", {
    "client/client.cc": "#include <infiniband/verbs.h>\n",
}, 1, "rdma-core belongs to hca/mlx5, hca/verbs and hca/mlx5emu only")

# Rule 6: a folder's own headers use its vocabulary header, not its facade.
expect("an internal header including its folder's facade is refused", {
    "cache/reg_cache.h": "",
    "cache/internal/index.h": '#include "cache/reg_cache.h"\n',
}, 1, "may not include its facade 'cache/reg_cache.h'")
expect("the vocabulary header, and the facade from a source file, are fine", {
    "cache/reg_cache.h": '#include "cache/types.h"\n',
    "cache/types.h": "",
    "cache/internal/index.h": '#include "cache/types.h"\n',
    "cache/reg_cache.cc": '#include "cache/reg_cache.h"\n',
}, 0, "layering: clean")

if failures:
    print("\n".join(failures))
    print(f"{len(failures)} passed-wrongly/failed case(s)")
    sys.exit(1)
print("check_layering selftest: all cases behave")
