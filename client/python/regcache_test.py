"""Tests of the Python module (client/python/regcache) against a real regcached on the simulated
device, started here in a temp socket dir (REGCACHED names the binary; REGCACHE_LIB the
libregcache.so to load). Standard library only: python3 regcache_test.py [-v]."""
import ctypes
import os
import sys
import threading
import time
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "e2e"))
import regcache  # noqa: E402
from regcached_process import Regcached  # noqa: E402

RW = regcache.LOCAL_READ | regcache.LOCAL_WRITE | regcache.REMOTE_READ | regcache.REMOTE_WRITE


def Daemon(*flags):
    """regcached on the sim (REGCACHED; tests/e2e/regcached_process.py)."""
    binary = os.environ.get("REGCACHED")
    if not binary:
        raise unittest.SkipTest("REGCACHED (the regcached binary) is not set")
    return Regcached(binary, *flags)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def setUp(self):
        self.client = regcache.Client(self.daemon.dir, call_timeout_ms=5000)
        self.mem = self.client.allocate(4 << 20)

    def tearDown(self):
        self.client.close()

    def assertCode(self, code, fn, *args, **kwargs):
        with self.assertRaises(regcache.RegcacheError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code, code, str(cm.exception))
        self.assertTrue(cm.exception.message, "an error carries a message")
        return cm.exception

    def test_constants_match_the_c_abi(self):
        self.assertEqual((regcache.LOCAL_READ, regcache.LOCAL_WRITE, regcache.REMOTE_READ,
                          regcache.REMOTE_WRITE, regcache.REMOTE_ATOMIC), (1, 2, 4, 8, 16))
        lib = regcache._lib
        for name in ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED",
                     "OUT_OF_RANGE", "FAILED_PRECONDITION", "UNAVAILABLE", "UNAUTHENTICATED"):
            self.assertEqual(lib.regcache_code_name(getattr(regcache, name)).decode(), name)

    def test_connect_to_no_daemon_is_unavailable(self):
        e = self.assertCode(regcache.UNAVAILABLE, regcache.Client, "/nonexistent-regcache-dir")
        self.assertEqual(e.code_name, "UNAVAILABLE")

    def test_no_socket_dir_means_regcache_socket_dir(self):
        old = os.environ.get("REGCACHE_SOCKET_DIR")
        try:
            os.environ["REGCACHE_SOCKET_DIR"] = self.daemon.dir
            with regcache.Client(call_timeout_ms=5000) as c:
                self.assertEqual(c.device.name, "sim0")
            os.environ["REGCACHE_SOCKET_DIR"] = "/nonexistent-regcache-env-dir"
            e = self.assertCode(regcache.UNAVAILABLE, regcache.Client)
            self.assertIn("regcache-env-dir", e.message)
        finally:
            if old is None:
                os.environ.pop("REGCACHE_SOCKET_DIR", None)
            else:
                os.environ["REGCACHE_SOCKET_DIR"] = old

    def test_the_session_names_its_device(self):
        d = self.client.device
        self.assertEqual((d.index, d.name, d.port), (0, "sim0", 1))
        self.assertNotEqual(d.node_guid, 0)
        self.assertEqual(len(d.gid), 16)
        self.assertEqual(d.key_bounds, "key")  # the sim checks a key's own range
        self.assertTrue(d.key_range_enforced)
        with regcache.Client(self.daemon.dir, device="sim0") as named:
            self.assertEqual(named.device, d)
        e = self.assertCode(regcache.NOT_FOUND, regcache.Client, self.daemon.dir, device="sim9")
        self.assertIn("sim0", e.message, "the refusal lists the daemon's devices")

    def test_memory_is_mapped_here(self):
        self.assertGreater(self.client.session_id, 0)
        self.assertEqual(self.mem.length, 4 << 20)
        buf = self.mem.buffer()
        buf[100:105] = b"hello"
        self.assertEqual(ctypes.string_at(self.mem.data + 100, 5), b"hello")

    def test_register_window_query_invalidate_release(self):
        addr = self.mem.data + 3 * 4096
        k1 = self.client.register(addr, 65536, RW)
        self.assertNotEqual(k1.handle, 0)
        self.assertFalse(k1.hit)
        self.assertEqual(k1.access & RW, RW)
        self.assertLessEqual(k1.va, addr)
        self.assertGreaterEqual(k1.va + k1.length, addr + 65536)
        k2 = self.client.register(addr + 4096, 4096, regcache.LOCAL_READ)
        self.assertTrue(k2.hit)
        self.assertEqual(k2.rkey, k1.rkey)

        w = self.client.window(k1, 4096, 8192, regcache.LOCAL_READ)
        self.assertEqual(w.length, 8192)
        info = self.client.query(w)
        self.assertTrue(info.is_window)
        self.assertEqual(info.parent, k1.handle)
        self.assertFalse(info.revoked)
        self.assertTrue(info.key_state)

        usage = self.client.usage()
        self.assertEqual(usage.backings, 1)
        self.assertEqual(usage.backed_bytes, self.mem.length)
        self.assertGreaterEqual(usage.live_registrations, 1)

        self.client.invalidate(k1)
        self.assertTrue(self.client.query(k1.handle).revoked)
        self.client.release(w)
        self.client.release(k2)
        self.client.release(k1)
        self.assertCode(regcache.NOT_FOUND, self.client.query, k1)
        self.assertCode(regcache.NOT_FOUND, self.client.release, k1)

    def test_errors_map_to_their_codes(self):
        e = self.assertCode(regcache.INVALID_ARGUMENT, self.client.allocate, 0)
        self.assertEqual(e.reason, "", "a bad argument has no reason beyond its code")
        self.assertCode(regcache.INVALID_ARGUMENT, self.client.register, self.mem.data, 0, RW)
        e = self.assertCode(regcache.INVALID_ARGUMENT, self.client.register, None, 4096, RW)
        self.assertIn("addr", e.message)
        self.assertCode(regcache.INVALID_ARGUMENT, self.client.register, self.mem.data, 4096, RW,
                        prefetch=9)
        outside = ctypes.create_string_buffer(8192)
        self.assertCode(regcache.OUT_OF_RANGE, self.client.register, outside, 4096, RW)
        self.assertCode(regcache.NOT_FOUND, self.client.query, 0xdead0000)
        self.assertCode(regcache.NOT_FOUND, self.client.detach,
                        regcache.Memory(0xdead0000, 0, 4096))
        # The session still works after all of that.
        self.client.release(self.client.register(self.mem, 4096, RW))

    def test_the_daemon_reason_reaches_python(self):
        # A quota of 8 MiB: the second 4 MiB arena of a session fits, a third does not (over
        # gRPC). Two keys: a third register is refused over the fast path's rings.
        small = Daemon("--max_bytes_per_session=8388608", "--max_keys_per_session=2")
        try:
            client = regcache.Client(small.dir, call_timeout_ms=5000)
            try:
                mem = client.allocate(4 << 20)
                client.allocate(4 << 20)
                e = self.assertCode(regcache.RESOURCE_EXHAUSTED, client.allocate, 4 << 20)
                self.assertEqual(e.reason, "MEMORY_QUOTA_EXCEEDED", e)
                client.register(mem, 4096, RW)
                client.register(mem.data + 8192, 4096, RW)
                e = self.assertCode(regcache.RESOURCE_EXHAUSTED, client.register,
                                    mem.data + 16384, 4096, RW)
                self.assertEqual(e.reason, "KEY_QUOTA_EXCEEDED", e)
            finally:
                client.close()
        finally:
            small.stop()

    def test_registered_context_releases(self):
        with self.client.registered(self.mem, 8192, RW) as key:
            self.assertEqual(self.client.query(key).holders, 1)
        # Released: the library keeps the grant (one daemon hold), so the same register again is
        # answered in this process.
        self.assertEqual(self.client.query(key).holders, 1)
        again = self.client.register(self.mem, 8192, RW)
        self.assertTrue(again.hit)
        self.assertEqual(again.rkey, key.rkey)
        self.client.release(again)

    def test_batches_and_reregister(self):
        items = [(self.mem.data + i * 4096, 4096, RW) for i in range(8)] + [(self.mem, 0, RW)]
        got = self.client.register_batch(items)
        self.assertEqual(len(got), 9)
        keys = got[:8]
        for k in keys:
            self.assertIsInstance(k, regcache.Key)
        self.assertIsInstance(got[8], regcache.RegcacheError)
        self.assertEqual(got[8].code, regcache.INVALID_ARGUMENT)
        self.assertEqual(self.client.release_batch(keys), [regcache.OK] * 8)
        # Grown in place: this process holds it alone and only adds.
        k = self.client.register(self.mem.data + 64 * 4096, 4096, regcache.LOCAL_WRITE)
        grown = self.client.reregister(k, self.mem.data + 64 * 4096, 8192, RW)
        self.assertTrue(grown.same_key)
        self.assertEqual(grown.rkey, k.rkey)
        self.client.release(grown)
        self.assertCode(regcache.INVALID_ARGUMENT, self.client.register_batch, [])

    def test_without_client_cache_release_reaches_the_daemon(self):
        with regcache.Client(self.daemon.dir, client_cache=False) as c:
            mem = c.allocate(1 << 20)
            with c.registered(mem, 8192, RW) as key:
                self.assertEqual(c.query(key).holders, 1)
            # Released: the daemon keeps the registration cached, but nobody holds it.
            self.assertEqual(c.query(key).holders, 0)
            self.assertEqual(c.usage().cached_unreferenced, 1)

    def test_attach_fd_and_detach(self):
        fd = os.memfd_create("regcache_test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, 1 << 20)
            m = self.client.attach_fd(fd, 0, 1 << 20)
        finally:
            os.close(fd)
        m.buffer()[0] = 7
        self.client.release(self.client.register(m.data, 4096, RW))
        self.assertEqual(self.client.usage().backings, 2)
        self.client.detach(m)
        self.assertEqual(self.client.usage().backings, 1)

    def test_attach_fd_takes_a_file_object(self):
        fd = os.memfd_create("regcache_test_file", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 1 << 16)
        with os.fdopen(fd, "r+b", buffering=0) as f:
            m = self.client.attach_fd(f, 0, 1 << 16)
        self.assertEqual(m.length, 1 << 16)
        self.client.detach(m)

    def test_a_buffer_in_attached_memory_is_registered_without_copying(self):
        m = self.client.allocate(1 << 16)
        view = m.buffer()[4096:8192]
        addr, length = regcache.buffer_address(view)
        self.assertEqual((addr, length), (m.data + 4096, 4096))
        k = self.client.register_buffer(view, RW)
        self.assertLessEqual(k.va, m.data + 4096)
        self.assertGreaterEqual(k.va + k.length, m.data + 8192)
        self.client.release(k)
        # A ctypes array over the same memory, and refusals.
        arr = (ctypes.c_uint8 * 4096).from_address(m.data + 8192)
        self.client.release(self.client.register_buffer(arr, RW))
        with self.assertRaises(ValueError):
            regcache.buffer_address(b"read-only bytes")
        with self.assertRaises(ValueError):
            regcache.buffer_address(memoryview(bytearray(64))[::2])  # not contiguous
        with self.assertRaises(regcache.RegcacheError) as e:
            self.client.register_buffer(bytearray(4096), RW)  # not attached memory
        self.assertEqual(e.exception.code, regcache.OUT_OF_RANGE)

    def test_endpoints(self):
        peer = regcache.QpAddress(0x1234, 0x4242, bytes([0xFE, 0x80] + [0] * 13 + [7]), 0, 1024)
        ep = self.client.create_endpoint(peer)
        self.assertNotEqual(ep.id, 0)
        self.assertNotEqual(ep.local.qpn, 0)
        self.assertEqual(len(ep.local.gid), 16)
        self.client.destroy_endpoint(ep)
        with self.assertRaises(regcache.RegcacheError) as e:
            self.client.destroy_endpoint(ep)
        self.assertEqual(e.exception.code, regcache.NOT_FOUND)
        with self.assertRaises(ValueError):
            self.client.create_endpoint(regcache.QpAddress(1, 0, b"short"))

    def test_descriptors(self):
        peer = regcache.QpAddress(0x77, 0, bytes([0xFE, 0x80] + [0] * 13 + [9]), 0, 1024)
        ep = self.client.create_endpoint(peer, regcache.REMOTE_WRITE)
        rw = (regcache.LOCAL_READ | regcache.LOCAL_WRITE | regcache.REMOTE_READ |
              regcache.REMOTE_WRITE)
        with self.client.registered(self.mem.data, 8192, rw) as key:
            d = self.client.describe(key, ep)
            self.assertEqual((d.rkey, d.addr, d.length), (key.rkey, key.va, key.length))
            self.assertEqual(d.access, regcache.REMOTE_WRITE)  # what the endpoint accepts
            dev = self.client.device
            self.assertEqual((d.node_guid, d.gid, d.port, d.key_bounds),
                             (dev.node_guid, dev.gid, dev.port, dev.key_bounds))
            self.assertEqual(d.endpoint, ep.local)
            packed = d.pack()
            self.assertEqual(len(packed), 96)
            self.assertEqual(packed[:4], b"RCKD")
            self.assertEqual(regcache.Descriptor.unpack(packed), d)
            text = d.to_text()
            self.assertTrue(text.startswith("rcd1:"))
            self.assertEqual(regcache.Descriptor.from_text(text), d)
            plain = self.client.describe(key)
            self.assertIsNone(plain.endpoint)
            self.assertEqual(len(plain.pack()), 64)
            self.assertEqual(plain.access, regcache.REMOTE_READ | regcache.REMOTE_WRITE)
        e = self.assertCode(regcache.INVALID_ARGUMENT, regcache.Descriptor.unpack, packed[:95])
        self.assertIn("truncated", e.message)
        newer = packed[:4] + bytes([2]) + packed[5:]
        self.assertCode(regcache.FAILED_PRECONDITION, regcache.Descriptor.unpack, newer)
        self.assertCode(regcache.INVALID_ARGUMENT, regcache.Descriptor.from_text, "rcd1:!")
        self.assertCode(regcache.INVALID_ARGUMENT, regcache.Descriptor.from_text, "hello")
        local_only = regcache.Descriptor(1, bytes(16), 1, "key", 5, 0x1000, 4096,
                                         regcache.LOCAL_READ)
        e = self.assertCode(regcache.INVALID_ARGUMENT, local_only.pack)
        self.assertIn("remote", e.message)
        with self.assertRaises(ValueError):
            regcache.Descriptor(1, b"short", 1, "key", 5, 0x1000, 4096,
                                regcache.REMOTE_READ).pack()
        self.client.destroy_endpoint(ep)

    def test_revocation_callback(self):
        seen = []
        arrived = threading.Event()

        def on_revoke(r):
            seen.append(r)
            arrived.set()

        self.client.on_revoke(on_revoke)
        rw = regcache.LOCAL_READ | regcache.LOCAL_WRITE
        key = self.client.register(self.mem.data + (1 << 20), 4096, rw)
        self.client.invalidate(key)
        self.assertTrue(arrived.wait(10), "no revocation callback within 10 s")
        self.assertEqual(seen[0].handle, key.handle)
        self.assertEqual(seen[0].reason, regcache.RevocationReason.INVALIDATED)
        self.assertNotEqual(seen[0].key, 0)
        self.client.release(key)
        # Removed: never called again; an exception in a callback does not reach the library.
        self.client.on_revoke(None)
        key = self.client.register(self.mem.data + (1 << 20), 8192, rw)
        self.client.invalidate(key)
        self.client.release(key)
        time.sleep(0.2)
        self.assertEqual(len(seen), 1)

    def test_version(self):
        self.assertEqual(regcache.__version__, os.environ.get("REGCACHE_VERSION",
                                                              regcache.__version__))
        self.assertRegex(regcache.__version__, r"^\d+\.\d+\.\d+$")

    def test_pd_import_on_the_sim_says_why_not(self):
        with self.assertRaises(regcache.RegcacheError) as e:
            self.client.import_pd()
        self.assertEqual(e.exception.code, regcache.UNIMPLEMENTED)
        # A session of its own device context is refused at connect, saying why.
        e = self.assertCode(regcache.UNIMPLEMENTED, regcache.Client, self.daemon.dir,
                            own_device_context=True)
        self.assertIn("cannot give a session", e.message)
        with self.assertRaises(regcache.RegcacheError) as e:
            self.client.attach_dmabuf(0, 0, 4096, 0x10000)  # fd 0 is no dma-buf
        self.assertEqual(e.exception.code, regcache.INVALID_ARGUMENT)

    def test_on_demand_prefetch(self):
        m = self.client.allocate(1 << 20, on_demand=True)
        self.client.prefetch(m.data, 65536, write=True)
        self.client.release(self.client.register(m, 65536, RW, regcache.PREFETCH_ASYNC))
        self.client.detach(m)

    def test_closed_client_refuses_calls(self):
        with regcache.Client(self.daemon.dir) as c:
            c.allocate(1 << 20)
        self.assertCode(regcache.FAILED_PRECONDITION, c.allocate, 1 << 20)
        c.close()  # twice is fine

    def test_threads_share_a_client_and_keep_their_own_errors(self):
        errors = []

        def good():
            try:
                for i in range(50):
                    self.client.release(self.client.register(self.mem.data + i * 4096, 4096, RW))
            except regcache.RegcacheError as e:
                errors.append(str(e))

        def bad():
            for _ in range(50):
                try:
                    self.client.register(self.mem.data, 0, RW)
                except regcache.RegcacheError as e:
                    if e.code != regcache.INVALID_ARGUMENT or "length" not in e.message:
                        errors.append(str(e))
                else:
                    errors.append("length 0 was accepted")

        threads = [threading.Thread(target=f) for f in (good, bad, good, bad)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
            self.assertFalse(t.is_alive())
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
