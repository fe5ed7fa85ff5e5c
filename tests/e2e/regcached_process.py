"""A regcached on the sim device in its own temp socket dir, for the Python tests (the C++ tests'
counterpart is regcached_process.h): started with the given flags, waited for (both sockets,
bounded), stopped with SIGTERM (bounded, then SIGKILL). Standard library only."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

STARTUP_TIMEOUT_S = 10


class Regcached:
    def __init__(self, binary, *flags, prefix="regcache-py-"):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.proc = subprocess.Popen([binary, "--device=sim", f"--socket_dir={self.dir}",
                                      "--log_level=warning", *flags])
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(os.path.exists(os.path.join(self.dir, s))
                   for s in ("control.sock", "grpc.sock")):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        self.stop()
        raise RuntimeError("regcached did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
