#!/usr/bin/env python3
"""The peer's side of docs/integrating.md, in Python: receives a descriptor of the owner's key,
connects to the owner's endpoint, RDMA-writes into the owner's KV cache, and finds its next
write refused once the owner revoked the key. On the sim the remote node is simulated by the
daemon: this process opens a session only so its writes have a NIC to leave from.

Usage: kv_peer.py [socket_dir]
"""
import os
import sys

import regcache


def expect(word):
    parts = sys.stdin.readline().split()
    if not parts or parts[0] != word:
        sys.exit(f"kv_peer.py: expected {word!r} from the owner, got {parts!r}")
    return parts[1:]


def main():
    with regcache.Client(sys.argv[1] if len(sys.argv) > 1 else None) as nic:
        # 1. Our RC queue pair's address (on real hardware: ibv_create_qp, ibv_query_gid).
        me = regcache.QpAddress(0x20000 + os.getpid() % 0x10000, 0x1234,
                                bytes([0xFE, 0x80] + [0] * 13 + [0x2B]), 0, 4096)
        print("qp", me.qpn, me.psn, me.gid.hex(), me.mtu, flush=True)

        # 2. The owner's descriptor; connect our queue pair to its endpoint.
        d = regcache.Descriptor.from_text(expect("descriptor")[0])
        if not d.access & regcache.REMOTE_WRITE or d.endpoint is None:
            sys.exit("kv_peer.py: the key cannot be written through an endpoint")

        # 3. RDMA WRITE into the owner's cache, 4 KiB in.
        block = b"block 9 of layer 1: written from Python"
        nic.sim_peer_write(d, me, d.addr + 4096, block)
        print("written", 4096, len(block), flush=True)

        # 4. After the owner revoked the key, the same write must fail.
        expect("revoked")
        try:
            nic.sim_peer_write(d, me, d.addr + 4096, b"stale write")
        except regcache.RegcacheError as e:
            print(f"kv_peer.py: the write after the revocation failed, as it must: {e}",
                  file=sys.stderr)
            print("refused", e.code_name, flush=True)
            return
        sys.exit("kv_peer.py: a write with the revoked key succeeded")


if __name__ == "__main__":
    main()
