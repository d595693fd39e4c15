#!/usr/bin/env bash
# The measurements behind bench/compare, on binaries already built:
#
#   compare_run.sh --bin_dir=DIR [--out=DIR] [--rounds=N] [--quick] [--keep]
#       [--poll_mode=adaptive|busy] [--check]
#
# DIR holds rdmaplaned, rdmaplane_perf, memcpy_bw, tcp_bench, pin_cost,
# memif_rate, control_benchmark and librdmaplane-verbs.so (bench/compare
# builds them with `bazel build -c opt`; //bench:compare_smoke_test passes
# its own). They are copied first, so a rebuild during the run cannot mix
# versions. Debian's perftest, ucx-utils (ucx_perftest), openmpi-bin and
# libopenmpi-dev (mpirun, mpicc) must be installed (deploy/setup.sh
# installs them); mpi_pingpong.c, beside this script, is built with mpicc
# first.
#
# Paired windows. On a shared machine the speed of everything drifts from
# minute to minute, so every rdmaplane figure that has a baseline is
# measured next to it: its window (at least 2 s) and the baseline's follow
# each other with the daemons already running, and each round gives one
# pair, that is one ratio; the report takes the median of the rounds'
# ratios and shows their spread. One baseline window serves the rdmaplane
# windows on either side of it (B A A B: the first A is WRITE, the second
# READ, and so on). Each round, one step after another (nothing else of
# ours runs meanwhile):
#   1. memcpy_bw of 64 MiB buffers copied whole, for reference (no ratio);
#   2. one daemon (no --port; two client sessions, one engine) with the
#      headline poll mode (--poll_mode, default adaptive), then in turn:
#        memcpy_bw, 64 KiB copies over 64 MiB  | rdmaplane 64 KiB WRITE and
#        READ over 64 MiB | tcp_bench stream, 64 KiB sends;
#        tcp_bench streams of 256 KiB, 1 MiB and 4 MiB sends | rdmaplane
#        WRITE and READ of those sizes over 64 MiB (shorter windows, each
#        size beside its TCP counterpart: kernel TCP moves more with larger
#        sends, so the report compares each size with TCP's at the same
#        size, and each side's best size with the other's);
#        memcpy_bw of 1 MiB (cache-hot) | rdmaplane 64 KiB WRITE and READ
#        over 16 messages;
#        rdmaplane 64-byte WRITEs | memif_rate, 64-byte frames;
#        control_benchmark (registration cache hit, round trips) | pin_cost
#        (mlock+munlock) | tcp_bench ping-pong, both sides spinning |
#        rdmaplane 8-byte WRITE and READ latency | tcp_bench ping-pong,
#        blocking sockets;
#      then the size sweep (8 B .. 4 MiB, for the plots); then the other
#      poll mode, briefly and unpaired (the poll-mode table);
#   3. two daemons over memif (their default path MTU, 4096; 10.0.0.1 the
#      memif server and target, 10.0.0.2 the client and requester), the
#      same steps with memif_rate's frames of a 4 KiB WRITE (4170 bytes)
#      in place of the 64 KiB memcpy and without control_benchmark and
#      pin_cost, then the sweep and the other poll mode. Two more pairs
#      put the verbs front end beside the native API on the same daemons
#      and workload, for what the verbs layer costs: Debian's perftest
#      ib_write_bw -s 65536 -t 16 right after the cache-hot 64 KiB WRITE
#      window (that run measures READ first; perftest's client pinned
#      where rdmaplane_perf runs), and rdmaplane_perf's
#      write_pingpong (perftest's ib_write_lat on the native API) next to
#      ib_write_lat -s 8, both left unpinned: each end spins on memory
#      between its WRITEs and, pinned beside an engine, would hold the CPU
#      that engine needs until the scheduler's slice ends. Then, beside
#      rdmaplane_perf's read_lat, perftest's ib_read_lat -s 8, ib_atomic_lat
#      -A FETCH_AND_ADD and ib_send_lat -c UD -s 8 (unpinned too): READ,
#      atomic and UD SEND latency over the verbs front end, in the same
#      round. perftest's two ends each preload librdmaplane-verbs.so, the
#      server with a session on daemon A and the client on daemon B,
#      meeting over loopback TCP.
#      UCX and Open MPI, unmodified, over the verbs front end between the
#      two daemons, each beside the same program over TCP on loopback
#      (nothing preloaded): UCX on rdmaplane0 with UCX_TLS=rc_verbs,
#      ud_verbs:aux and UCX_NET_DEVICES=rdmaplane0:1, as
#      tests/verbs/ucx_test.sh and tests/mpi/mpi_test.sh run it, the server
#      (rank 0) on daemon A and the client (rank 1) on daemon B, all left
#      to the scheduler. Right after the 1 MiB windows: perftest's
#      ib_send_lat -s 8 (RC) | mpirun --mca pml ucx of mpi_pingpong.c (8 B
#      half round trip, typical, and 1 MiB bandwidth of a ping-pong) | the
#      same with --mca pml ob1 --mca btl tcp,self on lo. Right after
#      ib_write_bw: ucx_perftest -t ucp_put_bw -s 65536 over rdmaplane |
#      over TCP (UCX_TLS=tcp, UCX_NET_DEVICES=lo); then -t tag_lat -s 8
#      over TCP | over rdmaplane. These count iterations, not seconds:
#      ucx_perftest -n 20000 of each test, mpi_pingpong 10000 round trips
#      of 8 B and 500 of 1 MiB (--quick: -n 500 of ucp_put_bw and 2000 of
#      tag_lat, 500 and 20 round trips). The report also divides UCX's
#      puts and MPI's 1 MiB bandwidth by the native figure of the same
#      round and daemons (the cache-hot 64 KiB WRITEs, the 1 MiB WRITEs),
#      and takes MPI's 8 B half round trip minus perftest's ib_send_lat's
#      beside it.
# memcpy_bw runs on CPU 1 (where the engine runs), tcp_bench's client end
# on CPU 0 and its server end on CPU 1 (like rdmaplane_perf and the
# daemon), memif_rate's receiver on CPU 0 and its sender on CPU 1. The
# daemons stay up (idle) during their baselines: an adaptive engine sleeps
# when it has no work, a busy one (--poll_mode=busy) spins and takes a CPU
# from the baselines too.
# Each rdmaplane_perf result carries the CPU time of every process in its
# window (the client and the daemons), tcp_bench the CPU time of both its
# threads; the report divides them into CPU seconds per GB and CPU
# microseconds per request.
# After the rounds, perf (when installed) samples the local daemon during
# 64 KiB WRITEs; without it the report says why. bench/report.py then
# writes OUT/latest.json, OUT/latest.md, OUT/bw_vs_size.png,
# OUT/cpu_vs_size.png, OUT/latency_cdf.png and OUT/profile.txt, and prints
# the table.
#
# --quick: one round of very short runs, for the smoke test (the figures are
# not meant to be read). --check: exit 3 when a performance target is missed
# (report.py names each on stderr). Progress goes to stderr. Exit status: 0
# when every measurement worked (and, with --check, every target was met),
# 1 when one failed (the report still shows the rest), 2 usage, 3 a missed
# target with --check. No process is left behind.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=compare
BENCH_HERE="$here"
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
# shellcheck source=tests/testing/tcp_ports.sh
source "$here/../tests/testing/tcp_ports.sh"
primary=adaptive check=0
bench_extra_arg() {
  case "$1" in
    --poll_mode=adaptive | --poll_mode=busy) primary="${1#--poll_mode=}" ;;
    --check) check=1 ;;
    *) return 1 ;;
  esac
}
bench_parse_args 5 \
  "--bin_dir=DIR --out=DIR --rounds=N --quick --keep --poll_mode=adaptive|busy --check" "$@"

# Durations, seconds: t_pair for the paired windows (rdmaplane figures
# that have a baseline, and those baselines), t_size for the windows of the
# larger bandwidth sizes (each side's, per size), t_run for the other poll
# mode's unpaired runs and the memcpy reference, t_memif for memif_rate
# (whole seconds).
# perftest: t_perftest whole seconds of ib_write_bw (-D), n_perftest_lat
# exchanges of ib_write_lat (-n; it has no duration mode of its own).
# UCX and Open MPI count iterations: ucx_perftest's -n (n_ucx_bw of
# ucp_put_bw, n_ucx_lat of tag_lat) after -w warm-up iterations (w_ucx_*),
# and mpi_pingpong's timed round trips of 8 bytes (n_mpi_lat) and of 1 MiB
# (n_mpi_bw), after its own checked warm-up (a tenth as many).
if ((quick)); then
  t_pair=0.2 t_size=0.1 t_run=0.2 t_sweep=0.05 t_memif=1 t_bench=0.02
  t_perftest=1 n_perftest_lat=2000
  n_ucx_bw=500 w_ucx_bw=50 n_ucx_lat=2000 w_ucx_lat=200
  n_mpi_lat=500 n_mpi_bw=20
  sweep_sizes="8,4096,65536,1048576"
else
  t_pair=2 t_size=1 t_run=0.5 t_sweep=0.15 t_memif=2 t_bench=0.2
  t_perftest=2 n_perftest_lat=50000
  n_ucx_bw=20000 w_ucx_bw=1000 n_ucx_lat=20000 w_ucx_lat=2000
  n_mpi_lat=10000 n_mpi_bw=500
  sweep_sizes="8:4194304"
fi
# Poll modes: both are measured in each setup and reported; the paired
# windows and the headline figures use --poll_mode (default adaptive, the
# daemon's default), the other mode has short unpaired runs for the
# poll-mode table. A busy engine needs a core of its own, which a shared
# 2-core machine cannot promise: a busy engine, the busy-polling client and
# anything else running share two CPUs, and the figures then swing with the
# neighbours' load (see docs/performance.md).
if [[ $primary == adaptive ]]; then
  local_modes=(adaptive busy)
else
  local_modes=(busy adaptive)
fi
memif_modes=("${local_modes[@]}")
# Bandwidth runs spread their requests over 64 MiB per side, the size of
# memcpy_bw's buffers, so both move memory rather than cache lines; the
# "hot" runs keep 16 messages in the caches as perftest does.
region_mib=64
# The daemons' default path MTU over memif, and the frame of its largest
# packet, a WRITE's first: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16
# + payload + ICRC 4 bytes. memif_rate measures the raw link at that size.
memif_mtu=4096
memif_frame=$((memif_mtu + 74))

# Short paths: Unix socket names are limited to 108 bytes.
work="$(mktemp -d /tmp/rdmaplane-bench.XXXXXX)"
raw="$work/raw"
bin="$work/bin"
mkdir -p "$raw" "$bin"
BENCH_WORK="$work"
bench_init

# CPU placement (bench_lib.sh: the daemon on CPU 1, rdmaplane_perf on CPU 0;
# over memif daemon A and rdmaplane_perf on CPU 1, B on CPU 0). memif_rate's
# two ends are placed the same way, and the baselines too: memcpy_bw on
# CPU 1 with the engine whose copies it stands for, tcp_bench's client end
# on CPU 0 and its server end on CPU 1.
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

for tool in rdmaplaned rdmaplane_perf memcpy_bw tcp_bench pin_cost memif_rate control_benchmark \
  librdmaplane-verbs.so; do
  if [[ ! -f $bin_src/$tool ]]; then
    echo "compare: $bin_src/$tool is missing" >&2
    exit 2
  fi
  cp "$bin_src/$tool" "$bin/$tool"
done
for tool in ib_write_bw ib_write_lat ib_read_lat ib_atomic_lat ib_send_lat \
  ucx_perftest mpirun mpicc; do
  if ! command -v "$tool" >/dev/null; then
    echo "compare: $tool is not installed (Debian's perftest, ucx-utils, openmpi-bin and libopenmpi-dev; deploy/setup.sh installs them)" >&2
    exit 2
  fi
done
# The Open MPI ping-pong, built as tests/mpi/mpi_test.sh builds mpi_check.
if ! mpicc -O2 -Wall -Werror -o "$bin/mpi_pingpong" "$here/mpi_pingpong.c" \
  2>>"$work/tools.log"; then
  echo "compare: mpicc could not build $here/mpi_pingpong.c:" >&2
  cat "$work/tools.log" >&2
  exit 1
fi

printf 'start %s\n' "$(loadavg)" >"$work/load.txt"

# --- Baselines -------------------------------------------------------------

# memcpy NAME ARGS...: memcpy_bw on CPU 1, 5 passes; JSON in raw/NAME.json.
memcpy() {
  local name="$1"
  shift
  run 60 "$raw/$name.txt" "${cpu1[@]}" "$bin/memcpy_bw" --passes=5 \
    --json="$raw/$name.json" "$@" || failed "memcpy_bw $name"
}

# tcp NAME ARGS...: tcp_bench, client end on CPU 0 and server end on CPU 1,
# only the phases ARGS give seconds; JSON in raw/NAME.json.
tcp() {
  local name="$1"
  shift
  run 60 "$raw/$name.txt" "$bin/tcp_bench" "${tcp_cpus[@]}" --seconds=0 \
    --pingpong_seconds=0 --busy_pingpong_seconds=0 "$@" \
    --json="$raw/$name.json" || failed "tcp_bench $name"
}

# One memif_rate pair: the server (receiver) on CPU 0, the client (sender)
# on CPU 1; the server's line, in raw/NAME.txt, is the result. DPDK's
# start-up fails now and then on a busy machine: one more try.
memif_rate() {  # memif_rate NAME FRAME
  memif_rate_once "$@" || memif_rate_once "$@" ||
    failed "memif_rate $1, $2-byte frames"
}
memif_rate_once() {
  local name="$1" frame="$2" sock="$work/rate.sock" status=0 server
  "$bin/memif_rate" --role=server --socket="$sock" --seconds="$t_memif" \
    --frame="$frame" --lcore=0 >"$raw/$name.txt" 2>>"$work/tools.log" &
  server=$!
  pids+=("$server")
  sleep 1
  run 60 "$work/memif_client.txt" "$bin/memif_rate" --role=client \
    --socket="$sock" --seconds="$t_memif" --frame="$frame" --lcore=1 ||
    status=1
  wait "$server" || status=1
  forget_pid "$server"
  if ((status != 0)); then
    log "memif_rate $name with $frame-byte frames failed"
    return 1
  fi
}

control_bench() {  # control_bench NAME
  run 120 "$raw/$1.json" "$bin/control_benchmark" \
    --benchmark_filter='^BM_CacheRegisterHit$|^BM_ReRegisterMemoryHit/|^BM_RegisterDeregisterMemory/' \
    --benchmark_format=json --benchmark_min_time="$t_bench" ||
    failed "control_benchmark $1"
}

# perftest TOOL NAME CLIENT_CPU ARGS...: one run of Debian's perftest TOOL
# over the verbs front end, its server with a session on daemon A and its
# client on daemon B (each end with librdmaplane-verbs.so preloaded; the
# two meet over loopback TCP on a free port), the client's results table in
# raw/NAME.txt. CLIENT_CPU: "pinned" puts the client where rdmaplane_perf
# runs over memif, "unpinned" leaves both ends to the scheduler.
perftest() {
  local tool="$1" name="$2" placement="$3"
  shift 3
  local port server status=0 cpu=()
  if [[ $placement == pinned ]]; then cpu=("${memif_client_cpu[@]}"); fi
  port="$(free_tcp_port)"
  timeout --kill-after=5 60 env RDMAPLANE_SOCKET="$MEMIF_A" \
    LD_PRELOAD="$bin/librdmaplane-verbs.so" "$tool" -d rdmaplane0 -p "$port" \
    "$@" >"$raw/$name.server.txt" 2>>"$work/tools.log" &
  server=$!
  pids+=("$server")
  if ! wait_listening "$port" "$server"; then
    drop_pid "$server"
    failed "$tool $name: its server did not listen within 10 s"
    return
  fi
  run 60 "$raw/$name.txt" "${cpu[@]}" env RDMAPLANE_SOCKET="$MEMIF_B" \
    LD_PRELOAD="$bin/librdmaplane-verbs.so" "$tool" -d rdmaplane0 \
    -p "$port" "$@" 127.0.0.1 || status=1
  wait "$server" || status=1
  forget_pid "$server"
  if ((status != 0)); then failed "$tool $name"; fi
}

# UCX on rdmaplane0 under the verbs front end, as tests/verbs/ucx_test.sh
# and tests/mpi/mpi_test.sh run it: rc_verbs, with ud_verbs as UCX's
# auxiliary transport for the connection's wire-up (which rc_verbs needs).
# RDMAPLANE_SOCKET names each end's daemon. UCX's log at info level names
# the transport each endpoint runs over; the runs below check it.
ucx_rdmaplane_env=(LD_PRELOAD="$bin/librdmaplane-verbs.so"
  UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=rdmaplane0:1
  UCX_LOG_LEVEL=info)
# The same UCX over its TCP transport on loopback, nothing preloaded.
ucx_tcp_env=(UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_LOG_LEVEL=info)

# ucx_perf NAME TRANSPORT ARGS...: one ucx_perftest run (ARGS: -t TEST and
# the rest), its server and client meeting over loopback TCP on a free
# port, both left to the scheduler (each end spins while it waits, as
# perftest's latency tools do). TRANSPORT rdmaplane: UCX on rdmaplane0
# (ucx_rdmaplane_env), the server with a session on daemon A and the client
# on daemon B; tcp: UCX over TCP on lo (ucx_tcp_env). The client's output
# (UCX's log, then its "Final:" row) in raw/NAME.txt, the server's in
# raw/NAME.server.txt; the run counts when both ends exit 0, the client
# printed its row and UCX's log shows an endpoint on the transport asked
# for.
ucx_perf() {
  local name="$1" transport="$2"
  shift 2
  local port server status=0 server_env client_env lane
  if [[ $transport == rdmaplane ]]; then
    server_env=(RDMAPLANE_SOCKET="$MEMIF_A" "${ucx_rdmaplane_env[@]}")
    client_env=(RDMAPLANE_SOCKET="$MEMIF_B" "${ucx_rdmaplane_env[@]}")
    lane="rc_verbs/rdmaplane0:1"
  else
    server_env=("${ucx_tcp_env[@]}")
    client_env=("${ucx_tcp_env[@]}")
    lane="tcp/lo"
  fi
  port="$(free_tcp_port)"
  timeout --kill-after=5 120 env "${server_env[@]}" ucx_perftest -p "$port" \
    >"$raw/$name.server.txt" 2>&1 &
  server=$!
  pids+=("$server")
  if ! wait_listening "$port" "$server"; then
    drop_pid "$server"
    cat "$raw/$name.server.txt" >>"$work/tools.log"
    failed "ucx_perftest $name: its server did not listen within 10 s"
    return
  fi
  timeout --kill-after=5 120 env "${client_env[@]}" ucx_perftest 127.0.0.1 \
    -p "$port" "$@" >"$raw/$name.txt" 2>&1 || status=1
  wait "$server" || status=1
  forget_pid "$server"
  local why=""
  if ((status != 0)); then
    why="an end exited with an error"
  elif ! grep -q '^Final:' "$raw/$name.txt"; then
    why="the client printed no Final: row"
  elif ! grep -qE "ep_cfg\[[0-9]+\]: .*\(${lane}\)" "$raw/$name.txt"; then
    why="no endpoint ran over $lane"
  fi
  if [[ -n $why ]]; then
    cat "$raw/$name.server.txt" "$raw/$name.txt" >>"$work/tools.log"
    failed "ucx_perftest $name ($*): $why"
  fi
}

# mpi_job NAME TRANSPORT: mpirun of mpi_pingpong (n_mpi_lat round trips of
# 8 bytes, n_mpi_bw of 1 MiB), 2 ranks left to the scheduler (--bind-to
# none), its output in raw/NAME.txt. TRANSPORT rdmaplane: --mca pml ucx,
# rank 0 with a session on daemon A and rank 1 on daemon B, UCX on
# rdmaplane0 (ucx_rdmaplane_env), as tests/mpi/mpi_test.sh runs them: one
# application context per rank, each given its environment through env
# (mpirun's -x does not reach every context of an MPMD command line); tcp:
# --mca pml ob1 --mca btl tcp,self on lo, nothing preloaded. The run counts
# when mpirun exits 0, rank 0 printed its line and, over rdmaplane, UCX's
# log shows an endpoint on rc_verbs.
mpi_job() {
  local name="$1" transport="$2" status=0 cmd why=""
  local prog=("$bin/mpi_pingpong" "$n_mpi_lat" "$n_mpi_bw")
  cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
  if [[ $transport == rdmaplane ]]; then
    cmd+=(--mca pml ucx
      -np 1 env RDMAPLANE_SOCKET="$MEMIF_A" "${ucx_rdmaplane_env[@]}" "${prog[@]}" :
      -np 1 env RDMAPLANE_SOCKET="$MEMIF_B" "${ucx_rdmaplane_env[@]}" "${prog[@]}")
  else
    cmd+=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
      -np 2 "${prog[@]}")
  fi
  timeout --kill-after=10 240 "${cmd[@]}" >"$raw/$name.txt" 2>&1 || status=1
  if ((status != 0)); then
    why="mpirun exited with an error"
  elif ! grep -q '^mpi_pingpong: lat_8b_typical_us=' "$raw/$name.txt"; then
    why="rank 0 printed no figures"
  elif [[ $transport == rdmaplane ]] &&
    ! grep -qE 'ep_cfg\[[0-9]+\]: .*\(rc_verbs/rdmaplane0:1\)' "$raw/$name.txt"; then
    why="no endpoint ran over rc_verbs on rdmaplane0:1"
  fi
  if [[ -n $why ]]; then
    cat "$raw/$name.txt" >>"$work/tools.log"
    failed "Open MPI $name: $why"
  fi
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

# rdmaplane_perf's headline runs, paired and unpaired alike: 64 KiB WRITE
# and READ over region_mib, 64-byte WRITEs, 8-byte latency.
bw_args=(--mode=write_bw,read_bw --sizes=65536 --depth=16 --region_mib="$region_mib")
# The larger bandwidth sizes, paired only: TCP's sends and rdmaplane's
# messages alike (depth 16 of 4 MiB fills the 64 MiB region exactly).
big_sizes=262144,1048576,4194304
big_args=(--mode=write_bw,read_bw --sizes="$big_sizes" --depth=16 --region_mib="$region_mib")
mops_args=(--mode=write_bw --sizes=64 --depth=32 --region_mib="$region_mib")
lat_args=(--mode=write_lat,read_lat --sizes=8)

# The paired windows of one setup with the headline poll mode, then its
# size sweep. Files: raw/rR_SETUP_MODE_{bw,bw_sizes,hot,mops,lat}.json
# (rdmaplane), raw/rR_SETUP_{memcpy_64k,memif_FRAME,tcp_stream,tcp_sizes,
# memcpy_hot,memif_64,control,pin,tcp_busy,tcp_blocking}.* (baselines),
# rR_SETUP_sweep.json.
paired() {  # paired ROUND SETUP MODE ENDPOINT_ARGS...
  local r="$1" setup="$2" mode="$3"
  shift 3
  local p="r${r}_${setup}" samples=()
  local tag="${p}_${mode}"
  log "round $r: $setup ($mode): 64 KiB WRITE and READ over $region_mib MiB, paired"
  if [[ $setup == local ]]; then
    memcpy "${p}_memcpy_64k" --buffer_mib="$region_mib" --chunk=65536 \
      --seconds="$t_pair"
  else
    memif_rate "${p}_memif_$memif_frame" "$memif_frame"
  fi
  perf_run "${tag}_bw" "$@" "${bw_args[@]}" --duration_s="$t_pair"
  tcp "${p}_tcp_stream" --send_bytes=65536 --seconds="$t_pair"
  log "round $r: $setup ($mode): TCP sends and rdmaplane WRITE and READ of $big_sizes bytes, paired"
  tcp "${p}_tcp_sizes" --send_bytes="$big_sizes" --seconds="$t_size"
  perf_run "${tag}_bw_sizes" "$@" "${big_args[@]}" --duration_s="$t_size"
  if [[ $setup == memif ]]; then
    # Beside the native 1 MiB WRITEs, and MPI's 8-byte half round trip
    # beside perftest's over RC (ib_send_lat's default).
    log "round $r: $setup ($mode): perftest's ib_send_lat (RC), then the Open MPI ping-pong (8 B, 1 MiB) over rdmaplane (pml ucx) and over TCP (pml ob1), paired"
    perftest ib_send_lat "${p}_perftest_send_lat" unpinned -s 8 \
      -n "$n_perftest_lat"
    mpi_job "${p}_mpi_rdmaplane" rdmaplane
    mpi_job "${p}_mpi_tcp" tcp
  fi
  log "round $r: $setup ($mode): 64 KiB cache-hot, paired"
  memcpy "${p}_memcpy_hot" --buffer_mib=1 --seconds="$t_pair"
  # READ first: the WRITE window then lies right before perftest's.
  perf_run "${tag}_hot" "$@" --mode=read_bw,write_bw --sizes=65536 --depth=16 \
    --duration_s="$t_pair"
  if [[ $setup == memif ]]; then
    log "round $r: $setup ($mode): perftest's ib_write_bw over the verbs front end, 64 KiB cache-hot, paired"
    perftest ib_write_bw "${p}_perftest_write_bw" pinned -s 65536 -t 16 \
      -D "$t_perftest"
    log "round $r: $setup ($mode): UCX ucp_put_bw 64 KiB and tag_lat 8 B over rdmaplane (rc_verbs) and over TCP, paired"
    ucx_perf "${p}_ucx_rdmaplane_put_bw" rdmaplane -t ucp_put_bw -s 65536 \
      -n "$n_ucx_bw" -w "$w_ucx_bw"
    ucx_perf "${p}_ucx_tcp_put_bw" tcp -t ucp_put_bw -s 65536 \
      -n "$n_ucx_bw" -w "$w_ucx_bw"
    ucx_perf "${p}_ucx_tcp_tag_lat" tcp -t tag_lat -s 8 -n "$n_ucx_lat" \
      -w "$w_ucx_lat"
    ucx_perf "${p}_ucx_rdmaplane_tag_lat" rdmaplane -t tag_lat -s 8 \
      -n "$n_ucx_lat" -w "$w_ucx_lat"
  fi
  log "round $r: $setup ($mode): 64-byte WRITEs, paired"
  perf_run "${tag}_mops" "$@" "${mops_args[@]}" --duration_s="$t_pair"
  memif_rate "${p}_memif_64" 64
  if [[ $setup == local ]]; then
    log "round $r: control_benchmark (registration cache hit, round trips) and mlock+munlock"
    control_bench "${p}_control"
    run 60 "$raw/${p}_pin.txt" "$bin/pin_cost" --seconds="$t_pair" \
      --json="$raw/${p}_pin.json" || failed "pin_cost (round $r)"
    samples=(--samples="$raw/r${r}_tcp_lat.samples")
  fi
  log "round $r: $setup ($mode): 8-byte latency, paired"
  tcp "${p}_tcp_busy" --busy_pingpong_seconds="$t_pair"
  perf_run "${tag}_lat" "$@" "${lat_args[@]}" --duration_s="$t_pair" \
    --samples="$raw/${p}_lat.samples"
  tcp "${p}_tcp_blocking" --pingpong_seconds="$t_pair" "${samples[@]}"
  if [[ $setup == memif ]]; then
    # Both spin on memory between their WRITEs; pinned to one CPU, each
    # would hold it from the engine it waits for until the scheduler's
    # slice ends (milliseconds).
    log "round $r: $setup ($mode): 8-byte WRITE ping-pong, native and perftest's ib_write_lat, paired"
    unpinned perf_run "${tag}_pingpong" "$@" --mode=write_pingpong --sizes=8 \
      --duration_s="$t_pair"
    perftest ib_write_lat "${p}_perftest_write_lat" unpinned -s 8 \
      -n "$n_perftest_lat"
    # Beside rdmaplane_perf's read_lat: perftest's READ, atomic and UD SEND
    # latencies over the verbs front end, in the same round.
    log "round $r: $setup ($mode): perftest's ib_read_lat, ib_atomic_lat (FETCH_AND_ADD) and UD ib_send_lat, 8 B"
    perftest ib_read_lat "${p}_perftest_read_lat" unpinned -s 8 \
      -n "$n_perftest_lat"
    perftest ib_atomic_lat "${p}_perftest_atomic_lat" unpinned \
      -A FETCH_AND_ADD -n "$n_perftest_lat"
    perftest ib_send_lat "${p}_perftest_ud_send_lat" unpinned -c UD -s 8 \
      -n "$n_perftest_lat"
  fi
  log "round $r: $setup ($mode): sizes $sweep_sizes"
  perf_run "${p}_sweep" "$@" --mode=write_bw,read_bw --sizes="$sweep_sizes" \
    --depth=16 --region_mib="$region_mib" --warmup=16 --duration_s="$t_sweep"
}

# unpinned CMD ARGS...: CMD with rdmaplane_perf left to the scheduler.
unpinned() {
  local tool_cpu=()
  "$@"
}

# The other poll mode: short runs of the headline figures, unpaired.
unpaired() {  # unpaired ROUND SETUP MODE ENDPOINT_ARGS...
  local r="$1" setup="$2" mode="$3"
  shift 3
  local tag="r${r}_${setup}_${mode}"
  perf_run "${tag}_bw" "$@" "${bw_args[@]}" --duration_s="$t_run"
  perf_run "${tag}_mops" "$@" "${mops_args[@]}" --duration_s="$t_run"
  perf_run "${tag}_lat" "$@" "${lat_args[@]}" --duration_s="$t_run"
}

# local_daemon ROUND MODE RUNS: RUNS is paired (the headline poll mode) or
# unpaired (the other).
local_daemon() {  # local_daemon ROUND MODE RUNS
  local r="$1" mode="$2" runs="$3" sock="$work/l.sock"
  log "round $r: rdmaplane inside one daemon, --poll_mode=$mode"
  if start_daemon "$work/daemon_local.log" "$sock" "${cpu1[@]}" \
    "$bin/rdmaplaned" --socket="$sock" --poll_mode="$mode" \
    --log_level=warning; then
    tool_cpu=("${cpu0[@]}")
    "$runs" "$r" local "$mode" --listen_socket="$sock"
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

memif_daemons() {  # memif_daemons ROUND MODE RUNS (as local_daemon)
  local r="$1" mode="$2" runs="$3"
  log "round $r: rdmaplane between two daemons over memif, --poll_mode=$mode"
  if start_memif_pair "r$r" "$bin/rdmaplaned" --poll_mode="$mode" \
    --log_level=warning; then
    tool_cpu=("${memif_client_cpu[@]}")
    # rdmaplane_perf shares its CPU with daemon A, whose engine has the
    # work it waits for: it gives the CPU away after every empty poll.
    local endpoint=(--listen_socket="$MEMIF_A" --connect_socket="$MEMIF_B"
      --peer=10.0.0.1 --yield_after=1)
    "$runs" "$r" memif "$mode" "${endpoint[@]}"
    tool_cpu=()
  else
    failed "the memif daemons did not start (round $r, --poll_mode=$mode)"
  fi
  stop_pids
}

log "$rounds round(s)$( ((quick)) && echo ', quick'), load average $(loadavg); work in $work"
for ((r = 1; r <= rounds; r++)); do
  printf 'round%d %s\n' "$r" "$(loadavg)" >>"$work/load.txt"
  log "round $r: memcpy of $region_mib MiB buffers whole (for reference)"
  memcpy "r${r}_memcpy" --buffer_mib="$region_mib" --seconds="$t_run"
  runs=paired
  for mode in "${local_modes[@]}"; do
    local_daemon "$r" "$mode" "$runs"
    runs=unpaired
  done
  runs=paired
  for mode in "${memif_modes[@]}"; do
    memif_daemons "$r" "$mode" "$runs"
    runs=unpaired
  done
done
profile
printf 'end %s\n' "$(loadavg)" >>"$work/load.txt"

# --- Report ----------------------------------------------------------------

bench_source_revision
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
  --region_mib="$region_mib" --memif_mtu="$memif_mtu" \
  --pair_seconds="$t_pair" --check="$check" \
  --pinned=$((${#cpu0[@]} > 0)) --profile_note="$profile_note" \
  --failures="$(printf '%s\n' "${failures[@]+"${failures[@]}"}")" ||
  status=$?
# report.py: 1 a figure missing or a plot failed, 3 a missed target
# (--check only).
if ((status != 0 && status != 3)); then status=1; fi
if ((${#failures[@]} > 0)); then
  log "${#failures[@]} measurement(s) failed; tool output:"
  tail -n 20 "$work/tools.log" >&2 || true
  status=1
fi
log "done in $((SECONDS - start_seconds)) s: $out/latest.json, latest.md, bw_vs_size.png, cpu_vs_size.png, latency_cdf.png"
exit "$status"
