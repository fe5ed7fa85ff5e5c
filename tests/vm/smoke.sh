#!/bin/sh
# vm_rxe_smoke: run inside the guest (tests/vm/vmrun). Proves the Soft-RoCE device works before
# the project's own verbs tests rely on it: rxe0 is up, the memlock limit is raised, and an RC
# queue-pair ping-pong (server and client in this guest, RoCE v2 over the dummy interface's
# link-local GID 0, TCP exchange over localhost) completes. Every step is bounded in time.
set -eu

fail() {
  echo "vm_rxe_smoke: FAILED: $*" >&2
  exit 1
}

[ "${REGCACHE_IN_VM:-}" = 1 ] || fail "run me through tests/vm/vmrun"
[ "$(ulimit -l)" = unlimited ] || fail "memlock limit is $(ulimit -l), not unlimited"

info=$(timeout 30 ibv_devinfo -d rxe0) || fail "ibv_devinfo -d rxe0"
echo "$info"
echo "$info" | grep -q 'state:.*PORT_ACTIVE' || fail "rxe0 port is not PORT_ACTIVE"

port=18515
iters=200
log=$(mktemp)
timeout 60 ibv_rc_pingpong -d rxe0 -g 0 -p $port -n $iters >"$log" 2>&1 &
server=$!
# The client needs the server's TCP socket: wait (bounded) until it listens.
tries=0
until ss -Hltn "sport = :$port" | grep -q .; do
  tries=$((tries + 1))
  [ $tries -le 300 ] || fail "the ibv_rc_pingpong server did not listen within 30 s"
  kill -0 $server 2>/dev/null || { cat "$log" >&2; fail "the server exited early"; }
  sleep 0.1
done
timeout 60 ibv_rc_pingpong -d rxe0 -g 0 -p $port -n $iters localhost ||
  { cat "$log" >&2; fail "ibv_rc_pingpong client"; }
wait $server || { cat "$log" >&2; fail "ibv_rc_pingpong server"; }
cat "$log"
grep -q "$iters iters" "$log" || fail "the server did not report $iters iterations"
echo "vm_rxe_smoke: ok"
