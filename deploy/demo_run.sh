#!/usr/bin/env bash
# Two rdmaplane daemons joined by a memif link on this machine, and a client
# that moves RDMA traffic between them; what deploy/demo.sh runs once it has
# built the binaries (deploy/demo_test runs it too).
#
#   demo_run.sh RDMAPLANED RDMAPLANE_TRANSFER RDMAPLANECTL [--bytes=N] [--faults=SPEC]
#
# Daemon A (10.0.0.1) is the memif server, daemon B (10.0.0.2) the memif
# client. One client process opens a session with each, listens on A,
# connects from B to A's address (ARP and the IB connection manager between
# the daemons), registers memory on both sides, writes --bytes each way and
# reads them back each way, and checks every byte. No root, NIC or hugepages
# needed. The last line starts with "demo: ok" on success; on failure it
# says what went wrong, shows the daemons' logs, and the exit status is 1.
# Nothing is left running or on disk.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: demo_run.sh RDMAPLANED RDMAPLANE_TRANSFER RDMAPLANECTL [--bytes=N] [--faults=SPEC]" >&2
  exit 2
fi
daemon="$1"
transfer="$2"
ctl="$3"
shift 3
bytes=1048576
faults=""
for arg in "$@"; do
  case "$arg" in
    --bytes=*) bytes="${arg#--bytes=}" ;;
    --faults=*) faults="${arg#--faults=}" ;;
    *)
      echo "demo: unknown argument '$arg' (use --bytes=N, --faults=SPEC)" >&2
      exit 2
      ;;
  esac
done
if ! [[ $bytes =~ ^[0-9]+$ ]] || ((bytes < 1 || bytes > 4194304)); then
  echo "demo: --bytes must be 1..4194304" >&2
  exit 2
fi

# Short paths: Unix socket names are limited to 108 bytes.
dir="$(mktemp -d /tmp/rdmaplane-demo.XXXXXX)"
prefix="rdmaplane-demo-$$"
pids=()

cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT

fail() {
  echo "demo: FAILED: $*"
  for side in a b; do
    if [[ -s "$dir/$side.log" ]]; then
      echo "--- daemon $side log"
      tail -n 20 "$dir/$side.log"
    fi
  done
  exit 1
}

wait_for_socket() {
  local path="$1" pid="$2"
  for _ in $(seq 100); do
    [[ -S $path ]] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

common=(--poll_mode=adaptive)
if [[ -n $faults ]]; then common+=("--port_faults=$faults"); fi

echo "demo: starting daemon A (10.0.0.1, memif server) and daemon B (10.0.0.2, memif client)" >&2
"$daemon" --socket="$dir/a.sock" --file_prefix="$prefix-a" --ip=10.0.0.1 \
  --port="net_memif0,role=server,socket=$dir/memif.sock" "${common[@]}" \
  >"$dir/a.log" 2>&1 &
pids+=($!)
wait_for_socket "$dir/a.sock" "${pids[0]}" || fail "daemon A did not start"
"$daemon" --socket="$dir/b.sock" --file_prefix="$prefix-b" --ip=10.0.0.2 \
  --port="net_memif0,role=client,socket=$dir/memif.sock" "${common[@]}" \
  >"$dir/b.log" 2>&1 &
pids+=($!)
wait_for_socket "$dir/b.sock" "${pids[1]}" || fail "daemon B did not start"

echo "demo: one client, a session on each daemon: $bytes bytes written and read each way" >&2
out="$("$transfer" --listen_socket="$dir/a.sock" --connect_socket="$dir/b.sock" \
  --peer=10.0.0.1 --service=demo --sizes="$bytes" --depth=1 --timeout_s=30 2>&1)" ||
  fail "$(printf '%s\n' "$out" | tail -n 1)"
result="$(printf '%s\n' "$out" | tail -n 1)"
[[ $result == "transfer: ok"* ]] || fail "$result"

counter() {  # counter SOCKET NAME
  "$ctl" --socket="$1" --json counters |
    sed -n "s/.*\"$2\": *\([0-9]*\).*/\1/p"
}
frames_a="$(counter "$dir/a.sock" port_tx_frames)" || fail "daemon A does not answer"
frames_b="$(counter "$dir/b.sock" port_tx_frames)" || fail "daemon B does not answer"
accepts="$(counter "$dir/a.sock" remote_accepts)"

echo "$result"
echo "daemon A sent ${frames_a:-?} RoCEv2 frames, daemon B ${frames_b:-?}; connections accepted from a peer daemon: ${accepts:-?}"
echo "demo: ok: $bytes bytes written and read each way between clients of two daemons over memif, every byte verified"
