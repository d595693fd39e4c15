#!/usr/bin/env bash
# A daemon's data port under fuzzed frames, end to end: one rdmaplaned (the
# memif server) and frame_fuzzer as its memif peer, which checks that the
# daemon answers ARP and rejects a CM REQ for an unknown service, sends
# 20,000 fuzzed ARP, CM and RC frames (valid, mutated, truncated, random;
# see frame_fuzzer.cc), and checks ARP and REQ/REJ again. Meanwhile clients
# of the daemon keep opening sessions, registering memory, moving verified
# bytes over a connection inside the daemon and disconnecting. Then:
#   - the fuzzer passed, and the daemon still runs and answers rdmaplanectl;
#   - its counters show the garbage (bad_control_frames, engine_rx_rejected,
#     engine_rx_unknown_qpn up, every frame received) and nothing is left
#     (no sessions, connections, registrations or arenas);
#   - another client is served; SIGTERM stops the daemon with status 0.
#
#   frame_fuzz_test.sh FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER
#       FRAME_FUZZER
#
# The seed is random and printed; RDP_FUZZ_SEED=N in the environment
# (bazel test --test_env=RDP_FUZZ_SEED=N) repeats a run.
set -euo pipefail

if [[ $# -ne 5 ]]; then
  echo "usage: $0 FAULT_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER FRAME_FUZZER" >&2
  exit 2
fi
# shellcheck source=tests/e2e/fault_lib.sh
source "$1"
daemon_bin="$2"
FL_CTL="$3"
transfer_bin="$4"
fuzzer_bin="$5"
fl_init frame_fuzz_test
for bin in "$daemon_bin" "$transfer_bin" "$fuzzer_bin"; do
  [[ -x $bin ]] || fl_fail "no executable at $bin"
done
test_start="$(fl_now)"

frames=20000
seed="${RDP_FUZZ_SEED:-$(((RANDOM << 30 | RANDOM << 15 | RANDOM) + 1))}"
[[ $seed =~ ^([1-9][0-9]{0,17}|0[xX][0-9a-fA-F]{1,15})$ ]] ||
  fl_fail "RDP_FUZZ_SEED=\"$seed\" is not a number above 0 (decimal, or 0x hex below 2^60)"
fl_log "seed $seed (RDP_FUZZ_SEED=$seed repeats this run)"

ip_d=10.0.0.1
ip_f=10.0.0.2
sock="$FL_TMP/d.sock"
memif="$FL_TMP/memif.sock" # an abstract name, unique to this run
prefix_d="" prefix_f=""
fl_prefix prefix_d d
fl_prefix prefix_f f
fl_start_daemon d "$sock" "$daemon_bin" --socket="$sock" \
  --file_prefix="$prefix_d" --port="net_memif0,role=server,socket=$memif" \
  --ip="$ip_d" --mtu=1024 --log_level=debug
fl_wait_baseline "at start" d 5
before="$(fl_counters d)"

# The fuzzer sends at 8,000 frames a second (about 2.5 s), so that the
# clients below overlap it, and leaves right after its last check (a peer
# leaving mid-burst is memif_departure_test's subject).
fl_start_proc fuzzer "$fuzzer_bin" --memif="$memif" --file_prefix="$prefix_f" \
  --ip="$ip_f" --daemon_ip="$ip_d" --frames="$frames" --seed="$seed" \
  --rate=8000
fl_wait_line fuzzer '^frame_fuzzer: REQ before: ok' 30 >/dev/null
fl_log "the fuzzer reached the daemon; fuzzing"

# Clients while the frames fly: each run opens two sessions, registers
# memory, connects them through the daemon, writes and reads verified bytes,
# and disconnects.
runs=0
while :; do
  fl_transfer "during-$runs" 60 "$transfer_bin" --listen_socket="$sock" \
    --service="fuzz-client-$runs" --sizes=4096,65536 --depth=2
  runs=$((runs + 1))
  if grep -q '^frame_fuzzer: fuzz .*frames: ' "${FL_PROC_OUT[fuzzer]}"; then
    break
  fi
  [[ $runs -lt 200 ]] || fl_fail "the fuzzer did not finish fuzzing"
done
fl_log "$runs client runs served while fuzzing"

fl_wait_exit fuzzer 60
sed 's/^/    /' "${FL_PROC_OUT[fuzzer]}"
[[ $FL_STATUS -eq 0 ]] || fl_fail "frame_fuzzer exited with status $FL_STATUS (seed $seed)"
grep -q '^frame_fuzzer: ok:' "${FL_PROC_OUT[fuzzer]}" ||
  fl_fail "frame_fuzzer did not report ok (seed $seed)"

# The daemon lives, saw every frame, counted the garbage and holds nothing.
fl_alive d
fl_wait_baseline "after fuzzing" d 5
after="$FL_JSON"
python3 - "$before" "$after" "$frames" <<'PY' || fl_fail "the daemon's counters do not show the fuzzing (seed $seed)"
import json, sys
before, after, frames = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
grew = {k: after[k] - before[k] for k in after}
for k in ("port_rx_frames", "bad_control_frames", "engine_rx_rejected",
          "engine_rx_unknown_qpn", "remote_refused", "arp_replies_sent",
          "engine_control_frames_in", "peer_disconnects", "sessions_reclaimed"):
    print(f"    {k}: +{grew[k]}")
checks = [
    ("every frame reached the port", grew["port_rx_frames"] >= frames + 4),
    ("malformed control frames counted", grew["bad_control_frames"] > 0),
    ("malformed RoCE frames counted", grew["engine_rx_rejected"] > 0),
    ("frames for unknown queue pairs counted", grew["engine_rx_unknown_qpn"] > 0),
    ("the two probe REQs refused", grew["remote_refused"] >= 2),
    ("the two probe ARPs answered", grew["arp_replies_sent"] >= 2),
]
failed = [name for name, ok in checks if not ok]
for name in failed:
    print(f"    not so: {name}")
sys.exit(1 if failed else 0)
PY

fl_transfer "after" 60 "$transfer_bin" --listen_socket="$sock" \
  --service=fuzz-client-after --sizes=4096,1048576 --depth=4
fl_wait_baseline "at the end" d 5
fl_clean_stop d "$prefix_d"
[[ ! -e "$(fl_runtime_base)/$prefix_f" ]] ||
  fl_fail "frame_fuzzer left $(fl_runtime_base)/$prefix_f behind"
fl_log "PASS in $(fl_since "$test_start") s (seed $seed, $runs client runs during the fuzzing)"
