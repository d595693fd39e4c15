#!/usr/bin/env bash
# What an operator sees of live daemons, end to end: two rdmaplaned joined by
# memif (A the memif server, B the client), and an idle client on each
# holding a connection between them and a registered buffer (kill_client
# --mode=idle, which publishes the buffer's address and length).
#   1. On each daemon, rdmaplanectl status, clients, connections,
#      registrations and counters (JSON and tables) show that client, its
#      connection (service, peer, state up) and both its registrations
#      (address and length as the client published them, read-write for the
#      connection), and DPDK telemetry on the daemon's dpdk_telemetry.v2
#      socket answers /rdmaplane/status, clients, connections, registrations
#      and counters with the same, and /ethdev/stats,0 with the port's
#      packets (observe_check.py);
#   2. the two ends name each other's queue pairs: A's local QPN is B's
#      remote one and the other way round (a connection inside A before
#      makes A's numbers differ from B's);
#   3. the clients let go: both daemons are back to no sessions,
#      connections, registrations or arenas, telemetry says so too, and both
#      stop cleanly on SIGTERM (no socket, no DPDK runtime folder, hence no
#      telemetry socket, left).
#
#   observe_test.sh FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER
#       KILL_CLIENT OBSERVE_CHECK
set -euo pipefail

if [[ $# -ne 6 ]]; then
  echo "usage: $0 FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER KILL_CLIENT OBSERVE_CHECK" >&2
  exit 2
fi
# shellcheck source=tests/e2e/fault_lib.sh
source "$1"
daemon_bin="$2"
FL_CTL="$3"
transfer_bin="$4"
client_bin="$5"
check_bin="$6"
fl_init observe_test
for bin in "$daemon_bin" "$transfer_bin" "$client_bin" "$check_bin"; do
  [[ -x $bin ]] || fl_fail "no executable at $bin"
done
test_start="$(fl_now)"

ip_a=10.0.0.1
ip_b=10.0.0.2
sock_a="$FL_TMP/a.sock"
sock_b="$FL_TMP/b.sock"
memif="$FL_TMP/memif.sock" # an abstract name, unique to this run
port_a="net_memif0,role=server,socket=$memif"
port_b="net_memif0,role=client,socket=$memif"
prefix_a="" prefix_b=""
fl_prefix prefix_a a
fl_prefix prefix_b b
fl_start_daemon a "$sock_a" "$daemon_bin" --socket="$sock_a" \
  --file_prefix="$prefix_a" --port="$port_a" --ip="$ip_a" --mtu=1024 \
  --poll_mode=adaptive
fl_start_daemon b "$sock_b" "$daemon_bin" --socket="$sock_b" \
  --file_prefix="$prefix_b" --port="$port_b" --ip="$ip_b" --mtu=1024 \
  --poll_mode=adaptive
fl_wait_baseline "at start" a 5
fl_wait_baseline "at start" b 5
# A connection inside A first, so that A numbers the connection below (and
# its queue pair) differently from B and the QPN check in 2. can tell them
# apart.
fl_transfer inside-a 60 "$transfer_bin" --listen_socket="$sock_a" \
  --service=inside --sizes=4096 --depth=1
fl_wait_baseline "after the transfer inside A" a 5

# --- 1. Idle clients holding a connection and registrations --------------------
fl_start_proc ia "$client_bin" --socket="$sock_a" --service=observe \
  --dir="$FL_TMP" --name=ia --peer_name=ib --mode=idle --size=65536 --depth=1
fl_wait_line ia '^kill_client: listening' 15 >/dev/null
fl_start_proc ib "$client_bin" --socket="$sock_b" --service=observe \
  --dir="$FL_TMP" --name=ib --peer_name=ia --mode=idle --size=65536 --depth=1 \
  --peer="$ip_a"
fl_wait_line ia '^kill_client: holding' 30 >/dev/null
fl_wait_line ib '^kill_client: holding' 30 >/dev/null
# Each end holds its session, connection and both registrations once it
# says "holding"; the daemons' status follows at once.
fl_wait_counters "clients holding" a 5 "d['connections'] == 1 and d['registrations'] == 2"
fl_wait_counters "clients holding" b 5 "d['connections'] == 1 and d['registrations'] == 2"

# observe NAME CLIENT IP PEER_IP PORT PREFIX: observe_check.py against one
# daemon; sets QPNS to "LOCAL REMOTE".
observe() {
  local name="$1" client="$2" ip="$3" peer_ip="$4" port="$5" prefix="$6"
  local out="$FL_TMP/observe-$name.out" status=0
  timeout --kill-after=5 60 "$check_bin" --ctl="$FL_CTL" --socket="${FL_SOCK[$name]}" \
    --telemetry="$(fl_runtime_base)/$prefix/dpdk_telemetry.v2" \
    --daemon_pid="${FL_PID[$name]}" --client_pid="${FL_PROC_PID[$client]}" \
    --desc="$FL_TMP/$client.desc" --ip="$ip" --peer_ip="$peer_ip" --mtu=1024 \
    --service=observe --data_port="$port" >"$out" 2>&1 || status=$?
  sed "s/^/    $name: /" "$out"
  [[ $status -eq 0 ]] || fl_fail "daemon $name: what rdmaplanectl or telemetry show is wrong (status $status)"
  QPNS="$(sed -n 's/^observe_check: qpns //p' "$out")"
  [[ $QPNS =~ ^[0-9]+\ [0-9]+$ ]] || fl_fail "daemon $name: no queue pair numbers from observe_check"
  fl_log "daemon $name: rdmaplanectl and telemetry agree and show the client (QPNs $QPNS)"
}

QPNS=""
observe a ia "$ip_a" "$ip_b" "$port_a" "$prefix_a"
qpns_a="$QPNS"
observe b ib "$ip_b" "$ip_a" "$port_b" "$prefix_b"
qpns_b="$QPNS"

# --- 2. The two ends of one connection -------------------------------------------
read -r local_a remote_a <<<"$qpns_a"
read -r local_b remote_b <<<"$qpns_b"
[[ $local_a -ne $local_b ]] ||
  fl_fail "A and B gave their ends the same QPN $local_a: the check below would prove nothing"
[[ $local_a -eq $remote_b && $remote_a -eq $local_b ]] ||
  fl_fail "A's connection has QPNs $local_a (local) and $remote_a (remote), B's $local_b and $remote_b: not each other's"
fl_log "A's QPN $local_a is B's remote QPN and B's $local_b is A's"

# --- 3. Letting go ------------------------------------------------------------------
for c in ib ia; do
  touch "$FL_TMP/$c.release"
  fl_wait_exit "$c" 10
  [[ $FL_STATUS -eq 0 ]] || fl_fail "$c exited with status $FL_STATUS"
done
fl_wait_baseline "clients gone" a 5
fl_wait_baseline "clients gone" b 5
# Telemetry answers from a copy the daemon refreshes every 200 ms or so: it
# must show the same within 5 s.
for entry in "a:$prefix_a" "b:$prefix_b"; do
  name="${entry%%:*}"
  prefix="${entry#*:}"
  python3 - "$(fl_runtime_base)/$prefix/dpdk_telemetry.v2" <<'PY' ||
import json, socket, sys, time

def ask(command):
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(10)
        s.connect(sys.argv[1])
        s.recv(1 << 16)
        s.send(command.encode())
        return json.loads(s.recv(1 << 16))[command]

deadline = time.monotonic() + 5
while True:
    status = ask("/rdmaplane/status")
    lists = {t: ask(f"/rdmaplane/{t}") for t in ("clients", "connections", "registrations")}
    if (status["clients"], status["connections"], status["registrations"]) == (0, 0, 0) \
            and all(v == {} for v in lists.values()):
        break
    if time.monotonic() > deadline:
        sys.exit(f"after 5 s telemetry still shows {status} and {lists}")
    time.sleep(0.1)
PY
    fl_fail "daemon $name: telemetry does not show that the clients have gone"
  fl_log "daemon $name: telemetry shows no clients, connections or registrations"
done
fl_clean_stop b "$prefix_b"
fl_clean_stop a "$prefix_a"
fl_log "PASS in $(fl_since "$test_start") s"
