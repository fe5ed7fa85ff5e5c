"""regcachectl against a real regcached (sim device, temp socket dir): the JSON of status,
stats, sessions and keys parsed and checked (docs/cli.md), --help and --version, exit codes,
read-only commands that leave the daemon's session count alone (observers), and health before
and after a drain. Standard library only.

Environment: REGCACHED, REGCACHECTL, E2E_CLIENT (tests/e2e/e2e_client_main.cc, a client process
driven line by line), REGCACHE_VERSION and REGCACHE_BUILD_TYPE (what --version must name)."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from regcached_process import Regcached

RUN_TIMEOUT_S = 30


def env(name):
    value = os.environ.get(name)
    if value is None:
        raise unittest.SkipTest(f"{name} is not set")
    return value


def Daemon():
    """regcached on the sim, this test's uid its admin (regcached_process.Regcached)."""
    return Regcached(env("REGCACHED"), f"--admin_uids={os.getuid()}", prefix="regcachectl-")


class E2eClient:
    """A client process with a session of its own (tests/e2e/e2e_client_main.cc)."""

    def __init__(self, socket_dir):
        self.proc = subprocess.Popen([env("E2E_CLIENT"), f"--socket_dir={socket_dir}"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline().split()
        assert first and first[0] == "ok", first
        self.session = int(dict(f.split("=") for f in first[1:])["session"])

    def do(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        assert reply and reply[0] == "ok", (line, reply)
        return dict(f.split("=", 1) for f in reply[1:])

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def ctl(*args, socket_dir=None):
    """regcachectl's (exit code, stdout, stderr)."""
    argv = [env("REGCACHECTL")]
    if socket_dir is not None:
        argv.append(f"--socket_dir={socket_dir}")
    p = subprocess.run(argv + list(args), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return p.returncode, p.stdout, p.stderr


class UsageTest(unittest.TestCase):
    def test_help_exits_0_with_usage_and_exit_codes_on_stdout(self):
        for flag in ("--help", "-h"):
            code, out, _ = ctl(flag)
            self.assertEqual(code, 0, flag)
            self.assertIn("Usage: regcachectl", out)
            self.assertIn("Exit status", out)
            for command in ("status", "stats", "sessions", "keys", "health", "drain"):
                self.assertIn(command, out)

    def test_version_names_version_and_build_type(self):
        code, out, _ = ctl("--version")
        self.assertEqual(code, 0)
        self.assertIn(env("REGCACHE_VERSION"), out)
        build_type = env("REGCACHE_BUILD_TYPE") or "no CMAKE_BUILD_TYPE"
        self.assertIn(f"({build_type} build)", out)

    def test_bad_usage_exits_2(self):
        self.assertEqual(ctl("frobnicate")[0], 2)
        self.assertEqual(ctl("-o", "yaml", "status")[0], 2)
        self.assertEqual(ctl("status", "extra")[0], 2)
        self.assertEqual(ctl()[0], 2)

    def test_no_daemon_fails_with_1_and_health_with_4(self):
        empty = tempfile.mkdtemp(prefix="regcachectl-none-")
        try:
            code, _, err = ctl("status", socket_dir=empty)
            self.assertEqual(code, 1)
            self.assertIn("UNAVAILABLE", err)
            code, out, _ = ctl("health", "-o", "json", "--timeout=2s", socket_dir=empty)
            self.assertEqual(code, 4)
            self.assertEqual(json.loads(out)["status"], "UNREACHABLE")
        finally:
            shutil.rmtree(empty, ignore_errors=True)


class JsonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()
        cls.client = E2eClient(cls.daemon.dir)
        mem = cls.client.do("alloc 1048576")
        cls.ptr = int(mem["ptr"], 16)
        key = cls.client.do(f"reg {cls.ptr} 8192 15")
        cls.handle = int(key["handle"], 0)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.stop()

    def json(self, *args):
        code, out, err = ctl(*args, "-o", "json", socket_dir=self.daemon.dir)
        self.assertEqual(code, 0, err)
        self.assertEqual(out.count("\n"), 1, "one JSON document, one line")
        return json.loads(out)

    def test_status(self):
        s = self.json("status")
        self.assertEqual(s["backend"], "sim")
        self.assertEqual(s["sessions"], 1, "the client's session only: regcachectl has none")
        self.assertIs(s["draining"], False)
        self.assertIsInstance(s["uptime_ms"], int)
        self.assertIs(s["peer"], True)
        self.assertEqual(len(s["devices"]), 1)
        d = s["devices"][0]
        self.assertEqual(d["index"], 0)
        self.assertTrue(d["name"])
        self.assertRegex(d["node_guid"], r"^0x[0-9a-f]{16}$")
        self.assertRegex(d["gid"], r"^([0-9a-f]{4}:){7}[0-9a-f]{4}$")
        self.assertEqual(d["sessions"], 1)
        self.assertEqual(s["device"], f"sim:{d['name']}")

    def test_status_text_stays_human_readable(self):
        code, out, _ = ctl("status", socket_dir=self.daemon.dir)
        self.assertEqual(code, 0)
        self.assertIn("backend=sim sessions=1 draining=0", out)

    def test_stats(self):
        stats = self.json("stats")["stats"]
        by_name = {(v["component"], v["name"]): v for v in stats}
        opened = by_name[("daemon", "sessions_opened")]
        self.assertEqual(opened["kind"], "counter")
        self.assertIsInstance(opened["value"], int)
        self.assertEqual(by_name[("daemon", "sessions_open")]["value"], 1)
        histograms = [v for v in stats if v["kind"] == "histogram"]
        self.assertTrue(histograms)
        for h in histograms:
            for field in ("count", "sum", "p50", "p99", "max"):
                self.assertIsInstance(h[field], int, h)

    def test_sessions(self):
        sessions = self.json("sessions")["sessions"]
        self.assertEqual([s["session_id"] for s in sessions], [self.client.session],
                         "regcachectl's observer is not a session")
        s = sessions[0]
        self.assertEqual(s["pid"], self.client.proc.pid)
        self.assertEqual(s["uid"], os.getuid())
        self.assertGreaterEqual(s["live_registrations"], 1)
        self.assertEqual(s["memories"], 1)
        self.assertIsInstance(s["admin"], bool)
        self.assertTrue(s["device"])

    def test_keys(self):
        keys = self.json("keys", f"--session={self.client.session}")["keys"]
        mine = [k for k in keys if int(k["handle"], 16) == self.handle]
        self.assertEqual(len(mine), 1, keys)
        k = mine[0]
        self.assertEqual(k["session_id"], self.client.session)
        self.assertLessEqual(int(k["va"], 16), self.ptr)
        self.assertGreaterEqual(k["length"], 8192)
        self.assertEqual(k["access"], ["lr", "lw", "rr", "rw"])
        self.assertIsInstance(k["key"], int)
        self.assertIs(k["revoked"], False)
        self.assertTrue(k["state"])
        self.assertEqual(self.json("keys", "--all")["keys"], keys)
        self.assertEqual(self.json("keys")["keys"], [], "an observer holds no keys")

    def test_readiness_loop_leaves_the_session_count_unchanged(self):
        before = self.json("sessions")["sessions"]
        opened = {(v["component"], v["name"]): v
                  for v in self.json("stats")["stats"]}[("daemon", "sessions_opened")]["value"]
        for _ in range(10):
            self.assertEqual(ctl("status", socket_dir=self.daemon.dir)[0], 0)
        after = self.json("sessions")["sessions"]
        self.assertEqual([s["session_id"] for s in after], [s["session_id"] for s in before])
        self.assertEqual(self.json("status")["sessions"], 1)
        stats = {(v["component"], v["name"]): v for v in self.json("stats")["stats"]}
        self.assertEqual(stats[("daemon", "sessions_opened")]["value"], opened)


class HealthTest(unittest.TestCase):
    def test_serving_then_unreachable_after_drain(self):
        daemon = Daemon()
        try:
            code, out, _ = ctl("health", socket_dir=daemon.dir)
            self.assertEqual((code, out), (0, "SERVING\n"))
            code, out, _ = ctl("health", "-o", "json", socket_dir=daemon.dir)
            self.assertEqual(code, 0)
            self.assertEqual(json.loads(out), {"service": "", "status": "SERVING"})
            for service in ("regcache.v1.RegCacheService", "regcache.v1.SimPeerService"):
                code, out, _ = ctl("health", f"--service={service}", socket_dir=daemon.dir)
                self.assertEqual((code, out), (0, "SERVING\n"), service)
            code, out, _ = ctl("health", "--service=no.such.Service", socket_dir=daemon.dir)
            self.assertEqual(code, 3, "an unknown service is not serving")
            code, out, err = ctl("drain", "-o", "json", socket_dir=daemon.dir)
            self.assertEqual(code, 0, err)
            self.assertEqual(json.loads(out), {"drained": True})
            # The drained daemon exits; from then on health says unreachable (4). Until then it
            # answers NOT_SERVING (3) or, briefly, still SERVING: only the end state is certain.
            daemon.proc.wait(timeout=20)
            code, out, _ = ctl("health", "--timeout=2s", socket_dir=daemon.dir)
            self.assertEqual((code, out), (4, "UNREACHABLE\n"))
        finally:
            daemon.stop()


if __name__ == "__main__":
    unittest.main()
