#!/usr/bin/env bash
# Checks that what deploy/ ships works with the binaries this tree builds:
#   1. regcached from deploy/regcached.conf refuses to start without an RDMA device
#      (--device=auto:rdma); on the sim it starts (every flag in it exists and parses),
#      answers regcachectl status, and drains to exit 0 on SIGTERM;
#   2. deploy/regcached.service passes systemd-analyze verify (when systemd-analyze exists),
#      with ExecStart pointed at the built binary;
#   3. regcached sends READY=1 and STOPPING=1 to $NOTIFY_SOCKET, as the unit's Type=notify
#      needs (check_notify.py).
# Usage: check_deploy.sh <source-root> <regcached> <regcachectl>
set -euo pipefail
src=$1 regcached=$2 regcachectl=$3
work=$(mktemp -d)
trap 'kill -9 "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

# The shipped flags ask for a real RDMA device (--device=auto:rdma): on a host without one the
# daemon must refuse to start rather than serve the sim.
if [ -z "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  rc=0
  timeout 20 "$regcached" --flagfile="$src/deploy/regcached.conf" --socket_dir="$work/none" \
    >"$work/log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || ! grep -q "auto:rdma' found nothing" "$work/log"; then
    echo "regcached from regcached.conf on a host without RDMA: exit $rc, want a refusal"
    cat "$work/log"; exit 1
  fi
  echo "no RDMA device: regcached.conf refuses to start (exit $rc), as it should"
fi

# The rest on the sim (a later flag overrides the flagfile's).
"$regcached" --flagfile="$src/deploy/regcached.conf" --device=sim --socket_dir="$work/sock" \
  >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  [ -S "$work/sock/grpc.sock" ] && break
  sleep 0.05
done
out=$("$regcachectl" --socket_dir="$work/sock" status)
echo "$out"
grep -q "backend=sim" <<<"$out"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "regcached exited $rc after SIGTERM"; cat "$work/log"; exit 1
fi
pid=

if command -v systemd-analyze >/dev/null 2>&1; then
  sed "s|^ExecStart=/usr/local/bin/regcached|ExecStart=$regcached|" \
    "$src/deploy/regcached.service" >"$work/regcached.service"
  # verify prints problems and exits non-zero on errors in the unit itself.
  systemd-analyze verify "$work/regcached.service"
  echo "systemd unit: verified"
else
  echo "systemd unit: not verified (no systemd-analyze on this machine)"
fi
python3 "$src/tests/deploy/check_notify.py" "$regcached"
echo "deploy: ok"
