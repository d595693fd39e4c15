# shellcheck shell=bash
# Shell helpers of the whole-system benchmarks (compare_run.sh, knobs_run.sh):
# logging with the seconds since the start, bounded tool runs, daemons
# started in the background and stopped again, and the CPU placement both
# use. Nothing here prints on stdout.
#
# The sourcing script sets BENCH_NAME (the prefix of every message) and
# BENCH_HERE (bench/), parses its arguments with bench_parse_args, sets
# BENCH_WORK (a private folder with short paths: Unix socket names are
# limited to 108 bytes) and calls bench_init.

BENCH_NAME="${BENCH_NAME:-bench}"
BENCH_WORK="${BENCH_WORK:-}"
pids=()      # processes to stop (stop_pids)
failures=()  # what failed, one line each
start_seconds=$SECONDS

# CPU placement, with two CPUs or more: the daemon inside which clients
# connect runs on CPU 1 and the client tool on CPU 0; over memif, daemon A
# (the target) runs on CPU 1 and daemon B (the requester) on CPU 0, as on
# two hosts, and the client tool on CPU 1 beside A, which has time to spare
# (the requester does the most work per byte: copy, ICRC, memif's copy into
# the ring). An engine that shares its CPU with the client feeding it while
# a neighbour holds the other CPU starves one or the other: over memif with
# the client beside B, 64 KiB WRITEs ran at half the speed, and left where
# the scheduler puts it the client landed on either CPU from run to run.
# Unpinned, the daemons all start on CPU 0.
cpu0=() cpu1=()
if (($(nproc) >= 2)) && command -v taskset >/dev/null 2>&1; then
  cpu0=(taskset -c 0) cpu1=(taskset -c 1)
fi

# bench_parse_args DEFAULT_ROUNDS USAGE ARGS...: the options both runners
# take (--bin_dir=DIR, --out=DIR, --rounds=N, --quick, --keep) into bin_src,
# out, rounds, quick and keep; any other argument goes to the runner's
# bench_extra_arg, which returns 1 for one it does not know either. Usage
# errors exit 2 with USAGE.
# shellcheck disable=SC2034  # the variables are the runner's
bench_parse_args() {
  local default_rounds="$1" usage="$2" arg
  shift 2
  bin_src="" out="$BENCH_HERE/results" rounds="" quick=0 keep=0
  for arg in "$@"; do
    case "$arg" in
      --bin_dir=*) bin_src="${arg#--bin_dir=}" ;;
      --out=*) out="${arg#--out=}" ;;
      --rounds=*) rounds="${arg#--rounds=}" ;;
      --quick) quick=1 ;;
      --keep) keep=1 ;;
      *)
        if ! bench_extra_arg "$arg"; then
          echo "$BENCH_NAME: unknown argument '$arg' ($usage)" >&2
          exit 2
        fi
        ;;
    esac
  done
  if [[ -z $bin_src ]]; then
    echo "$BENCH_NAME: --bin_dir is required" >&2
    exit 2
  fi
  if [[ -z $rounds ]]; then rounds=$((quick ? 1 : default_rounds)); fi
  if ! [[ $rounds =~ ^[1-9]$ ]]; then
    echo "$BENCH_NAME: --rounds must be 1..9" >&2
    exit 2
  fi
}

bench_init() {
  mkdir -p "$BENCH_WORK"
  : >>"$BENCH_WORK/tools.log"
}

log() { printf '%s: [%3ds] %s\n' "$BENCH_NAME" $((SECONDS - start_seconds)) "$*" >&2; }

failed() {
  failures+=("$*")
  log "FAILED: $*"
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

stop_pids() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}

# forget_pid PID: PID leaves the list stop_pids works through (a process
# that was waited for; a daemon started before stays in it).
forget_pid() {
  local kept=() pid
  for pid in "${pids[@]}"; do
    if [[ $pid != "$1" ]]; then kept+=("$pid"); fi
  done
  pids=("${kept[@]+"${kept[@]}"}")
}

# drop_pid PID: stops PID (a server that never listened), waits for it and
# forgets it.
drop_pid() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget_pid "$1"
}

# Runs a tool bounded in time; its stdout goes to FILE, stderr to the log.
run() { # run SECONDS FILE CMD...
  local limit="$1" file="$2"
  shift 2
  timeout --kill-after=5 "$limit" "$@" >"$file" 2>>"$BENCH_WORK/tools.log"
}

wait_for_socket() { # wait_for_socket PATH PID
  local path="$1" pid="$2"
  for _ in $(seq 150); do
    [[ -S $path ]] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# start_daemon LOG SOCKET CMD...: starts an rdmaplaned command line in the
# background (output appended to LOG), adds it to pids and waits for its
# socket; 1 when it did not come up.
start_daemon() {
  local daemon_log="$1" sock="$2"
  shift 2
  "$@" >>"$daemon_log" 2>&1 &
  pids+=($!)
  wait_for_socket "$sock" "$!"
}

# start_memif_pair TAG RDMAPLANED FLAGS...: daemon A (the memif server,
# 10.0.0.1, CPU 1) and daemon B (the client, 10.0.0.2, CPU 0) joined by a
# memif link, both with FLAGS (B's memif devargs also with MEMIF_B_DEVARGS,
# e.g. ",zero-copy=yes"); sets MEMIF_A and MEMIF_B to their sockets. 1
# (after stopping what started) when either did not come up.
MEMIF_A="" MEMIF_B="" MEMIF_B_DEVARGS=""
# Where the client tool runs over memif (see the placement above).
memif_client_cpu=("${cpu1[@]}")
start_memif_pair() {
  local tag="$1" daemon="$2"
  shift 2
  local link="$BENCH_WORK/memif-$tag.sock"
  MEMIF_A="$BENCH_WORK/a-$tag.sock" MEMIF_B="$BENCH_WORK/b-$tag.sock"
  if ! start_daemon "$BENCH_WORK/daemon_a.log" "$MEMIF_A" "${cpu1[@]}" \
    "$daemon" --socket="$MEMIF_A" --file_prefix="rdp-bench-$$-a" \
    --ip=10.0.0.1 --port="net_memif0,role=server,socket=$link" "$@"; then
    stop_pids
    return 1
  fi
  if ! start_daemon "$BENCH_WORK/daemon_b.log" "$MEMIF_B" "${cpu0[@]}" \
    "$daemon" --socket="$MEMIF_B" --file_prefix="rdp-bench-$$-b" \
    --ip=10.0.0.2 --port="net_memif0,role=client,socket=$link$MEMIF_B_DEVARGS" \
    "$@"; then
    stop_pids
    return 1
  fi
}

# bench_source_revision: sets commit (short hash, or "unknown") and
# dirty_files (comma-separated tracked files that differ from it, at most
# 20 named, then "and N more") for the source tree this library came from,
# symlinks resolved: under Bazel the runner runs from a runfiles tree, and
# git, asked there, answers for whatever checkout encloses the output base,
# or for none. A tree that is not the top of a git checkout of its own
# reports "unknown" and no files.
# shellcheck disable=SC2034  # the variables are the runner's
bench_source_revision() {
  local src top list count
  commit=unknown dirty_files=""
  src="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd -P)"
  top="$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" || return 0
  [[ -n $top && "$(cd "$top" && pwd -P)" == "$src" ]] || return 0
  commit="$(git -C "$src" rev-parse --short HEAD 2>/dev/null)" || {
    commit=unknown
    return 0
  }
  list="$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null |
    awk '{ print $NF }')" || list=""
  [[ -n $list ]] || return 0
  count="$(wc -l <<<"$list")"
  dirty_files="$(head -n 20 <<<"$list" | paste -sd, -)"
  if ((count > 20)); then
    dirty_files+=",and $((count - 20)) more"
  fi
}
