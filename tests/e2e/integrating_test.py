"""docs/integrating.md, kept true: its owner and peer programs (tools/examples: C++ and Python)
run against a regcached on the sim, each pair talking over two pipes as the walk-through
describes — the owner registers a KV cache and sends a descriptor, the peer writes into it, the
owner revokes, the peer's next write fails. Every pairing of languages runs, so the descriptor is
shown to be language-neutral. The Python programs run where REGCACHE_LIB names the library
(not in sanitizer builds, whose library python3 cannot load). Standard library only."""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from regcached_process import Regcached  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                        "examples")
STEP_TIMEOUT_S = 60


class Walkthrough(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Regcached(os.environ["REGCACHED"], prefix="regcache-walkthrough-")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def command(self, role, language):
        if language == "c++":
            return [os.environ["KV_OWNER" if role == "owner" else "KV_PEER"], self.daemon.dir]
        if not os.environ.get("REGCACHE_LIB"):
            self.skipTest("no REGCACHE_LIB: the Python client cannot load this build's library")
        return [sys.executable, os.path.join(EXAMPLES, f"kv_{role}.py"), self.daemon.dir]

    def run_pair(self, owner_language, peer_language):
        owner_cmd = self.command("owner", owner_language)
        peer_cmd = self.command("peer", peer_language)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(EXAMPLES, "..", "..", "client", "python")
        to_owner_r, to_owner_w = os.pipe()
        to_peer_r, to_peer_w = os.pipe()
        owner = subprocess.Popen(owner_cmd, stdin=to_owner_r, stdout=to_peer_w,
                                 stderr=subprocess.PIPE, env=env)
        peer = subprocess.Popen(peer_cmd, stdin=to_peer_r, stdout=to_owner_w,
                                stderr=subprocess.PIPE, env=env)
        for fd in (to_owner_r, to_owner_w, to_peer_r, to_peer_w):
            os.close(fd)
        outcome = {}
        for name, proc in (("owner", owner), ("peer", peer)):
            try:
                _, err = proc.communicate(timeout=STEP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                owner.kill()
                peer.kill()
                _, err = proc.communicate()
            outcome[name] = (proc.returncode, err.decode(errors="replace"))
        report = "\n".join(f"{n} exited {rc}:\n{err}" for n, (rc, err) in outcome.items())
        self.assertEqual(outcome["owner"][0], 0, report)
        self.assertEqual(outcome["peer"][0], 0, report)
        self.assertIn("the peer's write landed", outcome["owner"][1], report)
        self.assertIn("refused", outcome["owner"][1], report)
        self.assertIn("failed, as it must", outcome["peer"][1], report)

    def test_cpp_owner_cpp_peer(self):
        self.run_pair("c++", "c++")

    def test_python_owner_python_peer(self):
        self.run_pair("python", "python")

    def test_cpp_owner_python_peer(self):
        self.run_pair("c++", "python")

    def test_python_owner_cpp_peer(self):
        self.run_pair("python", "c++")


if __name__ == "__main__":
    unittest.main()
