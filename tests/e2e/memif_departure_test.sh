#!/usr/bin/env bash
# A memif peer that leaves in the middle of bursts, again and again: DPDK's
# memif unmaps a departed peer's rings from its own thread while the engine
# may be inside a burst on them (dataplane/port/burst_guard.h). Daemon A is
# the memif server and stays up throughout; its peers come and go:
#   1. Four times: daemon B (the memif client) starts, a client on each
#      daemon streams 1 MiB RDMA WRITEs and READs to the other (8
#      outstanding), and B is killed with SIGKILL mid-stream. A's client sees
#      its requests end, and once it has gone A holds nothing: no session,
#      connection, registration or arena, no frame holding client memory,
#      and no buffer of the port's pools in use.
#   2. Three times: frame_fuzzer attaches, sends fuzzed frames as fast as it
#      can and leaves without lingering; A holds nothing afterwards either.
#   3. A last transfer across a new B proves A's port still carries
#      traffic, and A stops cleanly.
# The number of bursts the departures cut short is logged (it depends on
# timing; the counters must come back to rest whatever it is). The fuzzer's
# seed is new every run and printed; RDP_FUZZ_SEED=N (bazel test
# --test_env=RDP_FUZZ_SEED=N) repeats a run's fuzzed frames.
#
#   memif_departure_test.sh FAULT_LIB RDMAPLANED RDMAPLANECTL
#       RDMAPLANE_TRANSFER KILL_CLIENT FRAME_FUZZER
set -euo pipefail

if [[ $# -ne 6 ]]; then
  echo "usage: $0 FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER KILL_CLIENT FRAME_FUZZER" >&2
  exit 2
fi
# shellcheck source=tests/e2e/fault_lib.sh
source "$1"
daemon_bin="$2"
FL_CTL="$3"
transfer_bin="$4"
client_bin="$5"
fuzzer_bin="$6"
fl_init memif_departure_test
for bin in "$daemon_bin" "$transfer_bin" "$client_bin" "$fuzzer_bin"; do
  [[ -x $bin ]] || fl_fail "no executable at $bin"
done
test_start="$(fl_now)"
fuzz_seed="${RDP_FUZZ_SEED:-$(((RANDOM << 30 | RANDOM << 15 | RANDOM) + 1))}"
[[ $fuzz_seed =~ ^([1-9][0-9]{0,17}|0[xX][0-9a-fA-F]{1,15})$ ]] ||
  fl_fail "RDP_FUZZ_SEED=\"$fuzz_seed\" is not a number above 0 (decimal, or 0x hex below 2^60)"
fl_log "seed $fuzz_seed (RDP_FUZZ_SEED=$fuzz_seed repeats this run)"

ip_a=10.0.0.1
ip_b=10.0.0.2
sock_a="$FL_TMP/a.sock"
sock_b="$FL_TMP/b.sock"
memif="$FL_TMP/memif.sock" # an abstract name, unique to this run
prefix_a="" prefix_b="" prefix_f=""
fl_prefix prefix_a a
fl_prefix prefix_b b
fl_prefix prefix_f f
common=(--mtu=1024 --log_level=debug)
daemon_b=("$daemon_bin" --socket="$sock_b" --file_prefix="$prefix_b"
  --port="net_memif0,role=client,socket=$memif" --ip="$ip_b" "${common[@]}")
fl_start_daemon a "$sock_a" "$daemon_bin" --socket="$sock_a" \
  --file_prefix="$prefix_a" --port="net_memif0,role=server,socket=$memif" \
  --ip="$ip_a" "${common[@]}"
fl_wait_baseline "at start" a 5

# A at rest: nothing of any client, and no buffer in use.
AT_REST="$FL_BASELINE and d['arenas_held_by_frames'] == 0 and d['port_mbufs_in_use'] == 0"

# --- 1. B killed mid-stream, four times ---------------------------------------
for round in 1 2 3 4; do
  fl_start_daemon b "$sock_b" "${daemon_b[@]}"
  fl_wait_baseline "round $round: b at start" b 5
  fl_start_proc "sa$round" "$client_bin" --socket="$sock_a" \
    --service="stream$round" --dir="$FL_TMP" --name="sa$round" \
    --peer_name="sb$round" --size=1048576 --depth=8
  fl_wait_line "sa$round" '^kill_client: listening' 15 >/dev/null
  fl_start_proc "sb$round" "$client_bin" --socket="$sock_b" \
    --service="stream$round" --dir="$FL_TMP" --name="sb$round" \
    --peer_name="sa$round" --size=1048576 --depth=8 --peer="$ip_a"
  fl_wait_line "sa$round" '^c 31 ' 30 >/dev/null
  fl_wait_line "sb$round" '^c 31 ' 30 >/dev/null
  fl_signal_daemon b KILL || true
  [[ $FL_STATUS -eq 137 ]] ||
    fl_fail "round $round: daemon b ended with status $FL_STATUS after SIGKILL (137 expected)"
  for c in "sa$round" "sb$round"; do
    fl_wait_exit "$c" 40
    [[ $FL_STATUS -eq 0 ]] || fl_fail "round $round: $c exited with status $FL_STATUS"
    grep -q '^kill_client: exit' "${FL_PROC_OUT[$c]}" ||
      fl_fail "round $round: $c did not finish"
  done
  fl_wait_counters "round $round: b killed, its peer's client gone" a 10 "$AT_REST"
  rm -f "$sock_b"
done

# --- 2. A fuzzer that leaves at once, three times -----------------------------
for round in 1 2 3; do
  seed=$((fuzz_seed + round))
  fl_start_proc "fuzzer$round" "$fuzzer_bin" --memif="$memif" \
    --file_prefix="$prefix_f" --ip="$ip_b" --daemon_ip="$ip_a" \
    --frames=3000 --seed="$seed" --linger_ms=0
  fl_wait_exit "fuzzer$round" 60
  [[ $FL_STATUS -eq 0 ]] ||
    fl_fail "fuzzer round $round exited with status $FL_STATUS (seed $seed)"
  fl_wait_counters "fuzzer round $round: gone" a 10 "$AT_REST"
done

# --- 3. A still carries traffic ------------------------------------------------
fl_start_daemon b "$sock_b" "${daemon_b[@]}"
fl_wait_baseline "b again" b 5
fl_transfer "after the departures" 120 "$transfer_bin" \
  --listen_socket="$sock_a" --connect_socket="$sock_b" --peer="$ip_a" \
  --sizes=4096,1048576 --depth=4 --timeout_s=30
fl_wait_counters "after the transfer" a 10 "$AT_REST"
fl_log "daemon a: $(fl_counter a port_link_down) link-downs, $(fl_counter a port_burst_faults) bursts cut short ($(fl_counter a port_burst_fault_frames) frames lost with the peer)"
fl_clean_stop b "$prefix_b"
fl_clean_stop a "$prefix_a"
fl_log "PASS in $(fl_since "$test_start") s"
