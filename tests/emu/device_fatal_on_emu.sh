#!/usr/bin/env bash
# A ConnectX that fails for good under a running regcached (IBV_EVENT_DEVICE_FATAL), on the
# emulator: the daemon learns it from the device's async event file with no call of its own
# failing first, turns gRPC health NOT_SERVING, says so in `regcachectl status` and the
# metrics, refuses to make keys on it (UNAVAILABLE, DEVICE_FAILED), and still drains and exits 0
# on SIGTERM. The emulator kills its devices on REGCACHE_MLX5EMU's fatal_signal (12, SIGUSR2).
#   device_fatal_on_emu.sh <regcached> <regcache_demo> <regcachectl> [device spec]
set -euo pipefail
daemon_bin=$1 demo=$2 ctl=$3 spec=${4:-${REGCACHE_HW_DEVICE:-mlx5}}
export REGCACHE_MLX5EMU="${REGCACHE_MLX5EMU:+$REGCACHE_MLX5EMU,}fatal_signal=12"
dir=$(mktemp -d /tmp/regcache-emu-fatal-XXXXXX)
log="$dir/regcached.log"
port=$((20000 + RANDOM % 20000))
"$daemon_bin" --device="$spec" --peer_on_any_device --socket_dir="$dir" --metrics_port="$port" \
  >"$log" 2>&1 &
daemon=$!
cleanup() {
  if kill -0 "$daemon" 2>/dev/null; then kill -KILL "$daemon" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "device_fatal_on_emu: $*" >&2
  cat "$log" >&2
  exit 1
}
for _ in $(seq 1 100); do
  [ -S "$dir/control.sock" ] && [ -S "$dir/grpc.sock" ] && break
  sleep 0.1
done
[ -S "$dir/grpc.sock" ] || fail "regcached on $spec did not come up"
"$ctl" --socket_dir="$dir" health || fail "not SERVING before the device failed"
"$ctl" --socket_dir="$dir" status | grep -q '^device\[0\]_health=ok$' || fail "health not ok"
"$demo" --socket_dir="$dir" --rounds=2 >/dev/null || fail "the demo failed on a working device"

kill -USR2 "$daemon"
state=0
for _ in $(seq 1 100); do
  state=0
  "$ctl" --socket_dir="$dir" health >/dev/null 2>&1 || state=$?
  [ "$state" -eq 3 ] && break
  sleep 0.1
done
[ "$state" -eq 3 ] || fail "health did not turn NOT_SERVING within 10 s (regcachectl health: $state)"
status=$("$ctl" --socket_dir="$dir" status)
echo "$status"
grep -q '^device\[0\]_health=.*IBV_EVENT_DEVICE_FATAL' <<<"$status" || fail "status: no failure"
metrics=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3)
grep -q '^regcache_device_up{device="[^"]*"} 0' <<<"$metrics" || fail "regcache_device_up is not 0"
out=$("$demo" --socket_dir="$dir" --rounds=2 2>&1) && fail "the demo made a key on a failed device"
echo "$out"
grep -q "DEVICE_FAILED\|IBV_EVENT_DEVICE_FATAL" <<<"$out" || fail "the refusal does not say why"

kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
grep -q "IBV_EVENT_DEVICE_FATAL" "$log" || fail "the daemon did not log the event"
[ "$rc" -eq 0 ] || fail "regcached exited $rc after SIGTERM"
echo "regcached on $spec noticed the fatal error, refused keys on it, and exited 0 after draining"
