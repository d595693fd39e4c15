#!/usr/bin/env bash
# The measurements behind bench/compare, on binaries already built:
#
#   compare_run.sh --bin_dir=DIR [--out=DIR] [--rounds=N] [--quick] [--keep]
#       [--poll_mode=adaptive|busy]
#
# DIR holds rdmaplaned, rdmaplane_perf, memcpy_bw, tcp_bench, pin_cost,
# memif_rate and control_benchmark (bench/compare builds them with
# `bazel build -c opt`; //bench:compare_smoke_test passes its own). They are
# copied first, so a rebuild during the run cannot mix versions.
#
# In each round, one after another (nothing else of ours runs meanwhile):
#   1. baselines: memcpy_bw on CPU 1 (where the engine runs: 64 MiB
#      buffers copied whole, and in 64 KiB copies rotating over them as
#      rdmaplane's 64 KiB runs do; 1 MiB buffers, cache-hot), pin_cost
#      (mlock+munlock), tcp_bench (loopback stream and ping-pong, client end
#      on CPU 0 and server end on CPU 1, like rdmaplane_perf and the
#      daemon), memif_rate (raw memif frame rate at 1098- and 64-byte
#      frames, server and client pinned to CPUs 0 and 1);
#   2. control_benchmark: the registration cache hit and a registration
#      round trip through an in-process daemon;
#   3. rdmaplane inside one daemon (no --port; two client sessions, one
#      engine), with --poll_mode=adaptive and then busy;
#   4. rdmaplane between two daemons over memif (--mtu=1024, 10.0.0.1 is
#      the memif server, 10.0.0.2 the client), adaptive and then busy.
# Each rdmaplane setup runs rdmaplane_perf for WRITE and READ of 64 KiB
# (depth 16, requests spread over 64 MiB per side), 64-byte WRITEs (depth
# 32), the same 64 KiB runs cache-hot (16 messages), and WRITE and READ
# latency of 8 bytes (one outstanding).
# For the first poll mode of each setup, every round also sweeps message
# sizes 8 B .. 4 MiB for the bandwidth plot and keeps every latency sample
# for the CDF. After the rounds, perf (when installed) samples the local
# daemon during 64 KiB WRITEs; without it the report says why. bench/
# report.py then takes the median of the rounds (per size for the sweep)
# and writes OUT/latest.json, OUT/latest.md, OUT/bw_vs_size.png,
# OUT/latency_cdf.png and OUT/profile.txt, and prints the table.
#
# --quick: one round of very short runs, for the smoke test (the figures are
# not meant to be read). Progress goes to stderr. Exit status: 0 when every
# measurement worked (met targets or not), 1 when one failed (the report
# still shows the rest), 2 usage. No process is left behind.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=compare
BENCH_HERE="$here"
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
primary=adaptive
bench_extra_arg() {
  case "$1" in
    --poll_mode=adaptive | --poll_mode=busy) primary="${1#--poll_mode=}" ;;
    *) return 1 ;;
  esac
}
bench_parse_args 5 \
  "--bin_dir=DIR --out=DIR --rounds=N --quick --keep --poll_mode=adaptive|busy" "$@"

# Durations, seconds.
if ((quick)); then
  t_run=0.2 t_sweep=0.05 t_memif=1 t_bench=0.02
  sweep_sizes="8,4096,65536,1048576"
else
  t_run=0.5 t_sweep=0.15 t_memif=1 t_bench=0.2
  sweep_sizes="8:4194304"
fi
# Poll modes: both are measured in each setup and reported; the headline
# figures use --poll_mode (default adaptive, the daemon's default). A busy
# engine needs a core of its own, which a shared 2-core machine cannot
# promise: a busy engine, the busy-polling client and anything else running
# share two CPUs, and the figures then swing with the neighbours' load (see
# docs/performance.md).
if [[ $primary == adaptive ]]; then
  local_modes=(adaptive busy)
else
  local_modes=(busy adaptive)
fi
# Bandwidth runs spread their requests over 64 MiB per side, the size of
# memcpy_bw's buffers, so both move memory rather than cache lines; the
# "hot" runs keep 16 messages in the caches as perftest does.
region_mib=64
memif_modes=("${local_modes[@]}")

# Short paths: Unix socket names are limited to 108 bytes.
work="$(mktemp -d /tmp/rdmaplane-bench.XXXXXX)"
raw="$work/raw"
bin="$work/bin"
mkdir -p "$raw" "$bin"
BENCH_WORK="$work"
bench_init

# CPU placement (bench_lib.sh: the daemon on CPU 1, rdmaplane_perf on CPU 0;
# over memif daemon A and rdmaplane_perf on CPU 1, B on CPU 0). memif_rate's
# two ends are
# placed the same way, and the baselines too: memcpy_bw on CPU 1 with the
# engine whose copies it stands for, tcp_bench's client end on CPU 0 and
# its server end on CPU 1.
tool_cpu=() tcp_cpus=()
if ((${#cpu0[@]} > 0)); then
  tcp_cpus=(--client_cpu=0 --server_cpu=1)
fi

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  stop_pids
  if ((keep)); then
    echo "compare: raw results kept in $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in rdmaplaned rdmaplane_perf memcpy_bw tcp_bench pin_cost memif_rate control_benchmark; do
  if [[ ! -x $bin_src/$tool ]]; then
    echo "compare: $bin_src/$tool is missing" >&2
    exit 2
  fi
  cp "$bin_src/$tool" "$bin/$tool"
done

printf 'start %s\n' "$(loadavg)" >"$work/load.txt"

# --- Baselines -------------------------------------------------------------

baselines() {  # baselines ROUND
  local r="$1"
  log "round $r: memcpy, one core, $region_mib MiB buffers whole and in 64 KiB copies (and 1 MiB, cache-hot)"
  run 60 "$raw/r${r}_memcpy.txt" "${cpu1[@]}" "$bin/memcpy_bw" \
    --buffer_mib="$region_mib" --seconds="$t_run" --passes=5 \
    --json="$raw/r${r}_memcpy.json" || failed "memcpy_bw (round $r)"
  run 60 "$raw/r${r}_memcpy_64k.txt" "${cpu1[@]}" "$bin/memcpy_bw" \
    --buffer_mib="$region_mib" --chunk=65536 --seconds="$t_run" --passes=5 \
    --json="$raw/r${r}_memcpy_64k.json" ||
    failed "memcpy_bw, 64 KiB copies (round $r)"
  run 60 "$raw/r${r}_memcpy_hot.txt" "${cpu1[@]}" "$bin/memcpy_bw" \
    --buffer_mib=1 --seconds="$t_run" --passes=5 \
    --json="$raw/r${r}_memcpy_hot.json" || failed "memcpy_bw, 1 MiB (round $r)"
  log "round $r: mlock+munlock of 4 KiB"
  run 60 "$raw/r${r}_pin.txt" "$bin/pin_cost" --seconds="$t_run" \
    --json="$raw/r${r}_pin.json" || failed "pin_cost (round $r)"
  log "round $r: kernel TCP over loopback: 64 KiB stream, 8-byte ping-pong"
  run 60 "$raw/r${r}_tcp.txt" "$bin/tcp_bench" "${tcp_cpus[@]}" \
    --seconds="$t_run" --pingpong_seconds="$t_run" \
    --busy_pingpong_seconds="$t_run" \
    --json="$raw/r${r}_tcp.json" --samples="$raw/r${r}_tcp_lat.samples" ||
    failed "tcp_bench (round $r)"
  local frame
  for frame in 1098 64; do
    log "round $r: raw memif frame rate, $frame-byte frames"
    # DPDK's start-up fails now and then on a busy machine: one more try.
    memif_rate "$r" "$frame" || memif_rate "$r" "$frame" ||
      failed "memif_rate, $frame-byte frames (round $r)"
  done
}

# One memif_rate pair: the server (receiver) on CPU 0, the client (sender)
# on CPU 1; the server's line is the result.
memif_rate() {  # memif_rate ROUND FRAME
  local r="$1" frame="$2" sock="$work/rate.sock" status=0
  "$bin/memif_rate" --role=server --socket="$sock" --seconds="$t_memif" \
    --frame="$frame" --lcore=0 >"$raw/r${r}_memif_$frame.txt" \
    2>>"$work/tools.log" &
  pids+=($!)
  sleep 1
  run 60 "$work/memif_client.txt" "$bin/memif_rate" --role=client \
    --socket="$sock" --seconds="$t_memif" --frame="$frame" --lcore=1 ||
    status=1
  wait "${pids[0]}" || status=1
  pids=()
  if ((status != 0)); then
    log "round $r: memif_rate with $frame-byte frames failed"
    return 1
  fi
}

control_bench() {  # control_bench ROUND
  local r="$1"
  log "round $r: control_benchmark (registration cache hit, round trip)"
  run 120 "$raw/r${r}_control.json" "$bin/control_benchmark" \
    --benchmark_filter='^BM_CacheRegisterHit$|^BM_ReRegisterMemoryHit/|^BM_RegisterDeregisterMemory/' \
    --benchmark_format=json --benchmark_min_time="$t_bench" ||
    failed "control_benchmark (round $r)"
}

# --- rdmaplane -------------------------------------------------------------

# perf_run TAG ARGS...: one rdmaplane_perf run; JSON in raw/TAG.json.
perf_run() {
  local tag="$1"
  shift
  run 180 "$raw/$tag.txt" "${tool_cpu[@]}" "$bin/rdmaplane_perf" \
    --json="$raw/$tag.json" \
    --timeout_s=20 "$@" || failed "rdmaplane_perf $tag"
}

# The headline runs of one setup and poll mode (and, for the first mode,
# the size sweep and the latency samples).
headline() {  # headline ROUND SETUP MODE FIRST ENDPOINT_ARGS...
  local r="$1" setup="$2" mode="$3" first="$4"
  shift 4
  local tag="r${r}_${setup}_${mode}" samples=()
  if ((first)); then samples=(--samples="$raw/r${r}_${setup}_lat.samples"); fi
  perf_run "${tag}_bw" "$@" --mode=write_bw,read_bw --sizes=65536 --depth=16 \
    --region_mib="$region_mib" --duration_s="$t_run"
  perf_run "${tag}_mops" "$@" --mode=write_bw --sizes=64 --depth=32 \
    --region_mib="$region_mib" --duration_s="$t_run"
  perf_run "${tag}_hot" "$@" --mode=write_bw,read_bw --sizes=65536 --depth=16 \
    --duration_s="$t_run"
  perf_run "${tag}_lat" "$@" --mode=write_lat,read_lat --sizes=8 \
    --duration_s="$t_run" "${samples[@]}"
  if ((first)); then
    log "round $r: $setup ($mode): sizes $sweep_sizes"
    perf_run "r${r}_${setup}_sweep" "$@" --mode=write_bw,read_bw --sizes="$sweep_sizes" \
      --depth=16 --region_mib="$region_mib" --warmup=16 \
      --duration_s="$t_sweep"
  fi
}

local_daemon() {  # local_daemon ROUND MODE FIRST
  local r="$1" mode="$2" first="$3" sock="$work/l.sock"
  log "round $r: rdmaplane inside one daemon, --poll_mode=$mode"
  if start_daemon "$work/daemon_local.log" "$sock" "${cpu1[@]}" \
    "$bin/rdmaplaned" --socket="$sock" --poll_mode="$mode" \
    --log_level=warning; then
    tool_cpu=("${cpu0[@]}")
    headline "$r" local "$mode" "$first" --listen_socket="$sock"
    tool_cpu=()
  else
    failed "the local daemon did not start (--poll_mode=$mode, round $r)"
  fi
  stop_pids
}

# Where the engine's time goes: perf samples the local daemon (first poll
# mode) for 2 s while rdmaplane_perf streams 64 KiB WRITEs over 64 MiB.
# Skipped in quick mode and when perf is not installed (Debian: linux-perf,
# which deploy/setup.sh installs); whenever there is no profile,
# profile_note says why and the report shows it.
profile_note=""
no_profile() {
  profile_note="$*"
  log "no profile: $profile_note"
}
profile() {
  local sock="$work/l.sock" mode="${local_modes[0]}"
  if ((quick)); then
    no_profile "--quick skips it"
    return
  fi
  if ! command -v perf >/dev/null 2>&1; then
    no_profile "perf is not installed (Debian: linux-perf; deploy/setup.sh installs it)"
    return
  fi
  log "profile: perf on the daemon during 64 KiB WRITEs (--poll_mode=$mode)"
  if ! start_daemon "$work/daemon_local.log" "$sock" "${cpu1[@]}" \
    "$bin/rdmaplaned" --socket="$sock" --poll_mode="$mode" \
    --log_level=warning; then
    failed "the local daemon did not start for the profile"
    no_profile "the daemon to profile did not start"
    stop_pids
    return
  fi
  "${cpu0[@]}" "$bin/rdmaplane_perf" --listen_socket="$sock" \
    --mode=write_bw --sizes=65536 \
    --depth=16 --region_mib="$region_mib" --duration_s=4 --noverify \
    --json="$raw/profile_perf.json" >/dev/null 2>>"$work/tools.log" &
  local load=$!
  sleep 1.5
  local perf_err="$work/perf.err" why
  if timeout 30 perf record -F 999 -p "${pids[0]}" -o "$work/perf.data" \
    -- sleep 2 >"$perf_err" 2>&1 &&
    perf report -i "$work/perf.data" --no-children --sort dso,symbol \
      --percent-limit 0.5 --stdio >"$raw/profile.txt" 2>>"$perf_err"; then
    :
  else
    rm -f "$raw/profile.txt"
    # perf's own words (for instance perf_event_paranoid's refusal).
    why="$({ grep -v '^[[:space:]]*$' "$perf_err" || true; } | tail -n 3 |
      paste -sd ' ' - | cut -c 1-300)"
    no_profile "perf could not sample the daemon: ${why:-no message}"
  fi
  cat "$perf_err" >>"$work/tools.log"
  wait "$load" || failed "rdmaplane_perf during the profile"
  stop_pids
}

memif_daemons() {  # memif_daemons ROUND MODE FIRST
  local r="$1" mode="$2" first="$3"
  log "round $r: rdmaplane between two daemons over memif, --poll_mode=$mode"
  if start_memif_pair "r$r" "$bin/rdmaplaned" --mtu=1024 --poll_mode="$mode" \
    --log_level=warning; then
    tool_cpu=("${memif_client_cpu[@]}")
    headline "$r" memif "$mode" "$first" --listen_socket="$MEMIF_A" \
      --connect_socket="$MEMIF_B" --peer=10.0.0.1
    tool_cpu=()
  else
    failed "the memif daemons did not start (round $r, --poll_mode=$mode)"
  fi
  stop_pids
}

log "$rounds round(s)$( ((quick)) && echo ', quick'), load average $(loadavg); work in $work"
for ((r = 1; r <= rounds; r++)); do
  printf 'round%d %s\n' "$r" "$(loadavg)" >>"$work/load.txt"
  baselines "$r"
  control_bench "$r"
  first=1
  for mode in "${local_modes[@]}"; do
    local_daemon "$r" "$mode" "$first"
    first=0
  done
  first=1
  for mode in "${memif_modes[@]}"; do
    memif_daemons "$r" "$mode" "$first"
    first=0
  done
done
profile
printf 'end %s\n' "$(loadavg)" >>"$work/load.txt"

# --- Report ----------------------------------------------------------------

repo="$(cd "$here/.." && pwd)"
commit="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
# Tracked files that differ from the commit (what was built besides it).
dirty_files=""
if [[ $commit != unknown ]]; then
  dirty_files="$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null |
    awk '{ print $NF }' | paste -sd, -)"
fi
cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
hugepages_free="$(sed -n 's/^HugePages_Free: *//p' /proc/meminfo)"
log "report (run took $((SECONDS - start_seconds)) s)"
mkdir -p "$out"
status=0
python3 "$here/report.py" --raw="$raw" --out="$out" --load="$work/load.txt" \
  --rounds="$rounds" --quick="$quick" --seconds=$((SECONDS - start_seconds)) \
  --commit="$commit" --dirty_files="$dirty_files" --cpus="$(nproc)" --cpu_model="$cpu_model" \
  --kernel="$(uname -r)" --hugepages_free="${hugepages_free:-0}" \
  --local_modes="${local_modes[*]}" --memif_modes="${memif_modes[*]}" \
  --region_mib="$region_mib" \
  --pinned=$((${#cpu0[@]} > 0)) --profile_note="$profile_note" \
  --failures="$(printf '%s\n' "${failures[@]+"${failures[@]}"}")" || status=1
if ((${#failures[@]} > 0)); then
  log "${#failures[@]} measurement(s) failed; tool output:"
  tail -n 20 "$work/tools.log" >&2 || true
  status=1
fi
log "done in $((SECONDS - start_seconds)) s: $out/latest.json, latest.md, bw_vs_size.png, latency_cdf.png"
exit "$status"
