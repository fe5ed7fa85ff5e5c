#!/usr/bin/env python3
"""Checks the #include graph of the source tree against the layering of docs/architecture.md.

The allowed dependencies are read from cmake/Regcache.cmake (the REGCACHE_ALLOWED_<folder>
lines), so the build and this check share one table. Rules:

  1. A file in folder F may include "G/..." only if G is F or G is in F's allowed list.
     Test files (*_test.cc, test_util.h) of a folder that may use hca/ may also include
     hca/sim: the software HCA is the project's fake. (The client tower may not: its tests
     reach a daemon through tests/e2e.) A binary's main (*_main.cc) may include every backend: it is where the
     backends are registered (hca/backend.h explains why registration is explicit).
  2. Only hca/mlx5, hca/verbs and the emulated ConnectX behind their entry points
     (hca/mlx5emu) may include <infiniband/...> (rdma-core), and the one client
     source that imports a session's PD into the client's process (client/client_pd.cc,
     docs/client_memory.md): that is libibverbs by definition.
  3. Only the two towers and the protocol between them (protocol/, client/, server/, tools/)
     may include gRPC or protobuf headers.
  4. A folder's internal/ headers are its own: "F/internal/..." may be included only from F
     (its sources and its tests). Other folders use F's public headers (regcache_library's
     PUBLIC_HEADERS in cmake/Regcache.cmake).
  5. The client's public headers (include/regcache/) include nothing of the project but each
     other: an application gets the client, not the daemon.
  6. No header of a folder includes that folder's facade (FACADES): what the folder's own
     headers share lives in its vocabulary header (cache/types.h, service/types.h,
     hca/sim/sim_options.h, hca/verbs/verbs_options.h, odp/types.h). The exceptions: a header
     that implements the facade's interface (FACADE_IMPLEMENTERS), and test helpers
     (test_util.h), which build the facade for tests.

bench/, tests/ and deploy/ sit on top of everything and are not checked.
Usage: check_layering.py <source-root>     exit 0 = clean, 1 = violations (listed), 2 = usage.
"""
import os
import re
import sys

SOURCE_EXT = (".h", ".cc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
ALLOWED_RE = re.compile(r'^\s*set\(REGCACHE_ALLOWED_(\w+)\s+"([^"]*)"\)', re.M)
RDMA_CORE_FOLDERS = {"hca/mlx5", "hca/verbs", "hca/mlx5emu"}
RDMA_CORE_FILES = {"client/client_pd.cc"}
BACKENDS = {"hca/sim", "hca/mlx5", "hca/verbs"}
RPC_FOLDERS = {"protocol", "client", "server", "tools"}
RPC_PREFIXES = ("grpc/", "grpcpp/", "grpc++/", "google/protobuf/")
FACADES = {
    "cache": "cache/reg_cache.h",
    "service": "service/daemon.h",
    "odp": "odp/servicer.h",
    "hca/sim": "hca/sim/sim_device.h",
    "hca/mlx5": "hca/mlx5/mlx5_device.h",
    "hca/verbs": "hca/verbs/verbs_device.h",
}
# Headers that define the facade's implementation and so must see its interface.
FACADE_IMPLEMENTERS = {"odp/internal/servicer_impl.h"}


def load_table(root):
    path = os.path.join(root, "cmake", "Regcache.cmake")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    table = {}
    for key, deps in ALLOWED_RE.findall(text):
        folder = key.replace("_", "/")
        table[folder] = set(d for d in deps.split(";") if d)
    if not table:
        raise SystemExit(f"{path}: no REGCACHE_ALLOWED_* lines found")
    return table


def folder_of(path, folders):
    """Longest folder that is a prefix of `path` ("hca/sim/x.h" -> "hca/sim")."""
    best = None
    for f in folders:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def sources(root, top):
    """(relative path, file name) of every C++ source under root/top, sorted per folder."""
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for name in sorted(files):
            if name.endswith(SOURCE_EXT):
                yield os.path.relpath(os.path.join(dirpath, name), root), name


def includes(root, rel):
    """(line number, quote or angle, included path) of every #include in root/rel."""
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if m:
                yield lineno, m.group(1), m.group(2)


def check_include(where, own, allowed, quote, inc, folders):
    """The problems with one #include of a file in folder `own` (rules 1-4)."""
    problems = []
    if (inc.startswith("infiniband/") and own not in RDMA_CORE_FOLDERS and
            where.rsplit(":", 1)[0] not in RDMA_CORE_FILES):
        problems.append(f"{where}: '{own}' may not include <{inc}>: "
                        "rdma-core belongs to hca/mlx5, hca/verbs and hca/mlx5emu only")
    if inc.startswith(RPC_PREFIXES) or inc.endswith((".pb.h", ".grpc.pb.h")):
        if own not in RPC_FOLDERS:
            problems.append(f"{where}: '{own}' may not include '{inc}': "
                            "gRPC and protobuf belong to protocol/, client/, server/ and tools/ only")
    target = folder_of(inc, folders)
    if quote != '"' or target is None:
        return problems
    if target != own and inc.startswith(target + "/internal/"):
        problems.append(f"{where}: '{own}' may not include '{inc}': internal to '{target}'")
    if target not in allowed:
        problems.append(f"{where}: '{own}' may not include '{inc}' (folder '{target}'); "
                        f"allowed: {', '.join(sorted(allowed))}")
    return problems


def check(root):
    table = load_table(root)
    folders = sorted(table)
    problems = []
    for folder in folders:
        if not os.path.isdir(os.path.join(root, folder)):
            continue
        for rel, name in sources(root, folder):
            own = folder_of(rel, folders)
            if own != folder:
                continue  # belongs to a nested folder, checked there
            allowed = table[own] | {own}
            if (name.endswith("_test.cc") or name.startswith("test_util.")) and "hca" in allowed:
                allowed = allowed | {"hca/sim"}
            if name.endswith("_main.cc"):  # a binary's composition root links backends
                allowed = allowed | BACKENDS
            for lineno, quote, inc in includes(root, rel):
                problems += check_include(f"{rel}:{lineno}", own, allowed, quote, inc, folders)
                facade = FACADES.get(own)
                if (quote == '"' and inc == facade and rel.endswith(".h") and rel != facade
                        and rel not in FACADE_IMPLEMENTERS and name != "test_util.h"):
                    problems.append(f"{rel}:{lineno}: a header of '{own}' may not include its "
                                    f"facade '{facade}': use the folder's vocabulary header")
    problems.extend(check_public_client(root, folders))
    return problems


def check_public_client(root, folders):
    """Rule 5: include/regcache/ headers include only each other (and libraries)."""
    problems = []
    if not os.path.isdir(os.path.join(root, "include", "regcache")):
        return problems
    for rel, _ in sources(root, os.path.join("include", "regcache")):
        for lineno, quote, inc in includes(root, rel):
            if quote == '"' and folder_of(inc, folders) is not None:
                problems.append(f"{rel}:{lineno}: the public client may not include '{inc}': "
                                "only include/regcache/ headers")
    return problems


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} violation(s)")
        return 1
    print("layering: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
