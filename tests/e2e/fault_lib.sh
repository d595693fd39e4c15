# shellcheck shell=bash
# Shared helpers of the fault tests (daemon_kill_test.sh, client_kill_test.sh,
# frame_fuzz_test.sh), sourced by them: daemons and helper processes started
# in the background and always ended, bounded waits for their output, and the
# daemons' counters read with rdmaplanectl.
#
# The sourcing script runs `set -euo pipefail`, sets FL_CTL (the rdmaplanectl
# binary) and calls `fl_init NAME`, which makes a private folder FL_TMP under
# /tmp (short: Unix socket paths are limited to 108 bytes) and installs an
# EXIT trap that ends every process the test started (daemons: SIGTERM,
# FL_STOP_SECONDS, SIGKILL; helpers: SIGKILL), removes the DPDK runtime folders named after
# the test's prefixes and keeps the logs in TEST_UNDECLARED_OUTPUTS_DIR.

FL_NAME="${FL_NAME:-fault}"
FL_TMP=""
FL_CTL="${FL_CTL:-}"
declare -A FL_PID=() FL_LOG=() FL_SOCK=()
declare -A FL_PROC_PID=() FL_PROC_OUT=()
FL_DAEMONS=()  # daemon names, in start order
FL_PROCS=()    # helper process names, in start order
FL_PREFIXES=() # DPDK file prefixes this test uses
FL_STATUS=0    # exit status found by fl_wait_exit / fl_stop_daemon
FL_STOP_SECONDS=30  # how long a signalled daemon may take to end
FL_WAITED=0    # seconds the last successful bounded wait took
FL_JSON=""     # the last answer fl_wait_json accepted

fl_now() {
  date +%s.%N
}

# Seconds from $1 to $2 (default: now), two decimals.
fl_since() {
  awk -v a="$1" -v b="${2:-$(fl_now)}" 'BEGIN { printf "%.2f", b - a }'
}

fl_log() {
  echo "$FL_NAME: [$(date +%H:%M:%S.%3N)] $*"
}

# Prints the end of every daemon log and of every helper's output.
fl_dump() {
  local name
  for name in "${FL_DAEMONS[@]}"; do
    local log="${FL_LOG[$name]}"
    [[ -f $log ]] || continue
    echo "----- last 200 of $(wc -l <"$log") lines of daemon $name ($log) -----" >&2
    tail -n 200 "$log" >&2
  done
  for name in "${FL_PROCS[@]}"; do
    local out="${FL_PROC_OUT[$name]}"
    [[ -f $out ]] || continue
    echo "----- last 30 of $(wc -l <"$out") lines of $name ($out) -----" >&2
    tail -n 30 "$out" >&2
  done
  echo "----- end -----" >&2
}

fl_fail() {
  echo "FAIL: $FL_NAME: $*" >&2
  fl_dump
  exit 1
}

# Where DPDK 22.11 puts the runtime folder of each --file_prefix.
fl_runtime_base() {
  if [[ -n ${RUNTIME_DIRECTORY:-} ]]; then
    echo "$RUNTIME_DIRECTORY/dpdk"
  elif [[ $(id -u) -eq 0 ]]; then
    echo "/var/run/dpdk"
  else
    echo "${XDG_RUNTIME_DIR:-/tmp}/dpdk"
  fi
}

fl_init() {
  FL_NAME="$1"
  [[ -n $FL_CTL && -x $FL_CTL ]] || fl_fail "no rdmaplanectl at '$FL_CTL'"
  FL_TMP="$(mktemp -d /tmp/rdpf.XXXXXX)"
  trap fl_cleanup EXIT
  fl_log "working in $FL_TMP"
}

# fl_prefix VAR SUFFIX: sets VAR to a DPDK file prefix unique to this run,
# remembered for the cleanup.
fl_prefix() {
  printf -v "$1" 'rdpf-%s-%s' "$$" "$2"
  FL_PREFIXES+=("${!1}")
}

# fl_start_daemon NAME SOCKET COMMAND...: starts an rdmaplaned command line
# with its output appended to FL_TMP/NAME.log (a restart keeps the earlier
# lines) and waits at most 15 s until it answers rdmaplanectl on SOCKET (a
# socket file left by a killed predecessor does not count).
fl_start_daemon() {
  local name="$1" sock="$2"
  shift 2
  local log="$FL_TMP/$name.log"
  fl_log "start daemon $name: $*"
  echo "===== $(date -u +%FT%T.%NZ) start: $*" >>"$log"
  "$@" >>"$log" 2>&1 &
  local pid=$!
  FL_PID[$name]=$pid
  FL_LOG[$name]=$log
  FL_SOCK[$name]=$sock
  if [[ " ${FL_DAEMONS[*]} " != *" $name "* ]]; then
    FL_DAEMONS+=("$name")
  fi
  local start i
  start="$(fl_now)"
  for ((i = 0; i < 150; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      local status=0
      wait "$pid" || status=$?
      unset 'FL_PID[$name]'
      fl_fail "daemon $name exited during start-up with status $status"
    fi
    if [[ -S $sock ]] &&
      timeout 5 "$FL_CTL" --socket="$sock" --timeout=1s status >/dev/null 2>&1; then
      fl_log "daemon $name (pid $pid) serves $sock after $(fl_since "$start") s"
      return 0
    fi
    sleep 0.1
  done
  fl_fail "daemon $name did not serve $sock within 15 s"
}

# fl_signal_daemon NAME SIGNAL: sends SIGNAL and waits at most 5 s for the
# daemon to end (then SIGKILL). Sets FL_STATUS to its exit status. Returns 1
# when it had to be killed.
fl_signal_daemon() {
  local name="$1" sig="$2"
  local pid="${FL_PID[$name]:-}"
  FL_STATUS=0
  [[ -n $pid ]] || fl_fail "daemon $name is not running"
  unset 'FL_PID[$name]'
  kill "-$sig" "$pid" 2>/dev/null || true
  # The bound tells a daemon that does not stop from one that stops slowly:
  # a clean stop takes well under a second, but a sanitizer build on two
  # busy CPUs (LeakSanitizer's scan at exit, ThreadSanitizer's slowdown)
  # can take several.
  local i ended=1
  for ((i = 0; i < FL_STOP_SECONDS * 10; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      ended=0
      break
    fi
    sleep 0.1
  done
  if [[ $ended -ne 0 ]]; then
    echo "$FL_NAME: daemon $name (pid $pid) still runs $FL_STOP_SECONDS s after SIG$sig; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" || FL_STATUS=$?
  echo "===== $(date -u +%FT%T.%NZ) SIG$sig: exit status $FL_STATUS" >>"${FL_LOG[$name]}"
  return "$ended"
}

# fl_clean_stop NAME: SIGTERM; the daemon must exit with status 0 within
# FL_STOP_SECONDS and leave neither its socket nor its DPDK runtime folder
# (PREFIX, $2).
fl_clean_stop() {
  local name="$1" prefix="$2"
  local start
  start="$(fl_now)"
  if ! fl_signal_daemon "$name" TERM; then
    fl_fail "daemon $name did not stop within $FL_STOP_SECONDS s of SIGTERM"
  fi
  [[ $FL_STATUS -eq 0 ]] || fl_fail "daemon $name exited with status $FL_STATUS after SIGTERM"
  [[ ! -e ${FL_SOCK[$name]} ]] || fl_fail "daemon $name left ${FL_SOCK[$name]} behind"
  [[ ! -e "$(fl_runtime_base)/$prefix" ]] ||
    fl_fail "daemon $name left $(fl_runtime_base)/$prefix behind"
  fl_log "daemon $name stopped cleanly (status 0) in $(fl_since "$start") s"
}

# fl_alive NAME: the daemon's process runs and it answers rdmaplanectl.
fl_alive() {
  local name="$1"
  local pid="${FL_PID[$name]:-}"
  if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
    local status=0
    [[ -z $pid ]] || wait "$pid" || status=$?
    [[ -z $pid ]] || unset 'FL_PID[$name]'
    fl_fail "daemon $name is gone (exit status $status)"
  fi
  timeout 10 "$FL_CTL" --socket="${FL_SOCK[$name]}" --timeout=5s status >/dev/null 2>&1 ||
    fl_fail "daemon $name runs but does not answer rdmaplanectl"
}

# fl_counters NAME: prints the daemon's counters as JSON.
fl_counters() {
  timeout 10 "$FL_CTL" --socket="${FL_SOCK[$1]}" --json --timeout=5s counters
}

# fl_json_get JSON KEY: one value of a flat JSON object.
fl_json_get() {
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# fl_counter NAME KEY: one counter of a daemon.
fl_counter() {
  local json
  json="$(fl_counters "$1")" || fl_fail "rdmaplanectl counters of $1 failed"
  fl_json_get "$json" "$2"
}

# fl_wait_json LABEL NAME SECONDS TOPIC CONDITION: polls `rdmaplanectl
# --json TOPIC` of the daemon until CONDITION (a Python expression over d,
# the parsed answer: a dict for counters and status, a list for clients,
# connections and registrations) holds, at most SECONDS. Sets FL_WAITED and
# FL_JSON. On time-out prints the daemon's counters, clients, connections and
# registrations and fails.
fl_wait_json() {
  local label="$1" name="$2" limit="$3" topic="$4" condition="$5"
  local start deadline json=""
  start="$(fl_now)"
  deadline="$(awk -v s="$start" -v l="$limit" 'BEGIN { printf "%.3f", s + l }')"
  while :; do
    fl_alive "$name"
    json="$(timeout 10 "$FL_CTL" --socket="${FL_SOCK[$name]}" --json --timeout=5s "$topic")" ||
      fl_fail "rdmaplanectl $topic of $name failed"
    if python3 -c 'import json, sys
d = json.loads(sys.argv[1])
sys.exit(0 if eval(sys.argv[2]) else 1)' "$json" "$condition"; then
      FL_WAITED="$(fl_since "$start")"
      FL_JSON="$json" # read by the tests
      fl_log "$label: daemon $name: $topic reached ($condition) after $FL_WAITED s"
      return 0
    fi
    if awk -v n="$(fl_now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
      break
    fi
    sleep 0.1
  done
  echo "$FL_NAME: $label: daemon $name's $topic: $json" >&2
  local t
  for t in counters clients connections registrations; do
    echo "$FL_NAME: $label: daemon $name's $t:" >&2
    timeout 10 "$FL_CTL" --socket="${FL_SOCK[$name]}" --timeout=5s "$t" >&2 || true
  done
  fl_fail "$label: daemon $name: $topic did not reach ($condition) within $limit s"
}

# fl_wait_counters LABEL NAME SECONDS CONDITION: fl_wait_json on counters.
fl_wait_counters() {
  fl_wait_json "$1" "$2" "$3" counters "$4"
}

FL_BASELINE="d['sessions'] == 0 and d['connections'] == 0 and d['registrations'] == 0 and d['arenas'] == 0"

# fl_wait_baseline LABEL NAME SECONDS: no sessions, connections,
# registrations or arenas left.
fl_wait_baseline() {
  fl_wait_counters "$1" "$2" "$3" "$FL_BASELINE"
}

# fl_start_proc NAME COMMAND...: a helper process with its output in
# FL_TMP/NAME.out and no standard input.
fl_start_proc() {
  local name="$1"
  shift
  local out="$FL_TMP/$name.out"
  "$@" >"$out" 2>&1 </dev/null &
  FL_PROC_PID[$name]=$!
  FL_PROC_OUT[$name]=$out
  FL_PROCS+=("$name")
  fl_log "started $name (pid $!): $*"
}

# fl_wait_line NAME REGEX SECONDS: waits until a line of NAME's output
# matches REGEX (grep -E); prints the first such line. Fails when NAME exits
# without it or the time runs out.
fl_wait_line() {
  local name="$1" regex="$2" limit="$3"
  local out="${FL_PROC_OUT[$name]}" pid="${FL_PROC_PID[$name]:-}"
  local i line
  for ((i = 0; i <= limit * 50; i++)); do
    if line="$(grep -m 1 -E "$regex" "$out")"; then
      echo "$line"
      return 0
    fi
    if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
      # One last look: the line may have come just before the exit.
      if line="$(grep -m 1 -E "$regex" "$out")"; then
        echo "$line"
        return 0
      fi
      fl_fail "$name ended without a line matching '$regex'"
    fi
    sleep 0.02
  done
  fl_fail "$name printed no line matching '$regex' within $limit s"
}

# fl_count_lines NAME REGEX: how many lines of NAME's output match.
fl_count_lines() {
  grep -c -E "$2" "${FL_PROC_OUT[$1]}" || true
}

# fl_wait_exit NAME SECONDS: waits for the helper to exit, at most SECONDS
# (then SIGKILL and fail); sets FL_STATUS.
fl_wait_exit() {
  local name="$1" limit="$2"
  local pid="${FL_PROC_PID[$name]:-}"
  [[ -n $pid ]] || fl_fail "$name is not running"
  local i
  for ((i = 0; i <= limit * 50; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      FL_STATUS=0
      wait "$pid" || FL_STATUS=$?
      unset 'FL_PROC_PID[$name]'
      return 0
    fi
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" || true
  unset 'FL_PROC_PID[$name]'
  fl_fail "$name did not exit within $limit s (killed)"
}

# fl_kill_proc NAME: SIGKILL, and reaps it.
fl_kill_proc() {
  local name="$1"
  local pid="${FL_PROC_PID[$name]:-}"
  [[ -n $pid ]] || fl_fail "$name is not running"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" || true
  unset 'FL_PROC_PID[$name]'
}

# fl_transfer LABEL TIMEOUT_S TRANSFER_ARGS...: runs rdmaplane_transfer
# (bounded) and checks its exit status and last line.
fl_transfer() {
  local label="$1" limit="$2"
  shift 2
  local out="$FL_TMP/transfer-$label.out"
  local status=0 start
  start="$(fl_now)"
  timeout --kill-after=5 "$limit" "$@" >"$out" 2>&1 || status=$?
  local last
  last="$(grep '^transfer: ' "$out" | tail -n 1)"
  if [[ $status -ne 0 || $last != "transfer: ok:"* ]]; then
    sed 's/^/    /' "$out" >&2
    [[ $status -ne 124 && $status -ne 137 ]] ||
      fl_fail "transfer $label did not finish within $limit s"
    fl_fail "transfer $label failed (exit status $status): $last"
  fi
  fl_log "transfer $label ok in $(fl_since "$start") s: ${last#transfer: ok: }"
}

fl_cleanup() {
  local status=$?
  set +e
  local name pid
  for name in "${FL_PROCS[@]}"; do
    pid="${FL_PROC_PID[$name]:-}"
    if [[ -n $pid ]]; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  for name in "${FL_DAEMONS[@]}"; do
    if [[ -n ${FL_PID[$name]:-} ]]; then
      echo "$FL_NAME: cleanup: stopping daemon $name (pid ${FL_PID[$name]})" >&2
      fl_signal_daemon "$name" TERM
    fi
  done
  local base prefix
  base="$(fl_runtime_base)"
  for prefix in "${FL_PREFIXES[@]}"; do
    if [[ -n $prefix && -d $base/$prefix ]]; then
      rm -rf -- "${base:?}/$prefix"
    fi
  done
  if [[ -n ${TEST_UNDECLARED_OUTPUTS_DIR:-} && -n $FL_TMP && -d $FL_TMP ]]; then
    cp -- "$FL_TMP"/*.log "$FL_TMP"/*.out "$TEST_UNDECLARED_OUTPUTS_DIR"/ 2>/dev/null
  fi
  if [[ -n $FL_TMP && -d $FL_TMP ]]; then
    rm -rf -- "$FL_TMP"
  fi
  exit "$status"
}
