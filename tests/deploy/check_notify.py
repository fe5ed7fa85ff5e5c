#!/usr/bin/env python3
"""regcached speaks the Type=notify protocol: started with $NOTIFY_SOCKET naming a datagram
socket this script binds (as systemd would), it sends READY=1 once its sockets accept
connections, and STOPPING=1 on SIGTERM before it drains and exits 0.

Usage: check_notify.py <regcached>
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile


def receive(sock, want, proc, deadline_s=20):
    """Datagrams until one carries `want`; fails after deadline_s or if the daemon exits."""
    sock.settimeout(deadline_s)
    try:
        while True:
            msg = sock.recv(4096).decode()
            print(f"notify: {msg!r}")
            if want in msg.split("\n"):
                return msg
    except socket.timeout:
        sys.exit(f"check_notify: no {want} within {deadline_s} s (daemon rc={proc.poll()})")


def main():
    regcached = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="regcache-notify-") as tmp:
        path = os.path.join(tmp, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock_dir = os.path.join(tmp, "sock")
        env = dict(os.environ, NOTIFY_SOCKET=path)
        with open(os.path.join(tmp, "log"), "w+") as log:
            proc = subprocess.Popen([regcached, "--device=sim", f"--socket_dir={sock_dir}"],
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                receive(sock, "READY=1", proc)
                # Ready means serving: both sockets are there and accept a connection.
                for name, kind in (("control.sock", socket.SOCK_SEQPACKET),
                                   ("grpc.sock", socket.SOCK_STREAM)):
                    c = socket.socket(socket.AF_UNIX, kind)
                    c.connect(os.path.join(sock_dir, name))
                    c.close()
                proc.send_signal(signal.SIGTERM)
                receive(sock, "STOPPING=1", proc)
                rc = proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if rc != 0:
                log.seek(0)
                sys.exit(f"check_notify: regcached exited {rc}:\n{log.read()}")
    print("notify: READY=1 and STOPPING=1 received, exit 0")


if __name__ == "__main__":
    main()
