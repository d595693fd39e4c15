#!/usr/bin/env bash
# The chaos soak (tests/soak/chaos_soak.cc drives the clients): two
# rdmaplaned daemons joined by memif; good client pairs move verified data
# through daemon A and from A to B, while hostile clients at random are
# killed mid-transfer, close and disconnect mid-transfer, punch holes in
# their hugetlb and regular arenas, scribble on their rings, forge and alter
# descriptors, exhaust their sessions and arenas, and flood doorbells.
#
# Checked throughout by the driver: every good request completes exactly
# once with every byte verified, every hostile request ends in bounded time,
# nothing succeeds after its peer was killed, no byte lands after a close.
# Checked here: both daemons stay up, and at the end give back every
# session, connection, registration and arena, every descriptor and every
# client mapping they held before the soak.
#
#   chaos_soak_test.sh FAULT_LIB RDMAPLANED RDMAPLANECTL CHAOS_SOAK
#
# RDP_SOAK_SECONDS (default 60) runs it longer; RDP_SOAK_SEED replays the
# driver's choices. As root it reserves 2 MiB hugepages for the run (so that
# hugetlb arenas are attacked too) and gives them back.
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 FAULT_LIB RDMAPLANED RDMAPLANECTL CHAOS_SOAK" >&2
  exit 2
fi
FL_NAME=chaos_soak
# shellcheck source=tests/e2e/fault_lib.sh
source "$1"
daemon_bin="$2"
FL_CTL="$3"
soak_bin="$4"
for bin in "$daemon_bin" "$FL_CTL" "$soak_bin"; do
  [[ -x $bin ]] || fl_fail "no executable at $bin"
done
seconds="${RDP_SOAK_SECONDS:-60}"
seed="${RDP_SOAK_SEED:-0}"
fl_init chaos_soak

# Hugepages for the run, given back at the end (even on failure).
hugepages_file=/proc/sys/vm/nr_hugepages
hugepages_before=""
restore_hugepages() {
  if [[ -n $hugepages_before ]]; then
    echo "$hugepages_before" >"$hugepages_file" 2>/dev/null || true
  fi
}
trap 'status=$?; restore_hugepages; (exit $status); fl_cleanup' EXIT
if [[ $(id -u) -eq 0 && -w $hugepages_file ]]; then
  hugepages_before="$(cat "$hugepages_file")"
  echo $((hugepages_before + 128)) >"$hugepages_file" || true
  fl_log "hugepages: $(cat "$hugepages_file") (were $hugepages_before)"
else
  fl_log "not root: no hugepages reserved, arenas use regular pages"
fi

ip_a=10.0.0.1
ip_b=10.0.0.2
sock_a="$FL_TMP/a.sock"
sock_b="$FL_TMP/b.sock"
memif="$FL_TMP/memif.sock"
prefix_a="" prefix_b=""
fl_prefix prefix_a a
fl_prefix prefix_b b
# Per-user allowances small enough that exhausting them is quick.
common=(--mtu=1024 --max_sessions_per_user=48 --max_arenas_per_user=256
  --max_arena_bytes_per_user=2147483648)
fl_start_daemon a "$sock_a" "$daemon_bin" --socket="$sock_a" \
  --file_prefix="$prefix_a" --port="net_memif0,role=server,socket=$memif" \
  --ip="$ip_a" "${common[@]}"
fl_start_daemon b "$sock_b" "$daemon_bin" --socket="$sock_b" \
  --file_prefix="$prefix_b" --port="net_memif0,role=client,socket=$memif" \
  --ip="$ip_b" "${common[@]}"
fl_wait_baseline "at start" a 5
fl_wait_baseline "at start" b 5

# What each daemon holds besides sessions: descriptors, and mappings of
# client memory (memfds).
held() { # NAME: "<descriptors> <memfd mappings>"
  local pid="${FL_PID[$1]}"
  echo "$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l) $(grep -c 'memfd:' "/proc/$pid/maps" || true)"
}
held_a="$(held a)"
held_b="$(held b)"
fl_log "before: daemon a holds $held_a, daemon b $held_b (descriptors, client mappings)"

fl_start_proc soak "$soak_bin" --socket_a="$sock_a" --socket_b="$sock_b" \
  --peer_a="$ip_a" --peer_b="$ip_b" --seconds="$seconds" --seed="$seed"
fl_wait_exit soak $((seconds + 180))
soak_status=$FL_STATUS
grep '^chaos_soak: ' "${FL_PROC_OUT[soak]}" | tail -n 5 | sed 's/^/  /'
summary="$(grep '^chaos_soak: \(ok\|FAILED\):' "${FL_PROC_OUT[soak]}" | tail -n 1 || true)"
if [[ $soak_status -ne 0 || $summary != "chaos_soak: ok:"* ]]; then
  grep -E 'VIOLATION|error' "${FL_PROC_OUT[soak]}" | head -n 20 | sed 's/^/    /' >&2 || true
  fl_fail "the soak driver failed (exit status $soak_status): ${summary:-no summary}"
fi

# The daemons survived and give everything back.
fl_alive a
fl_alive b
fl_wait_baseline "after the soak" a 20
fl_wait_baseline "after the soak" b 20
for name in a b; do
  want="$held_a"
  [[ $name == b ]] && want="$held_b"
  now=""
  for ((i = 0; i < 100; i++)); do
    now="$(held "$name")"
    [[ $now == "$want" ]] && break
    sleep 0.1
  done
  [[ $now == "$want" ]] ||
    fl_fail "daemon $name holds $now (descriptors, client mappings) after the soak, $want before"
done
fl_log "after: both daemons back to what they held before ($held_a; $held_b)"
fl_clean_stop a "$prefix_a"
fl_clean_stop b "$prefix_b"
echo "$summary"
