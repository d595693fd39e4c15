#!/usr/bin/env bash
# A daemon killed in the middle of a transfer, end to end: two rdmaplaned
# joined by memif (A the memif server, B the client), clients on both with
# a connection between them that streams 1 MiB RDMA WRITEs and READs (8
# outstanding each way), and an idle connection beside it.
#   1. SIGKILL daemon B. Its client's requests (or posts) fail with
#      RDP_ERR_CONN_ABORTED or RDP_ERR_NET_DOWN within 5 s; the client on A
#      sees RDP_ERR_CONN_ABORTED (retries exhausted) or RDP_ERR_CONN_RESET
#      within 10 s; every outstanding request completes; nobody hangs.
#   2. Once A's streaming client has gone, A holds nothing of it: only the
#      idle connection (which nothing told A about) is left.
#   3. B restarts on the same socket and file prefix; new connections both
#      ways work (rdmaplane_transfer, every byte checked) although A still
#      holds the idle connection to B's previous life.
#   4. The idle clients let go; both daemons are back to no sessions,
#      connections, registrations or arenas.
#   5. A new streaming pair, and SIGTERM (not SIGKILL) to B in the middle of
#      it: B exits with status 0 within 5 s and leaves no socket, no DPDK
#      runtime folder and no process; its client's requests complete with
#      RDP_ERR_CONN_ABORTED (the daemon shut down), every one still
#      outstanding included (a post after the daemon went fails with
#      RDP_ERR_NET_DOWN), and the client on A sees
#      RDP_ERR_CONN_RESET (B said farewell), both within 5 s; once that
#      client has gone A is back to no sessions, connections, registrations
#      or arenas, and stops cleanly on SIGTERM.
#
#   daemon_kill_test.sh FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER
#       KILL_CLIENT
#
# Daemons run with --log_level=debug; their logs end up in the test's
# undeclared outputs and are printed on failure.
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
fl_init daemon_kill_test
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
daemon_a=("$daemon_bin" --socket="$sock_a" --file_prefix="$prefix_a"
  --port="net_memif0,role=server,socket=$memif" --ip="$ip_a" "${common[@]}")
daemon_b=("$daemon_bin" --socket="$sock_b" --file_prefix="$prefix_b"
  --port="net_memif0,role=client,socket=$memif" --ip="$ip_b" "${common[@]}")

fl_start_daemon a "$sock_a" "${daemon_a[@]}"
fl_start_daemon b "$sock_b" "${daemon_b[@]}"
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

# first_error NAME LIMIT_S: waits for NAME's first failure and sets
# FE_STATUS, FE_T (Unix time) and FE_OK (requests that succeeded before).
first_error() {
  local line
  line="$(fl_wait_line "$1" '^kill_client: (first_error|FAILED|stalled)' "$2")"
  [[ $line =~ first_error\ stage=([a-z]+)\ op=([a-z]+)\ status=([A-Z_]+)\ t=([0-9.]+)\ ok=([0-9]+) ]] ||
    fl_fail "$1: $line"
  FE_STAGE="${BASH_REMATCH[1]}"
  FE_STATUS="${BASH_REMATCH[3]}"
  FE_T="${BASH_REMATCH[4]}"
  FE_OK="${BASH_REMATCH[5]}"
}

# finished NAME LIMIT_S: the streaming client NAME exits normally within
# LIMIT_S, once every request it still had outstanding has completed; logs
# how they completed.
finished() {
  local c="$1"
  fl_wait_exit "$c" "$2"
  [[ $FL_STATUS -eq 0 ]] || fl_fail "$c exited with status $FL_STATUS"
  grep -q '^kill_client: exit' "${FL_PROC_OUT[$c]}" || fl_fail "$c did not finish"
  fl_log "$c: $(fl_count_lines "$c" '^kill_client: drained') outstanding requests drained ($(grep -o 'drained status=[A-Z_]*' "${FL_PROC_OUT[$c]}" | sort | uniq -c | tr -s ' ' | tr '\n' ';')), $(grep '^kill_client: disconnect' "${FL_PROC_OUT[$c]}")"
}

# --- 1. A connection that idles, then one that streams ------------------------
kill_client ia "$sock_a" ib idle --mode=idle
fl_wait_line ia '^kill_client: listening' 15 >/dev/null
kill_client ib "$sock_b" ia idle --mode=idle --peer="$ip_a"
fl_wait_line ia '^kill_client: holding' 30 >/dev/null
fl_wait_line ib '^kill_client: holding' 30 >/dev/null

kill_client sa "$sock_a" sb stream
fl_wait_line sa '^kill_client: listening' 15 >/dev/null
kill_client sb "$sock_b" sa stream --peer="$ip_a"
fl_wait_line sa '^kill_client: ready' 30 >/dev/null
fl_wait_line sb '^kill_client: ready' 30 >/dev/null
# Both ends have completed requests, and have more in flight.
fl_wait_line sa '^c 31 ' 30 >/dev/null
fl_wait_line sb '^c 31 ' 30 >/dev/null
fl_wait_counters "streaming" a 5 "d['connections'] == 2 and d['sessions'] == 2"
fl_wait_counters "streaming" b 5 "d['connections'] == 2 and d['sessions'] == 2"
fl_log "both ends stream: $(fl_count_lines sa '^c .* RDP_OK') completions on A's side, $(fl_count_lines sb '^c .* RDP_OK') on B's"

kill_time="$(fl_now)"
fl_signal_daemon b KILL || true
[[ $FL_STATUS -eq 137 ]] || fl_fail "daemon b ended with status $FL_STATUS after SIGKILL (137 expected)"
fl_log "SIGKILL to daemon b"

first_error sb 5
sb_after="$(fl_since "$kill_time" "$FE_T")"
fl_log "B's client: first failure $FE_STATUS ($FE_STAGE) $sb_after s after the kill, after $FE_OK requests"
case "$FE_STATUS" in
  RDP_ERR_CONN_ABORTED | RDP_ERR_NET_DOWN) ;;
  *) fl_fail "B's client failed with $FE_STATUS (RDP_ERR_CONN_ABORTED or RDP_ERR_NET_DOWN expected)" ;;
esac
awk -v s="$sb_after" 'BEGIN { exit !(s <= 5) }' || fl_fail "B's client noticed only after $sb_after s"

first_error sa 10
sa_after="$(fl_since "$kill_time" "$FE_T")"
fl_log "A's client: first failure $FE_STATUS ($FE_STAGE) $sa_after s after the kill, after $FE_OK requests"
case "$FE_STATUS" in
  RDP_ERR_CONN_ABORTED | RDP_ERR_CONN_RESET) ;;
  *) fl_fail "A's client failed with $FE_STATUS (RDP_ERR_CONN_ABORTED or RDP_ERR_CONN_RESET expected)" ;;
esac
awk -v s="$sa_after" 'BEGIN { exit !(s <= 10) }' || fl_fail "A's client noticed only after $sa_after s"

# Every request still outstanding completes too (the clients give up with
# "stalled" after 30 s without progress), and both exit normally.
finished sb 40
finished sa 40
if [[ $(fl_count_lines sb '^kill_client: drained status=RDP_ERR_CONN_ABORTED|^kill_client: drained status=RDP_ERR_NET_DOWN|^kill_client: drained status=RDP_OK') -ne $(fl_count_lines sb '^kill_client: drained') ]]; then
  fl_fail "B's client drained requests with unexpected statuses"
fi

# --- 2. A holds nothing of the streaming client --------------------------------
fl_wait_counters "streaming client gone" a 5 \
  "d['sessions'] == 1 and d['connections'] == 1 and d['arenas'] == 1 and d['registrations'] == 2"
if grep -q 'broke: retries exhausted' "${FL_LOG[a]}"; then
  fl_log "daemon a logged: $(grep -o 'connection [0-9]* to [0-9.]* broke: retries exhausted.*' "${FL_LOG[a]}" | head -n 1)"
fi

# The idle client of the dead daemon: its daemon is gone.
touch "$FL_TMP/ib.release"
fl_wait_exit ib 10
[[ $FL_STATUS -eq 0 ]] || fl_fail "ib exited with status $FL_STATUS"
fl_log "ib: $(grep '^kill_client: disconnect' "${FL_PROC_OUT[ib]}")"

# --- 3. B again; new connections both ways -------------------------------------
fl_start_daemon b "$sock_b" "${daemon_b[@]}"
fl_wait_baseline "after the restart" b 5
fl_transfer "b-to-a" 120 "$transfer_bin" \
  --listen_socket="$sock_a" --connect_socket="$sock_b" --peer="$ip_a" \
  --sizes=4096,1048576 --depth=4 --connections=2 --clients=2 --timeout_s=30
fl_transfer "a-to-b" 120 "$transfer_bin" \
  --listen_socket="$sock_b" --connect_socket="$sock_a" --peer="$ip_b" \
  --sizes=4096,1048576 --depth=4 --connections=2 --clients=2 --timeout_s=30

# --- 4. Everything lets go ---------------------------------------------------
touch "$FL_TMP/ia.release"
fl_wait_exit ia 10
[[ $FL_STATUS -eq 0 ]] || fl_fail "ia exited with status $FL_STATUS"
fl_log "ia: $(grep '^kill_client: disconnect' "${FL_PROC_OUT[ia]}")"
fl_wait_baseline "before the SIGTERM round" a 5
fl_wait_baseline "before the SIGTERM round" b 5

# --- 5. SIGTERM to B while its client streams ----------------------------------
kill_client ta "$sock_a" tb term
fl_wait_line ta '^kill_client: listening' 15 >/dev/null
kill_client tb "$sock_b" ta term --peer="$ip_a"
fl_wait_line ta '^c 31 ' 30 >/dev/null
fl_wait_line tb '^c 31 ' 30 >/dev/null
fl_wait_counters "streaming again" a 5 "d['connections'] == 1 and d['sessions'] == 1"
fl_wait_counters "streaming again" b 5 "d['connections'] == 1 and d['sessions'] == 1"
disconnects_a="$(fl_counter a peer_disconnects)"

# A clean stop although work is in flight: status 0 within 5 s, no socket,
# no DPDK runtime folder, no process of B's left.
term_time="$(fl_now)"
fl_clean_stop b "$prefix_b"
term_s="$(fl_since "$term_time")"
if pgrep -f -- "--file_prefix=$prefix_b( |\$)" >/dev/null; then
  fl_fail "a process of daemon b is still running after its exit: $(pgrep -a -f -- "--file_prefix=$prefix_b( |\$)")"
fi

# B's client: the daemon shut down, so its connection was aborted; every
# request it had outstanding completes with that too. A request it posts
# once it has seen the daemon go fails at once with RDP_ERR_NET_DOWN (the
# daemon is unreachable), which may come before it reaps a completion.
first_error tb 5
tb_after="$(fl_since "$term_time" "$FE_T")"
fl_log "B's client: first failure $FE_STATUS ($FE_STAGE) $tb_after s after SIGTERM, after $FE_OK requests"
[[ $FE_STATUS == RDP_ERR_CONN_ABORTED ||
  ($FE_STATUS == RDP_ERR_NET_DOWN && $FE_STAGE == post) ]] ||
  fl_fail "B's client failed with $FE_STATUS ($FE_STAGE) after SIGTERM (RDP_ERR_CONN_ABORTED expected, or RDP_ERR_NET_DOWN for a post)"
tb_stage="$FE_STAGE"
# A's client: B said farewell (DREQ) before it stopped, so a reset, not a
# time-out after retries.
first_error ta 5
ta_after="$(fl_since "$term_time" "$FE_T")"
ta_stage="$FE_STAGE"
fl_log "A's client: first failure $FE_STATUS ($FE_STAGE) $ta_after s after SIGTERM, after $FE_OK requests"
[[ $FE_STATUS == RDP_ERR_CONN_RESET ]] ||
  fl_fail "A's client failed with $FE_STATUS after B's SIGTERM (RDP_ERR_CONN_RESET expected: B should have sent DREQ)"
finished tb 10
# check_drained WHO LABEL STAGE STATUS: the requests client WHO drained
# after its first failure (at STAGE) all ended with STATUS. Requests
# complete in order. After a failed completion, every request still
# outstanding ended so. After a post refused because the daemon had gone or
# the connection was reset, the ones outstanding may begin with requests
# finished before that, which the client had not reaped yet (RDP_OK);
# every one after them ended with STATUS.
check_drained() {
  local who="$1" label="$2" stage="$3" status="$4" statuses ok
  statuses="$(grep -o 'drained status=[A-Z_]*' "${FL_PROC_OUT[$who]}" |
    sed 's/^drained status=//' | tr '\n' ' ')"
  ok="^($status )*\$"
  [[ $stage == post ]] && ok="^(RDP_OK )*($status )*\$"
  [[ $statuses =~ $ok ]] ||
    fl_fail "$label: outstanding requests after its first failure ($stage) ended with: $statuses"
}
check_drained tb "B's client" "$tb_stage" RDP_ERR_CONN_ABORTED
finished ta 10
# The rest of the window: the first failure's request was a completion
# (and not drained), or was never posted.
drained="$(fl_count_lines tb '^kill_client: drained')"
[[ $drained -eq 7 ]] || fl_fail "B's client drained $drained requests after its first failure (7 expected)"
check_drained ta "A's client" "$ta_stage" RDP_ERR_CONN_RESET
fl_wait_baseline "after B's SIGTERM" a 5
[[ $(fl_json_get "$FL_JSON" peer_disconnects) -eq $((disconnects_a + 1)) ]] ||
  fl_fail "A counted $(fl_json_get "$FL_JSON" peer_disconnects) peer disconnects, not $((disconnects_a + 1))"
fl_clean_stop a "$prefix_a"

fl_log "PASS in $(fl_since "$test_start") s (SIGKILL: B's client noticed after $sb_after s, A's after $sa_after s; SIGTERM: B stopped in $term_s s, its client noticed after $tb_after s, A's after $ta_after s)"
