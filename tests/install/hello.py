"""The installed Python package at work (tests/install): from a virtual environment it was
pip-installed into, against the installed regcached — register, describe for a peer, revoke
(seen by the revocation callback), release. Prints one line; exits non-zero on any failure."""
import sys
import threading

import regcache


def main():
    socket_dir, prefix = sys.argv[1], sys.argv[2]
    if not regcache.library_path.startswith(prefix):
        sys.exit(f"hello.py: loaded {regcache.library_path}, not the installed library")
    with regcache.Client(socket_dir) as c:
        mem = c.allocate(1 << 20)
        key = c.register(mem.data, 4096, regcache.LOCAL_READ | regcache.LOCAL_WRITE |
                         regcache.REMOTE_READ | regcache.REMOTE_WRITE)
        text = c.describe(key).to_text()
        if regcache.Descriptor.from_text(text).rkey != key.rkey:
            sys.exit("hello.py: the descriptor does not round-trip")
        revoked = threading.Event()
        c.on_revoke(lambda r: revoked.set() if r.handle == key.handle else None)
        c.invalidate(key)
        if not revoked.wait(10):
            sys.exit("hello.py: no revocation callback within 10 s")
        c.release(key)
        print(f"python: version={regcache.__version__} rkey=0x{key.rkey:x} "
              f"descriptor={text[:5]} revoked")


if __name__ == "__main__":
    main()
