"""A regcached on the sim device in its own temp socket dir, for the Python tests (the C++ tests'
counterpart is regcached_process.h): started with the given flags, waited for (its READY=1 on
$NOTIFY_SOCKET, sent once both sockets listen; bounded), stopped with SIGTERM (bounded, then SIGKILL). Standard library only."""
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time

STARTUP_TIMEOUT_S = 10


class Regcached:
    def __init__(self, binary, *flags, prefix="regcache-py-"):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        notify = os.path.join(self.dir, "notify.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as ready:
            ready.bind(notify)
            self.proc = subprocess.Popen(
                [binary, "--device=sim", f"--socket_dir={self.dir}", "--log_level=warning",
                 *flags], env={**os.environ, "NOTIFY_SOCKET": notify})
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while time.monotonic() < deadline:
                if select.select([ready], [], [], 0.01)[0] and b"READY=1" in ready.recv(512):
                    return
                if self.proc.poll() is not None:
                    break
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
