#!/usr/bin/env bash
# The measurements behind bench/knobs, on binaries already built:
#
#   knobs_run.sh --bin_dir=DIR [--out=DIR] [--rounds=N] [--quick] [--keep]
#       [--hugepages=auto|skip]
#
# DIR holds rdmaplaned, rdmaplane_perf and eth_port_benchmark (bench/knobs
# builds them with `bazel build -c opt`); they are copied first.
#
# What one knob does to rdmaplane, each measured in the same run against the
# daemon's default, in --rounds rounds (default 5) that each measure every
# setting once, one after another, so that a drift of the machine's load
# spreads over all settings alike; each figure is the median of the rounds:
#   burst      --burst=1,8,32,128: 64-byte WRITEs (depth 32) inside one
#              daemon and between two over memif; 64 KiB WRITEs over memif;
#   mtu        --mtu=1024,2048,4096 between two daemons over memif (4096,
#              the default there): WRITE and READ of 64 KiB and 1 MiB;
#   hugepages  off and on: clients' arenas (RDMAPLANE_HUGEPAGES=0 or not)
#              inside one daemon, and arenas plus the daemons' DPDK memory
#              (--hugepages) over memif: 64 KiB WRITEs and 64-byte WRITEs
#              over 64 MiB per side. Needs free 2 MiB pages and a hugetlbfs:
#              as root the run reserves 1024 pages and mounts a private
#              hugetlbfs for its daemons, and gives both back at the end;
#              otherwise (or with --hugepages=skip) the report says why
#              there is no figure;
#   memif_zero_copy  the memif link in copy mode or in memif's own
#              zero-copy mode (daemon B, the memif client, with zero-copy=yes:
#              daemon A reads B's packet buffers in place), both daemons on
#              hugepages (which that mode needs): WRITE and READ of 64 KiB
#              and 1 MiB, 64-byte WRITEs; measured with the hugepage runs;
#   zero_copy  a port sending WRITE frames copied or in place
#              (eth_port_benchmark BM_SendOnly: frames of 1 KiB and 4 KiB of
#              payload, the receiving end frees them unread as a NIC would;
#              BM_RingWrite: a whole RC WRITE between two ports), in one
#              process over net_ring: the daemons' memif links carry at most
#              1 KiB per frame, below the size from which the daemon sends
#              in place (2 KiB).
# The poll mode is measured by bench/compare in every run (both modes, both
# setups). Engines run in adaptive mode, placed as bench/compare places them.
# knobs_report.py writes OUT/knobs.json, OUT/knobs.md and OUT/knobs.png and
# prints the tables. Progress goes to stderr. Exit status: 0 when every
# measurement worked, 1 when one failed (the report shows the rest), 2 usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=knobs
BENCH_HERE="$here"
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
hugepages=auto
bench_extra_arg() {
  case "$1" in
    --hugepages=auto | --hugepages=skip) hugepages="${1#--hugepages=}" ;;
    *) return 1 ;;
  esac
}
bench_parse_args 5 \
  "--bin_dir=DIR --out=DIR --rounds=N --quick --keep --hugepages=auto|skip" "$@"

if ((quick)); then
  t_run=0.1 t_bench=0.01
  bursts=(1 32) mtus=(1024 4096)
else
  t_run=0.4 t_bench=0.2
  bursts=(1 8 32 128) mtus=(1024 2048 4096)
fi
region_mib=64

work="$(mktemp -d /tmp/rdmaplane-knobs.XXXXXX)"
raw="$work/raw"
bin="$work/bin"
mkdir -p "$raw" "$bin"
BENCH_WORK="$work"
bench_init

# Hugepages this run reserved or mounted, given back by cleanup.
hp_file=/proc/sys/vm/nr_hugepages
hp_restore="" huge_dir=""

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  stop_pids
  if [[ -n $huge_dir ]]; then umount "$huge_dir" 2>/dev/null || true; fi
  if [[ -n $hp_restore ]]; then echo "$hp_restore" >"$hp_file" 2>/dev/null || true; fi
  if ((keep)); then
    echo "knobs: raw results kept in $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in rdmaplaned rdmaplane_perf eth_port_benchmark; do
  if [[ ! -x $bin_src/$tool ]]; then
    echo "knobs: $bin_src/$tool is missing" >&2
    exit 2
  fi
  cp "$bin_src/$tool" "$bin/$tool"
done
printf 'start %s\n' "$(loadavg)" >"$work/load.txt"

# perf TAG ARGS...: one rdmaplane_perf run (on CPU 0 next to a local daemon,
# on CPU 1 beside the target between memif daemons); its JSON in
# raw/TAG.json.
tool_cpu=()
perf() {
  local tag="$1"
  shift
  run 120 "$raw/$tag.txt" "${tool_cpu[@]}" "$bin/rdmaplane_perf" \
    --json="$raw/$tag.json" --timeout_s=20 "$@" || failed "rdmaplane_perf $tag"
}

# local_runs TAG HUGEPAGES DAEMON_FLAGS...: one daemon on CPU 1, 64 KiB
# and 64-byte WRITEs from rdmaplane_perf on CPU 0, whose arenas are on
# hugepages when HUGEPAGES is 1 (RDMAPLANE_HUGEPAGES).
local_runs() {
  local tag="$1" huge="$2" sock="$work/l.sock"
  shift 2
  if ! start_daemon "$work/daemon_local.log" "$sock" "${cpu1[@]}" \
    "$bin/rdmaplaned" --socket="$sock" --log_level=warning "$@"; then
    failed "the local daemon did not start ($tag: $*)"
    stop_pids
    return
  fi
  tool_cpu=(env RDMAPLANE_HUGEPAGES="$huge" "${cpu0[@]}")
  perf "${tag}_local_bw" --listen_socket="$sock" --mode=write_bw \
    --sizes=65536 --depth=16 --region_mib="$region_mib" --duration_s="$t_run"
  perf "${tag}_local_mops" --listen_socket="$sock" --mode=write_bw \
    --sizes=64 --depth=32 --region_mib="$region_mib" --duration_s="$t_run"
  tool_cpu=()
  stop_pids
}

# memif_runs TAG SIZES MODES HUGEPAGES DAEMON_FLAGS...: two daemons over
# memif; rdmaplane_perf bandwidth runs of SIZES in MODES, and 64-byte
# WRITEs (arenas as for local_runs).
memif_runs() {
  local tag="$1" sizes="$2" modes="$3" huge="$4"
  shift 4
  if ! start_memif_pair "$tag" "$bin/rdmaplaned" --log_level=warning "$@"; then
    failed "the memif daemons did not start ($tag: $*)"
    return
  fi
  local ends=(--listen_socket="$MEMIF_A" --connect_socket="$MEMIF_B" --peer=10.0.0.1)
  tool_cpu=(env RDMAPLANE_HUGEPAGES="$huge" "${memif_client_cpu[@]}")
  perf "${tag}_memif_bw" "${ends[@]}" --mode="$modes" --sizes="$sizes" \
    --depth=16 --region_mib="$region_mib" --duration_s="$t_run"
  perf "${tag}_memif_mops" "${ends[@]}" --mode=write_bw --sizes=64 \
    --depth=32 --region_mib="$region_mib" --duration_s="$t_run"
  tool_cpu=()
  stop_pids
}

# Free 2 MiB pages and a hugetlbfs for the hugepage runs; sets hp_note to
# why there are none.
hp_note=""
prepare_hugepages() {
  local need=1024 free total
  if [[ $hugepages == skip ]]; then
    hp_note="skipped (--hugepages=skip)"
    return 1
  fi
  free="$(sed -n 's/^HugePages_Free: *//p' /proc/meminfo)"
  total="$(cat "$hp_file" 2>/dev/null || echo 0)"
  if ((free < need)); then
    if [[ $(id -u) -ne 0 ]]; then
      hp_note="needs $need free 2 MiB pages ($free free; as root the run reserves them)"
      return 1
    fi
    hp_restore="$total"
    echo $((total + need - free)) >"$hp_file" 2>/dev/null || true
    free="$(sed -n 's/^HugePages_Free: *//p' /proc/meminfo)"
    if ((free < need)); then
      hp_note="the kernel granted $free of the $need 2 MiB pages asked for"
      return 1
    fi
    log "reserved $((total + need - free + free - total)) pages of 2 MiB for this run (given back at the end)"
  fi
  if ! grep -q ' hugetlbfs ' /proc/mounts; then
    if [[ $(id -u) -ne 0 ]]; then
      hp_note="no hugetlbfs is mounted for DPDK (as root the run mounts one)"
      return 1
    fi
    huge_dir="$work/huge"
    mkdir -p "$huge_dir"
    if ! mount -t hugetlbfs nodev "$huge_dir" 2>>"$work/tools.log"; then
      huge_dir=""
      hp_note="cannot mount a hugetlbfs"
      return 1
    fi
  fi
  return 0
}

have_hugepages=0
if prepare_hugepages; then
  have_hugepages=1
else
  log "no hugepage runs: $hp_note"
fi
huge_eal=()
if [[ -n $huge_dir ]]; then huge_eal=(--eal_args="--huge-dir=$huge_dir"); fi

log "$rounds round(s)$( ((quick)) && echo ', quick'), load average $(loadavg); work in $work"
for ((r = 1; r <= rounds; r++)); do
  printf 'round%d %s\n' "$r" "$(loadavg)" >>"$work/load.txt"
  for b in "${bursts[@]}"; do
    log "round $r: --burst=$b inside one daemon and over memif"
    local_runs "r${r}_burst_$b" 0 --burst="$b"
    memif_runs "r${r}_burst_$b" 65536 write_bw 0 --burst="$b"
  done
  for m in "${mtus[@]}"; do
    log "round $r: --mtu=$m over memif"
    memif_runs "r${r}_mtu_$m" 65536,1048576 write_bw,read_bw 0 --mtu="$m"
  done
  if ((have_hugepages)); then
    log "round $r: hugepages off and on, inside one daemon and over memif"
    local_runs "r${r}_hugepages_off" 0
    local_runs "r${r}_hugepages_on" 1
    memif_runs "r${r}_hugepages_off" 65536 write_bw 0
    memif_runs "r${r}_hugepages_on" 65536 write_bw 1 --hugepages \
      "${huge_eal[@]}"
    # memif's zero-copy mode runs at path MTU 1024 (its buffers are the
    # client's packet buffers, and its driver refuses a larger MTU), so
    # both modes are measured there.
    log "round $r: memif copy and zero-copy modes, on hugepages"
    memif_runs "r${r}_memifzc_copy" 65536,1048576 write_bw,read_bw 1 \
      --mtu=1024 --hugepages "${huge_eal[@]}"
    MEMIF_B_DEVARGS=",zero-copy=yes"
    memif_runs "r${r}_memifzc_zerocopy" 65536,1048576 write_bw,read_bw 1 \
      --mtu=1024 --hugepages "${huge_eal[@]}"
    MEMIF_B_DEVARGS=""
  fi
  log "round $r: zero copy at the port (eth_port_benchmark)"
  run 300 "$raw/r${r}_zero_copy.json" "${cpu1[@]}" "$bin/eth_port_benchmark" \
    --benchmark_filter='^BM_SendOnly/|^BM_RingWrite/' \
    --benchmark_format=json --benchmark_min_time="$t_bench" ||
    failed "eth_port_benchmark (round $r)"
done
printf 'end %s\n' "$(loadavg)" >>"$work/load.txt"

bench_source_revision
log "report (run took $((SECONDS - start_seconds)) s)"
mkdir -p "$out"
status=0
python3 "$here/knobs_report.py" --raw="$raw" --out="$out" --load="$work/load.txt" \
  --rounds="$rounds" --quick="$quick" --seconds=$((SECONDS - start_seconds)) \
  --commit="$commit" --dirty_files="$dirty_files" --cpus="$(nproc)" \
  --cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" \
  --bursts="${bursts[*]}" --mtus="${mtus[*]}" --hugepages="$have_hugepages" \
  --hugepages_note="$hp_note" \
  --failures="$(printf '%s\n' "${failures[@]+"${failures[@]}"}")" || status=1
if ((${#failures[@]} > 0)); then
  log "${#failures[@]} measurement(s) failed; tool output:"
  tail -n 20 "$work/tools.log" >&2 || true
  status=1
fi
log "done in $((SECONDS - start_seconds)) s: $out/knobs.json, knobs.md, knobs.png"
exit "$status"
