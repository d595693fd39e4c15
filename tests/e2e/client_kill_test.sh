#!/usr/bin/env bash
# Clients killed in the middle of a transfer between two daemons, end to end:
# two rdmaplaned joined by memif (A the memif server, B the client).
#   1. A client on B streams 1 MiB RDMA WRITEs and READs to and from a client
#      on A (8 outstanding each way). SIGKILL the client on B: daemon B
#      reclaims its session (no sessions, connections, registrations or
#      arenas within 5 s) and tells A (DREQ), so the client on A sees
#      RDP_ERR_CONN_RESET, not a retransmission time-out, and A closes its
#      side (state "closing" until the client disconnects) and drops the
#      registrations made for the connection while that client still holds
#      its session. Then that client leaves too and A is back to nothing.
#   2. The same the other way round: SIGKILL the client on A.
#   3. rdmaplane_transfer (sessions on both daemons, 2 x 2 connections,
#      4 MiB requests) killed while it moves data: both daemons are back to
#      nothing within 5 s.
#   4. A fresh transfer works both ways; both daemons stop cleanly.
#
#   client_kill_test.sh FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER
#       KILL_CLIENT
set -euo pipefail

if [[ $# -ne 5 ]]; then
  echo "usage: $0 FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER KILL_CLIENT" >&2
  exit 2
fi
# shellcheck source=tests/e2e/fault_lib.sh
source "$1"
daemon_bin="$2"
FL_CTL="$3"
transfer_bin="$4"
client_bin="$5"
fl_init client_kill_test
for bin in "$daemon_bin" "$transfer_bin" "$client_bin"; do
  [[ -x $bin ]] || fl_fail "no executable at $bin"
done
test_start="$(fl_now)"

ip_a=10.0.0.1
ip_b=10.0.0.2
sock_a="$FL_TMP/a.sock"
sock_b="$FL_TMP/b.sock"
memif="$FL_TMP/memif.sock" # an abstract name, unique to this run
prefix_a="" prefix_b=""
fl_prefix prefix_a a
fl_prefix prefix_b b
common=(--mtu=1024 --log_level=debug)
fl_start_daemon a "$sock_a" "$daemon_bin" --socket="$sock_a" \
  --file_prefix="$prefix_a" --port="net_memif0,role=server,socket=$memif" \
  --ip="$ip_a" "${common[@]}"
fl_start_daemon b "$sock_b" "$daemon_bin" --socket="$sock_b" \
  --file_prefix="$prefix_b" --port="net_memif0,role=client,socket=$memif" \
  --ip="$ip_b" "${common[@]}"
fl_wait_baseline "at start" a 5
fl_wait_baseline "at start" b 5

# kill_client NAME SOCKET PEER_NAME SERVICE [FLAGS...]
kill_client() {
  local name="$1" sock="$2" peer_name="$3" service="$4"
  shift 4
  fl_start_proc "$name" "$client_bin" --socket="$sock" --service="$service" \
    --dir="$FL_TMP" --name="$name" --peer_name="$peer_name" \
    --size=1048576 --depth=8 "$@"
}

# round N VICTIM_DAEMON SURVIVOR_DAEMON: a streaming pair, the client on
# VICTIM_DAEMON killed, the one on SURVIVOR_DAEMON kept (--hold) until the
# checks are done.
round() {
  local n="$1" victim="$2" survivor="$3"
  local listen="l$n" connect="c$n"
  local hold_listen=() hold_connect=()
  local victim_client survivor_client
  if [[ $victim == b ]]; then
    victim_client="$connect"
    survivor_client="$listen"
    hold_listen=(--hold)
  else
    victim_client="$listen"
    survivor_client="$connect"
    hold_connect=(--hold)
  fi
  fl_log "round $n: the client on $victim dies, the one on $survivor holds on"
  kill_client "$listen" "$sock_a" "$connect" "stream$n" "${hold_listen[@]}"
  fl_wait_line "$listen" '^kill_client: listening' 15 >/dev/null
  kill_client "$connect" "$sock_b" "$listen" "stream$n" --peer="$ip_a" "${hold_connect[@]}"
  fl_wait_line "$listen" '^c 31 ' 30 >/dev/null
  fl_wait_line "$connect" '^c 31 ' 30 >/dev/null
  fl_wait_counters "round $n: streaming" a 5 "d['connections'] == 1"
  fl_wait_counters "round $n: streaming" b 5 "d['connections'] == 1"
  local disconnects reclaimed
  disconnects="$(fl_counter "$survivor" peer_disconnects)"
  reclaimed="$(fl_counter "$victim" sessions_reclaimed)"

  local kill_time
  kill_time="$(fl_now)"
  fl_kill_proc "$victim_client"
  fl_log "round $n: SIGKILL to $victim_client (on daemon $victim)"

  # The victim's daemon reclaims everything.
  fl_wait_baseline "round $n: victim reclaimed" "$victim" 5
  local reclaim_s="$FL_WAITED"
  local now_reclaimed
  now_reclaimed="$(fl_json_get "$FL_JSON" sessions_reclaimed)"
  [[ $now_reclaimed -eq $((reclaimed + 1)) ]] ||
    fl_fail "round $n: sessions_reclaimed of $victim went from $reclaimed to $now_reclaimed"

  # The survivor's client hears of it as a reset: the peer daemon said so.
  local line
  line="$(fl_wait_line "$survivor_client" '^kill_client: (first_error|FAILED|stalled)' 5)"
  [[ $line =~ status=([A-Z_]+)\ t=([0-9.]+) ]] || fl_fail "$survivor_client: $line"
  local status="${BASH_REMATCH[1]}" after
  after="$(fl_since "$kill_time" "${BASH_REMATCH[2]}")"
  fl_log "round $n: $survivor_client: first failure $status $after s after the kill"
  [[ $status == RDP_ERR_CONN_RESET ]] ||
    fl_fail "round $n: $survivor_client failed with $status (RDP_ERR_CONN_RESET expected: daemon $victim should have sent DREQ)"
  fl_wait_line "$survivor_client" '^kill_client: holding' 40 >/dev/null

  # While that client still holds its session, its daemon has closed its
  # side of the connection (the client's slot stays until it disconnects)
  # and dropped the registrations made for it: left are the session, its
  # arena and its own local registration.
  fl_wait_counters "round $n: survivor closed its side" "$survivor" 5 \
    "d['sessions'] == 1 and d['connections'] <= 1 and d['registrations'] == 1 and d['arenas'] == 1 and d['peer_disconnects'] == $((disconnects + 1))"
  fl_wait_json "round $n: survivor closed its side" "$survivor" 5 connections \
    "all(c['state'] == 'closing' for c in d)"

  touch "$FL_TMP/$survivor_client.release"
  fl_wait_exit "$survivor_client" 10
  [[ $FL_STATUS -eq 0 ]] || fl_fail "$survivor_client exited with status $FL_STATUS"
  fl_log "round $n: $survivor_client: $(grep '^kill_client: disconnect' "${FL_PROC_OUT[$survivor_client]}")"
  fl_wait_baseline "round $n: survivor's client gone" "$survivor" 5
  fl_wait_baseline "round $n: at the end" "$victim" 5
  ROUND_SUMMARY+=("round $n: $victim reclaimed in $reclaim_s s, $survivor_client saw $status after $after s")
}

ROUND_SUMMARY=()
round 1 b a
round 2 a b

# --- 3. The transfer tool killed mid-transfer ---------------------------------
sizes="$(printf '4194304,%.0s' {1..24})"
fl_start_proc transfer "$transfer_bin" \
  --listen_socket="$sock_a" --connect_socket="$sock_b" --peer="$ip_a" \
  --sizes="${sizes%,}" --depth=4 --connections=2 --clients=2 --timeout_s=30
fl_wait_counters "transfer running" a 30 "d['connections'] == 4 and d['registrations'] >= 8"
fl_wait_counters "transfer running" b 30 "d['connections'] == 4 and d['registrations'] >= 8"
fl_wait_line transfer '^transfer: client [0-9]+: 4194304 bytes' 60 >/dev/null
if grep -q '^transfer: \(ok\|FAILED\)' "${FL_PROC_OUT[transfer]}"; then
  fl_fail "the transfer ended before it could be killed: $(tail -n 1 "${FL_PROC_OUT[transfer]}")"
fi
fl_kill_proc transfer
fl_log "SIGKILL to rdmaplane_transfer after $(fl_count_lines transfer '^transfer: client') sizes done"
fl_wait_baseline "transfer killed" a 5
a_s="$FL_WAITED"
fl_wait_baseline "transfer killed" b 5
b_s="$FL_WAITED"
ROUND_SUMMARY+=("transfer killed: A reclaimed in $a_s s, B in $b_s s")

# --- 4. Fresh transfers; clean stop ---------------------------------------------
fl_transfer "b-to-a" 120 "$transfer_bin" \
  --listen_socket="$sock_a" --connect_socket="$sock_b" --peer="$ip_a" \
  --sizes=4096,1048576 --depth=4 --connections=2 --clients=2 --timeout_s=30
fl_transfer "a-to-b" 120 "$transfer_bin" \
  --listen_socket="$sock_b" --connect_socket="$sock_a" --peer="$ip_b" \
  --sizes=4096,1048576 --depth=4 --connections=2 --clients=2 --timeout_s=30
fl_wait_baseline "at the end" a 5
fl_wait_baseline "at the end" b 5
fl_clean_stop b "$prefix_b"
fl_clean_stop a "$prefix_a"

for line in "${ROUND_SUMMARY[@]}"; do fl_log "$line"; done
fl_log "PASS in $(fl_since "$test_start") s"
