#!/usr/bin/env python3
"""The owner's side of docs/integrating.md, in Python: keeps a "KV cache" in regcache memory,
hands a remote peer a descriptor of one key, checks that the peer's RDMA write landed, then
revokes the key. The conversation with the peer (stdin/stdout, one line per message) is the one
kv_owner.cc describes, so either side may be the C++ or the Python program.

Usage: kv_owner.py [socket_dir]   (default: $REGCACHE_SOCKET_DIR, else /run/regcache)
"""
import sys

import regcache


def expect(word):
    parts = sys.stdin.readline().split()
    if not parts or parts[0] != word:
        sys.exit(f"kv_owner.py: expected {word!r} from the peer, got {parts!r}")
    return parts[1:]


def main():
    with regcache.Client(sys.argv[1] if len(sys.argv) > 1 else None) as c:
        # 1. The KV cache: 1 MiB of daemon memory mapped here, a key a peer may write and read.
        cache = c.allocate(1 << 20)
        key = c.register(cache.data, cache.length,
                         regcache.LOCAL_READ | regcache.LOCAL_WRITE |
                         regcache.REMOTE_READ | regcache.REMOTE_WRITE)

        # 2. The peer's queue pair, and a target endpoint of ours connected to it.
        qpn, psn, gid, mtu = expect("qp")
        peer = regcache.QpAddress(int(qpn), int(psn), bytes.fromhex(gid), 0, int(mtu))
        ep = c.create_endpoint(peer, regcache.REMOTE_READ | regcache.REMOTE_WRITE)

        # 3. The descriptor: the key, the NIC, and our queue pair for the peer to connect to.
        print("descriptor", c.describe(key, ep).to_text(), flush=True)

        # 4. The peer wrote into the cache, with no call of ours in between.
        offset, length = (int(x) for x in expect("written"))
        landed = bytes(cache.buffer()[offset:offset + length])
        print(f"kv_owner.py: the peer's write landed: {landed!r}", file=sys.stderr)
        if not landed.startswith(b"block"):
            sys.exit("kv_owner.py: the peer's bytes are not in the cache")

        # 5. Revoke: from here on no peer can use the key, whatever descriptors exist.
        c.invalidate(key)
        c.release(key)
        print("revoked", flush=True)

        # 6. The peer's next write must have failed, for the key's sake (not the endpoint's).
        (code,) = expect("refused")
        if code == "NOT_FOUND":
            sys.exit("kv_owner.py: the peer lost the endpoint, not the key")
        print(f"kv_owner.py: the peer's write after the revocation was refused ({code})",
              file=sys.stderr)


if __name__ == "__main__":
    main()
