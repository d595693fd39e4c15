#!/usr/bin/env bash
# The chaos soak (tests/soak/chaos_soak.cc drives the clients): two
# rdmaplaned daemons joined by memif; good client pairs move verified data
# through daemon A and from A to B, while hostile clients, several at a
# time, are killed mid-transfer, close and disconnect mid-transfer, punch
# holes in their arenas, scribble on their rings, forge descriptors, exhaust
# their sessions and arenas, and flood doorbells.
#
# Checked throughout by the driver (its header lists each invariant): every
# good request completes exactly once with every byte verified, every
# hostile kind ends as it must (refusal codes, limits, access errors,
# refused punches, progress during a flood), no stamped block is lost,
# misplaced or lands late, every kind ran at least its minimum and the good
# pairs completed operations.
# Checked here after the soak, against what each daemon held before it:
# both daemons are up; sessions, connections, registrations, arenas, port
# mbufs in use and arenas held by frames are back to 0; the hugepages each
# daemon maps, its descriptors, client memfd mappings and threads are back
# to what they were;
# RSS grew by at most RSS_BOUND_KB; the daemon logs hold no error record and
# no sanitizer report (the soak provokes warnings on purpose, never errors).
#
#   chaos_soak_test.sh FAULT_LIB RDMAPLANED RDMAPLANECTL CHAOS_SOAK [--faults]
#
# RDP_SOAK_SECONDS (default 60) runs it longer; RDP_FUZZ_SEED (decimal)
# replays the driver's choices (the seed is printed at the start). As root
# it reserves 2 MiB hugepages for the run (so that hugetlb arenas are
# attacked too) and gives them back.
#
# --faults: shows that each invariant is seen. The soak runs a few seconds
# with each fault of chaos_soak --inject in turn and must FAIL naming the
# right invariant; then a session left behind (with 64 MiB written through
# the daemon) must fail the after-run checks of sessions, descriptors,
# memfd mappings and RSS (and hugepages, when reserved); then a daemon short
# of descriptors must fail the log check; then a data port that holds some
# frames for ever must fail the check of packet buffers in use.
set -euo pipefail

if [[ $# -ne 4 && ( $# -ne 5 || $5 != --faults ) ]]; then
  echo "usage: $0 FAULT_LIB RDMAPLANED RDMAPLANECTL CHAOS_SOAK [--faults]" >&2
  exit 2
fi
FL_NAME=chaos_soak
# shellcheck source=tests/e2e/fault_lib.sh
source "$1"
daemon_bin="$2"
FL_CTL="$3"
soak_bin="$4"
faults=0
[[ ${5:-} == --faults ]] && faults=1
for bin in "$daemon_bin" "$FL_CTL" "$soak_bin"; do
  [[ -x $bin ]] || fl_fail "no executable at $bin"
done
seconds="${RDP_SOAK_SECONDS:-60}"
# How much a daemon's resident memory may grow over the soak: its pools are
# made at start, and every client mapping is given back at the end, so what
# remains is the allocator's slack (measured: a few MiB). A daemon built
# with a sanitizer keeps freed memory on purpose (AddressSanitizer's
# quarantine holds up to 256 MiB of freed blocks to catch late uses;
# ThreadSanitizer keeps shadow and history for what was touched): 45-60 MiB
# of growth was measured in a 30 s soak under each. There the bound only
# catches runaway growth; under AddressSanitizer, LeakSanitizer checks
# every allocation when the daemon exits, and its report fails the log
# check below.
RSS_BOUND_KB=$((32 * 1024))
if grep -qa -m1 -e __asan_init -e __tsan_init "$daemon_bin"; then
  RSS_BOUND_KB=$((320 * 1024))
fi
fl_init chaos_soak

# Hugepages for the run, given back at the end (even on failure).
hugepages_file=/proc/sys/vm/nr_hugepages
hugepages_before=""
restore_hugepages() {
  if [[ -n $hugepages_before ]]; then
    echo "$hugepages_before" >"$hugepages_file" 2>/dev/null || true
  fi
}
leaker_pid=""
end_leaker() {
  if [[ -n $leaker_pid ]]; then
    kill -KILL "$leaker_pid" 2>/dev/null || true
    leaker_pid=""
  fi
}
trap 'status=$?; end_leaker; restore_hugepages; (exit $status); fl_cleanup' EXIT
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
# Per-user allowances small enough that exhausting them is quick (the
# driver's exhaust_sessions knows the 48).
common=(--mtu=1024 --max_sessions_per_user=48 --max_arenas_per_user=256
  --max_arena_bytes_per_user=2147483648)
fl_start_daemon a "$sock_a" "$daemon_bin" --socket="$sock_a" \
  --file_prefix="$prefix_a" --port="net_memif0,role=server,socket=$memif" \
  --ip="$ip_a" "${common[@]}"
fl_start_daemon b "$sock_b" "$daemon_bin" --socket="$sock_b" \
  --file_prefix="$prefix_b" --port="net_memif0,role=client,socket=$memif" \
  --ip="$ip_b" "${common[@]}"

AT_REST="$FL_BASELINE and d['port_mbufs_in_use'] == 0 and d['arenas_held_by_frames'] == 0"
fl_wait_counters "at start" a 20 "$AT_REST"
fl_wait_counters "at start" b 20 "$AT_REST"
# The baseline is what each daemon holds with its data port linked: the
# memif server maps its client's region (a memfd mapping, and descriptors)
# only once the client has connected, which on a busy machine may come
# after the counters are at rest.
link_of() {
  fl_json_get "$(timeout 10 "$FL_CTL" --socket="${FL_SOCK[$1]}" --json \
    --timeout=5s status)" link
}
for name in a b; do
  for ((i = 0; i < 200; i++)); do
    [[ $(link_of "$name") == up ]] && break
    sleep 0.1
  done
  [[ $(link_of "$name") == up ]] || fl_fail "daemon $name's data port never came up"
done

# What a daemon holds besides its counters: "<descriptors> <memfd mappings>
# <threads> <rss kB> <hugepages kB>". Its hugepages are those it maps
# (smaps_rollup's hugetlb lines: its own and its clients' hugetlb arenas),
# not the machine's free count, which every other process on the machine
# moves too. One it holds without mapping it is a descriptor.
held() {
  local pid="${FL_PID[$1]}"
  echo "$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)" \
    "$(grep -c 'memfd:' "/proc/$pid/maps" || true)" \
    "$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)" \
    "$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")" \
    "$(awk '/^(Shared|Private)_Hugetlb:/ { kb += $2 } END { print kb + 0 }' "/proc/$pid/smaps_rollup")"
}
declare -A before=()
take_baseline() {
  local name
  for name in "$@"; do
    before[$name]="$(held "$name")"
    fl_log "before: daemon $name holds ${before[$name]} (descriptors, client mappings, threads, RSS kB, hugepages kB)"
  done
}

# after_checks NAME...: every after-run invariant; prints one
# "AFTER VIOLATION: <invariant>: ..." line per one broken, and returns 1
# when any was. Waits (at most AFTER_WAIT tenths of a second, for a daemon
# finishing its teardown) for what should come back.
AFTER_WAIT=200
after_checks() {
  local bad=0 name i
  for name in "$@"; do
    fl_alive "$name"
    local json="" ok=0
    for ((i = 0; i < AFTER_WAIT; i++)); do
      json="$(fl_counters "$name")" || fl_fail "rdmaplanectl counters of $name failed"
      if python3 -c 'import json, sys
d = json.loads(sys.argv[1])
sys.exit(0 if eval(sys.argv[2]) else 1)' "$json" "$AT_REST"; then
        ok=1
        break
      fi
      sleep 0.1
    done
    if [[ $ok -eq 0 ]]; then
      local key
      for key in sessions connections registrations arenas port_mbufs_in_use arenas_held_by_frames; do
        local v
        v="$(fl_json_get "$json" "$key")"
        if [[ $v != 0 ]]; then
          echo "AFTER VIOLATION: $key: daemon $name holds $v after the soak, 0 before"
          bad=1
        fi
      done
    fi
    read -r want_fds want_maps want_threads want_rss want_huge <<<"${before[$name]}"
    local fds maps threads rss huge
    for ((i = 0; i < AFTER_WAIT; i++)); do
      read -r fds maps threads rss huge <<<"$(held "$name")"
      [[ $fds == "$want_fds" && $maps == "$want_maps" && $threads == "$want_threads" &&
        $huge == "$want_huge" ]] && break
      sleep 0.1
    done
    [[ $fds == "$want_fds" ]] ||
      { echo "AFTER VIOLATION: descriptors: daemon $name holds $fds, $want_fds before"; bad=1; }
    [[ $maps == "$want_maps" ]] ||
      { echo "AFTER VIOLATION: memfd mappings: daemon $name holds $maps, $want_maps before"; bad=1; }
    [[ $threads == "$want_threads" ]] ||
      { echo "AFTER VIOLATION: threads: daemon $name runs $threads, $want_threads before"; bad=1; }
    [[ $huge == "$want_huge" ]] ||
      { echo "AFTER VIOLATION: hugepages: daemon $name maps $huge kB of hugepages, $want_huge kB before"; bad=1; }
    if ((rss - want_rss > RSS_BOUND_KB)); then
      echo "AFTER VIOLATION: rss: daemon $name's RSS grew by $((rss - want_rss)) kB (from $want_rss), more than $RSS_BOUND_KB kB"
      bad=1
    fi
    fl_log "after: daemon $name holds $fds $maps $threads $rss $huge (descriptors, client mappings, threads, RSS kB, hugepages kB)"
    # Errors are what the soak never causes on purpose (its refusals are
    # warnings); sanitizer reports never are.
    local errors
    errors="$(grep -E '^rdmaplaned\[[0-9]+\] E |ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer|runtime error:' "${FL_LOG[$name]}" | head -n 5 || true)"
    if [[ -n $errors ]]; then
      echo "AFTER VIOLATION: log: daemon $name logged: ${errors//$'\n'/ | }"
      bad=1
    fi
  done
  return "$bad"
}

# run_soak NAME ARGS...: the driver against both daemons; sets soak_status
# and summary.
run_soak() {
  local name="$1"
  shift
  fl_start_proc "$name" "$soak_bin" --socket_a="$sock_a" --socket_b="$sock_b" \
    --peer_a="$ip_a" --peer_b="$ip_b" "$@"
  fl_wait_exit "$name" $((seconds + 300))
  soak_status=$FL_STATUS
  summary="$(grep '^chaos_soak: \(ok\|FAILED\):' "${FL_PROC_OUT[$name]}" | tail -n 1 || true)"
}

if [[ $faults -eq 0 ]]; then
  take_baseline a b
  run_soak soak --seconds="$seconds"
  grep '^chaos_soak: ' "${FL_PROC_OUT[soak]}" | tail -n 5 | sed 's/^/  /'
  if [[ $soak_status -ne 0 || $summary != "chaos_soak: ok:"* ]]; then
    grep -E 'VIOLATION|error' "${FL_PROC_OUT[soak]}" | head -n 20 | sed 's/^/    /' >&2 || true
    fl_fail "the soak driver failed (exit status $soak_status): ${summary:-no summary}"
  fi
  if ! report="$(after_checks a b)"; then
    echo "$report" >&2
    fl_fail "the daemons did not come back to what they held before the soak"
  fi
  fl_log "after: both daemons back to what they held before"
  fl_clean_stop a "$prefix_a"
  fl_clean_stop b "$prefix_b"
  echo "$summary"
  exit 0
fi

# --- --faults: each invariant must see its fault -----------------------------

# fault INJECTION PATTERN: the soak with the fault injected must fail with a
# violation matching PATTERN (grep -E).
fault() {
  local inject="$1" pattern="$2" line
  run_soak "fault-$inject" --seconds=1 --progress_seconds=3 --inject="$inject"
  local out="${FL_PROC_OUT[fault-$inject]}"
  if [[ $soak_status -eq 0 || $summary != "chaos_soak: FAILED:"* ]]; then
    fl_fail "--inject=$inject: the soak did not fail (exit status $soak_status): ${summary:-no summary}"
  fi
  line="$(grep -m 1 -E "VIOLATION: ($pattern)" "$out" || true)"
  if [[ -z $line ]]; then
    grep VIOLATION "$out" | head -n 5 >&2 || true
    fl_fail "--inject=$inject: the soak failed, but no violation matches '$pattern'"
  fi
  fl_log "fault $inject: seen: $line"
  # The daemons serve the next one as new.
  fl_wait_counters "after $inject" a 30 "$AT_REST"
  fl_wait_counters "after $inject" b 30 "$AT_REST"
}

fault corrupt_good 'good pair [a-z]+: bytes differ'
fault post_refused '(close|disconnect)_mid_transfer: post 3 refused: invalid'
fault late_write '(close|disconnect)_mid_transfer: bytes landed after it returned'
fault lost_write '(close|disconnect)_mid_transfer: lost write'
fault misplaced_write '(close|disconnect)_mid_transfer: block 1 holds .* block 0 \(misplaced\)'
fault forge_range 'forged_descriptors: .* the range check, not the responder'"'"'s access check'
fault punch_unsealed 'punch_target: a punch was not refused'
fault exhaust_short 'exhaust_sessions: ended with .* not RDP_ERR_LIMIT'
fault flood_stall 'flood_doorbells: the good pairs made'
fault skip_kind 'coverage: scribble_rings ran 0 times'
fault no_operations 'coverage: the good pairs completed no operations'

# expect_after_violations WHAT "DAEMONS" INVARIANT...: the after-run checks
# of DAEMONS must fail, with a violation of each INVARIANT.
expect_after_violations() {
  local what="$1" daemons="$2" report line invariant
  shift 2
  # shellcheck disable=SC2086 # DAEMONS is a list of names
  if report="$(after_checks $daemons)"; then
    fl_fail "$what: the after-run checks passed"
  fi
  for invariant in "$@"; do
    line="$(grep -m 1 "^AFTER VIOLATION: $invariant:" <<<"$report" || true)"
    [[ -n $line ]] || {
      echo "$report" >&2
      fl_fail "$what: no after-run violation of $invariant"
    }
    fl_log "fault $what: seen: $line"
  done
}

# A session left behind with 64 MiB written through daemon A: the soak
# passes, the after-run checks must not.
take_baseline a b
run_soak fault-leak_session --seconds=1 --inject=leak_session
leaker_pid="$(sed -n 's/^chaos_soak: injected: leaker pid \([0-9]*\)$/\1/p' "${FL_PROC_OUT[fault-leak_session]}")"
[[ -n $leaker_pid ]] || fl_fail "--inject=leak_session: no leaker started"
AFTER_WAIT=30 # what is leaked stays: no use waiting long for it
want=(sessions descriptors 'memfd mappings' rss)
[[ -n $hugepages_before ]] && want+=(hugepages)
expect_after_violations leak_session "a b" "${want[@]}"
end_leaker
fl_wait_counters "after the leak" a 30 "$AT_REST"

# A daemon short of descriptors logs an error record the soak did not ask
# for: the log check must see it. A third daemon on its own (its memif has
# no peer; the soak stays on it).
sock_c="$FL_TMP/c.sock"
prefix_c=""
fl_prefix prefix_c c
fl_start_daemon c "$sock_c" prlimit --nofile=160 -- "$daemon_bin" --socket="$sock_c" \
  --file_prefix="$prefix_c" --port="net_memif0,role=server,socket=$FL_TMP/memif-c.sock" \
  --ip=10.0.0.3 "${common[@]}"
fl_wait_counters "at start" c 20 "$AT_REST"
take_baseline c
fl_start_proc fault-log "$soak_bin" --socket_a="$sock_c" --seconds=1
fl_wait_exit fault-log $((seconds + 300))
expect_after_violations short_of_descriptors c log
fl_signal_daemon c KILL || true

# A port that holds frames far longer than the after-run checks wait: a
# pair of daemons of their own, the first holding one frame in ten on its
# transmit side for 60 s, the most --port_faults allows (the transport
# retransmits past them). The after-run check of the packet buffers in use
# must see the frames held. (At 10 s, the frames of the soak's first
# second could be released while a check slowed by a busy machine still
# looked: the soak's remote traffic may all come early.)
sock_e="$FL_TMP/e.sock" sock_f="$FL_TMP/f.sock"
prefix_e="" prefix_f=""
fl_prefix prefix_e e
fl_prefix prefix_f f
fl_start_daemon e "$sock_e" "$daemon_bin" --socket="$sock_e" \
  --file_prefix="$prefix_e" --port="net_memif0,role=server,socket=$FL_TMP/memif-e.sock" \
  --ip=10.0.1.1 --port_faults=reorder=0.1,reorder_us=60000000,seed=1 "${common[@]}"
fl_start_daemon f "$sock_f" "$daemon_bin" --socket="$sock_f" \
  --file_prefix="$prefix_f" --port="net_memif0,role=client,socket=$FL_TMP/memif-e.sock" \
  --ip=10.0.1.2 "${common[@]}"
fl_wait_counters "at start" e 20 "$AT_REST"
fl_wait_counters "at start" f 20 "$AT_REST"
take_baseline e
fl_start_proc fault-held_frames "$soak_bin" --socket_a="$sock_e" --socket_b="$sock_f" \
  --peer_a=10.0.1.1 --peer_b=10.0.1.2 --seconds=1
fl_wait_exit fault-held_frames $((seconds + 300))
AFTER_WAIT=30 # at least 3 s: every frame the soak sent is still held
expect_after_violations held_frames e port_mbufs_in_use
fl_signal_daemon e KILL || true
fl_signal_daemon f KILL || true
fl_clean_stop a "$prefix_a"
fl_clean_stop b "$prefix_b"
echo "chaos_soak: faults: every injected fault was seen by its invariant"
