#!/usr/bin/env python3
"""Checks the #include graph of the source tree against the layering of docs/architecture.md.

The allowed dependencies are read from cmake/Regcache.cmake (the REGCACHE_ALLOWED_<folder>
lines), so the build and this check share one table. Rules:

  1. A file in folder F may include "G/..." only if G is F or G is in F's allowed list.
     Test files (*_test.cc, test_util.h) may also include hca/sim: the software HCA is the
     project's fake. A binary's main (*_main.cc) may include every backend: it is where the
     backends are registered (hca/backend.h explains why registration is explicit).
  2. Only hca/mlx5 and hca/verbs may include <infiniband/...> (rdma-core).
  3. Only api/ may include gRPC or protobuf headers.
  4. A folder's internal/ headers are its own: "F/internal/..." may be included only from F
     (its sources and its tests). Other folders use F's public headers (regcache_library's
     PUBLIC_HEADERS in cmake/Regcache.cmake).
  5. The client's public headers (include/regcache/) include nothing of the project but each
     other: an application gets the client, not the daemon.

bench/, tests/ and deploy/ sit on top of everything and are not checked.
Usage: check_layering.py <source-root>     exit 0 = clean, 1 = violations (listed), 2 = usage.
"""
import os
import re
import sys

SOURCE_EXT = (".h", ".cc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
ALLOWED_RE = re.compile(r'^\s*set\(REGCACHE_ALLOWED_(\w+)\s+"([^"]*)"\)', re.M)
RDMA_CORE_FOLDERS = {"hca/mlx5", "hca/verbs"}
BACKENDS = {"hca/sim", "hca/mlx5", "hca/verbs"}
RPC_FOLDERS = {"api"}
RPC_PREFIXES = ("grpc/", "grpcpp/", "grpc++/", "google/protobuf/")


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


def check(root):
    table = load_table(root)
    folders = sorted(table)
    problems = []
    for folder in folders:
        top = os.path.join(root, folder)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                own = folder_of(rel, folders)
                if own != folder:
                    continue  # belongs to a nested folder, checked there
                allowed = table[own] | {own}
                if name.endswith("_test.cc") or name.startswith("test_util."):
                    allowed = allowed | {"hca/sim"}
                if name.endswith("_main.cc"):  # a binary's composition root links backends
                    allowed = allowed | BACKENDS
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        inc = m.group(2)
                        where = f"{rel}:{lineno}"
                        if inc.startswith("infiniband/") and own not in RDMA_CORE_FOLDERS:
                            problems.append(f"{where}: '{own}' may not include <{inc}>: "
                                            "rdma-core belongs to hca/mlx5 and hca/verbs only")
                        if inc.startswith(RPC_PREFIXES) or inc.endswith((".pb.h", ".grpc.pb.h")):
                            if own not in RPC_FOLDERS:
                                problems.append(f"{where}: '{own}' may not include '{inc}': "
                                                "gRPC and protobuf belong to api/ only")
                        target = folder_of(inc, folders)
                        if (m.group(1) == '"' and target is not None and target != own
                                and inc.startswith(target + "/internal/")):
                            problems.append(f"{where}: '{own}' may not include '{inc}': "
                                            f"internal to '{target}'")
                        if m.group(1) == '"' and target is not None and target not in allowed:
                            problems.append(
                                f"{where}: '{own}' may not include '{inc}' (folder '{target}'); "
                                f"allowed: {', '.join(sorted(allowed))}")
    problems.extend(check_public_client(root, folders))
    return problems


def check_public_client(root, folders):
    """Rule 5: include/regcache/ headers include only each other (and libraries)."""
    problems = []
    top = os.path.join(root, "include", "regcache")
    if not os.path.isdir(top):
        return problems
    for dirpath, _, files in os.walk(top):
        for name in sorted(files):
            if not name.endswith(SOURCE_EXT):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            with open(full, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE_RE.match(line)
                    if m and m.group(1) == '"' and folder_of(m.group(2), folders) is not None:
                        problems.append(f"{rel}:{lineno}: the public client may not include "
                                        f"'{m.group(2)}': only include/regcache/ headers")
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
