"""Tenant memory is the tenant's (docs/operations.md, "Whose memory is it"): memory a client
allocates, registers and prefetches is charged to the client's memory cgroup, not to regcached's,
so a large tenant meets its own limit instead of getting the daemon (and every tenant's keys)
OOM-killed.

The test makes two child memory cgroups next to its own — one for a regcached on the sim, one for
a client — and has the client allocate 256 MiB of on-demand memory and prefetch all of it for
writing, plus 64 MiB of ordinary memory registered whole. The client's cgroup must have grown by
nearly all of it and the daemon's by at most a few MiB. cgroup v2 (memory.current) or v1
(memory.usage_in_bytes); skipped, saying why, where this process cannot make memory cgroups
(no root, no memory controller, or a v2 parent with processes of its own)."""
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from regcached_process import Regcached  # noqa: E402

MIB = 1 << 20
ODP_BYTES = 256 * MIB
PINNED_BYTES = 64 * MIB

CLIENT = r"""
import os, sys
with open(sys.argv[2], "w") as f:  # into the client's cgroup before anything is allocated
    f.write(str(os.getpid()))
import regcache
RW = regcache.LOCAL_READ | regcache.LOCAL_WRITE | regcache.REMOTE_READ | regcache.REMOTE_WRITE
with regcache.Client(sys.argv[1]) as c:
    odp = c.allocate(%d, on_demand=True)
    c.prefetch(odp.data, odp.length, write=True, mode=regcache.PREFETCH_SYNC)
    pinned = c.allocate(%d)
    key = c.register(pinned.data, pinned.length, RW)
    print("ready", flush=True)
    sys.stdin.readline()
""" % (ODP_BYTES, PINNED_BYTES)


def memory_cgroup():
    """(directory of this process's memory cgroup, usage file name, v2?) or a reason string."""
    if os.geteuid() != 0:
        return "needs root to make cgroups"
    with open("/proc/self/cgroup") as f:
        lines = [l.rstrip("\n").split(":", 2) for l in f]
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            base = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
            if os.path.isfile(os.path.join(base, "memory.usage_in_bytes")):
                return base, "memory.usage_in_bytes", False
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "":
            for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                base = os.path.join(root, path.lstrip("/"))
                try:
                    with open(os.path.join(base, "cgroup.controllers")) as c:
                        if "memory" in c.read().split():
                            return base, "memory.current", True
                except OSError:
                    continue
    return "no memory cgroup controller here (v1 or v2)"


class CgroupCharging(unittest.TestCase):
    def setUp(self):
        found = memory_cgroup()
        if isinstance(found, str):
            self.skipTest(found)
        self.base, self.usage_file, v2 = found
        self.made = []
        for name in ("daemon", "client"):
            d = os.path.join(self.base, f"regcache-test-{os.getpid()}-{name}")
            try:
                os.mkdir(d)
            except OSError as e:
                self.tearDown()
                self.skipTest(f"cannot make a cgroup under {self.base}: {e}")
            self.made.append(d)
        if v2 and not os.path.isfile(os.path.join(self.made[0], "memory.current")):
            try:
                with open(os.path.join(self.base, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory")
            except OSError as e:
                self.tearDown()
                self.skipTest(f"cannot enable the memory controller below {self.base}: {e} "
                              "(a v2 cgroup with processes cannot delegate controllers)")

    def tearDown(self):
        for d in reversed(getattr(self, "made", [])):
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.05)  # the last process is still leaving
        self.made = []

    def usage(self, cgroup):
        with open(os.path.join(cgroup, self.usage_file)) as f:
            return int(f.read())

    def test_tenant_memory_is_charged_to_the_tenant(self):
        daemon_cg, client_cg = self.made
        daemon = Regcached(os.environ["REGCACHED"], prefix="regcache-cgroup-")
        try:
            with open(os.path.join(daemon_cg, "cgroup.procs"), "w") as f:
                f.write(str(daemon.proc.pid))
            daemon_before = self.usage(daemon_cg)
            client_before = self.usage(client_cg)
            client = subprocess.Popen(
                [sys.executable, "-c", CLIENT, daemon.dir,
                 os.path.join(client_cg, "cgroup.procs")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                line = client.stdout.readline()
                self.assertEqual(line.strip(), "ready", "the client did not get its memory")
                daemon_grew = self.usage(daemon_cg) - daemon_before
                client_grew = self.usage(client_cg) - client_before
            finally:
                client.stdin.close()
                client.wait(timeout=60)
            report = (f"client's cgroup grew {client_grew / MIB:.1f} MiB, regcached's "
                      f"{daemon_grew / MIB:.1f} MiB ({self.usage_file})")
            print(report)
            self.assertGreaterEqual(client_grew, 0.9 * (ODP_BYTES + PINNED_BYTES), report)
            self.assertLessEqual(daemon_grew, 16 * MIB, report)
            with open(os.path.join(self.base, "cgroup.procs"), "w") as f:
                f.write(str(daemon.proc.pid))  # back, so its cgroup can go
        finally:
            daemon.stop()


if __name__ == "__main__":
    result = unittest.main(exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    # Skipped (no cgroups to make here): exit 77, which ctest and tests/run_tests.sh count as a
    # skip, not a pass; the reason is printed above.
    sys.exit(77 if result.skipped else 0)
