# shellcheck shell=bash
# Shared helpers of the end-to-end tests, sourced by memif_test.sh and
# netns_test.sh: starting and stopping rdmaplaned processes, running the
# transfer tool (also in split mode) and the connect probe with bounded
# waits, printing the daemons' logs when something fails, and reporting a
# test that cannot run here as skipped (e2e_skip).
#
# The sourcing script sets E2E_NAME (the prefix of every message) and
# E2E_TMP (a private folder, short enough for Unix socket paths; see
# e2e_make_tmp), calls e2e_install_traps, and may append commands to
# E2E_CLEANUP_HOOKS (run after the daemons are stopped, e.g. to delete
# network namespaces).

E2E_NAME="${E2E_NAME:-e2e}"
E2E_TMP="${E2E_TMP:-}"
E2E_CLEANUP_HOOKS=()
# Daemons that this test started and that still run: name -> pid, and what
# the checks need to know about them.
declare -A E2E_PID=() E2E_LOG=() E2E_SOCK=() E2E_PREFIX=()
E2E_DAEMONS=() # names, in start order (also those already stopped)
E2E_HELPER_PIDS=() # background helpers still to be ended at exit
E2E_STOP_STATUS=0
E2E_STOP_SECONDS=0

e2e_log() {
  echo "$E2E_NAME: $*"
}

# Prints every daemon log of this test on stderr.
e2e_dump_logs() {
  local name
  for name in "${E2E_DAEMONS[@]}"; do
    local log="${E2E_LOG[$name]}"
    [[ -f $log ]] || continue
    echo "----- log of daemon $name ($log, $(wc -l <"$log") lines) -----" >&2
    cat "$log" >&2
  done
  echo "----- end of daemon logs -----" >&2
}

e2e_fail() {
  echo "FAIL: $E2E_NAME: $*" >&2
  e2e_dump_logs
  exit 1
}

# The folder in which DPDK keeps the runtime folder of each --file_prefix,
# chosen the way DPDK 22.11's EAL chooses it.
e2e_dpdk_runtime_base() {
  if [[ -n ${RUNTIME_DIRECTORY:-} ]]; then
    echo "$RUNTIME_DIRECTORY/dpdk"
  elif [[ $(id -u) -eq 0 ]]; then
    echo "/var/run/dpdk"
  else
    echo "${XDG_RUNTIME_DIR:-/tmp}/dpdk"
  fi
}

e2e_now() {
  date +%s.%N
}

# Seconds since $1 (a value of e2e_now), with two decimals.
e2e_since() {
  awk -v a="$1" -v b="$(e2e_now)" 'BEGIN { printf "%.2f", b - a }'
}

# e2e_start_daemon NAME SOCKET FILE_PREFIX COMMAND...
# Starts COMMAND (an rdmaplaned command line, possibly behind `ip netns
# exec`, which execs it: the pid is the daemon's) with its output in
# E2E_TMP/NAME.log, and waits at most 15 s for SOCKET to appear. Returns 0
# when the daemon serves, 1 when it exited (or never served; it is then
# stopped) with the reason printed.
e2e_start_daemon() {
  e2e_launch_daemon "$@"
  e2e_await_daemon "$1"
}

# e2e_launch_daemon NAME SOCKET FILE_PREFIX COMMAND...: e2e_start_daemon's
# first half, which does not wait: daemons launched one after the other
# start together. e2e_await_daemon NAME then waits for it.
e2e_launch_daemon() {
  local name="$1" sock="$2" prefix="$3"
  shift 3
  local log="$E2E_TMP/$name.log"
  local runtime
  runtime="$(e2e_dpdk_runtime_base)/$prefix"
  if [[ -e $sock ]]; then
    e2e_fail "socket $sock of daemon $name exists before its start"
  fi
  if [[ -e $runtime ]]; then
    e2e_fail "DPDK runtime folder $runtime exists before daemon $name starts"
  fi
  e2e_log "start daemon $name: $*"
  "$@" >"$log" 2>&1 &
  local pid=$!
  E2E_PID[$name]=$pid
  E2E_LOG[$name]=$log
  E2E_SOCK[$name]=$sock
  E2E_PREFIX[$name]=$prefix
  E2E_DAEMONS+=("$name")
}

e2e_await_daemon() {
  local name="$1"
  local sock="${E2E_SOCK[$name]}" log="${E2E_LOG[$name]}"
  local pid="${E2E_PID[$name]}" i
  for ((i = 0; i < 150; i++)); do
    if [[ -S $sock ]]; then
      e2e_log "daemon $name (pid $pid) serves $sock"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      local status=0
      wait "$pid" || status=$?
      unset 'E2E_PID[$name]'
      e2e_log "daemon $name exited during start-up with status $status; its log:"
      sed 's/^/    /' "$log"
      return 1
    fi
    sleep 0.1
  done
  e2e_log "daemon $name did not create $sock within 15 s; stopping it"
  e2e_stop_daemon "$name" || true
  sed 's/^/    /' "$log"
  return 1
}

# e2e_start_memif_pair DAEMON_BIN TAG [DAEMON_ARGS...]: daemons a (the
# memif server, started first, at 10.9.0.1) and b (the memif
# client, at 10.9.0.2) joined over memif in E2E_TMP, with file prefixes
# rdp-TAG-PID-a and -b. Sets E2E_SOCK_A, E2E_SOCK_B, E2E_IP_A and E2E_IP_B;
# fails the test when either does not start.
e2e_start_memif_pair() {
  local daemon_bin="$1" tag="$2"
  shift 2
  E2E_IP_A=10.9.0.1
  E2E_IP_B=10.9.0.2
  E2E_SOCK_A="$E2E_TMP/a.sock"
  E2E_SOCK_B="$E2E_TMP/b.sock"
  local memif="$E2E_TMP/memif.sock" prefix="rdp-$tag-$$"
  e2e_start_daemon a "$E2E_SOCK_A" "$prefix-a" \
    "$daemon_bin" --socket="$E2E_SOCK_A" --file_prefix="$prefix-a" \
    --port="net_memif0,role=server,socket=$memif" --ip="$E2E_IP_A" "$@" ||
    e2e_fail "daemon a (memif server) did not start"
  e2e_start_daemon b "$E2E_SOCK_B" "$prefix-b" \
    "$daemon_bin" --socket="$E2E_SOCK_B" --file_prefix="$prefix-b" \
    --port="net_memif0,role=client,socket=$memif" --ip="$E2E_IP_B" "$@" ||
    e2e_fail "daemon b (memif client) did not start"
}

# e2e_wait_port_active LABEL SOCKET VERBS_SO: until ibv_devinfo (under the
# verbs front end VERBS_SO, with RDMAPLANE_SOCKET=SOCKET) shows port 1 of
# rdmaplane0 ACTIVE. Daemons report their data port's link as it is, and a
# memif link comes up a moment after both daemons serve (longer on a busy
# machine): at most 300 looks, 0.1 s apart.
e2e_wait_port_active() {
  local label="$1" sock="$2" so="$3" i out="$E2E_TMP/port-$1.out"
  for ((i = 0; i < 300; i++)); do
    if timeout --kill-after=5 20 env RDMAPLANE_SOCKET="$sock" LD_PRELOAD="$so" \
      ibv_devinfo -d rdmaplane0 >"$out" 2>&1 &&
      grep -qE '^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$' "$out"; then
      e2e_log "port of daemon $label active after $i looks"
      return 0
    fi
    sleep 0.1
  done
  sed 's/^/    /' "$out" >&2
  e2e_fail "the port of daemon $label never became active"
}

# e2e_stop_daemon NAME: SIGTERM, at most 5 s, then SIGKILL. Sets
# E2E_STOP_STATUS (137 when it had to be killed) and E2E_STOP_SECONDS.
# Returns 0 when the daemon ended by itself within 5 s, 1 otherwise.
e2e_stop_daemon() {
  local name="$1"
  local pid="${E2E_PID[$name]:-}"
  E2E_STOP_STATUS=0
  E2E_STOP_SECONDS=0
  [[ -n $pid ]] || return 0
  unset 'E2E_PID[$name]'
  local start i ended=1
  start="$(e2e_now)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      ended=0
      break
    fi
    sleep 0.1
  done
  if [[ $ended -ne 0 ]]; then
    echo "$E2E_NAME: daemon $name (pid $pid) still runs 5 s after SIGTERM; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" || E2E_STOP_STATUS=$?
  E2E_STOP_SECONDS="$(e2e_since "$start")"
  return "$ended"
}

# e2e_check_clean_stop NAME: stops the daemon with SIGTERM and checks that it
# exited with status 0 within 5 s and left neither its socket nor its DPDK
# runtime folder behind.
e2e_check_clean_stop() {
  local name="$1"
  local sock="${E2E_SOCK[$name]}"
  local runtime
  runtime="$(e2e_dpdk_runtime_base)/${E2E_PREFIX[$name]}"
  e2e_log "SIGTERM to daemon $name; expecting exit status 0 within 5 s"
  if ! e2e_stop_daemon "$name"; then
    e2e_fail "daemon $name did not stop within 5 s of SIGTERM (killed; status $E2E_STOP_STATUS)"
  fi
  if [[ $E2E_STOP_STATUS -ne 0 ]]; then
    e2e_fail "daemon $name exited with status $E2E_STOP_STATUS after SIGTERM"
  fi
  e2e_log "daemon $name exited with status 0 in ${E2E_STOP_SECONDS} s"
  if [[ -e $sock ]]; then
    e2e_fail "daemon $name left its socket $sock behind"
  fi
  if [[ -e $runtime ]]; then
    e2e_fail "daemon $name left its DPDK runtime folder $runtime behind"
  fi
  e2e_log "daemon $name removed $sock and $runtime"
}

# e2e_try_transfer LABEL TIMEOUT_S TRANSFER_ARGS...: runs the transfer tool,
# bounded by TIMEOUT_S, and prints its output. Returns 0 when it exited with
# status 0 and its last line starts with "transfer: ok:", 1 otherwise, with
# the reason in E2E_TRANSFER_ERROR.
E2E_TRANSFER_ERROR=""
e2e_try_transfer() {
  local label="$1" limit="$2"
  shift 2
  local out="$E2E_TMP/transfer-$label.out" err="$E2E_TMP/transfer-$label.err"
  local status=0 start took last
  E2E_TRANSFER_ERROR=""
  e2e_log "transfer $label: $*"
  start="$(e2e_now)"
  timeout --kill-after=5 "$limit" "$@" >"$out" 2>"$err" || status=$?
  took="$(e2e_since "$start")"
  sed 's/^/    /' "$err"
  sed 's/^/    /' "$out"
  last="$(tail -n 1 "$out")"
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    E2E_TRANSFER_ERROR="transfer $label did not finish within $limit s"
  elif [[ $status -ne 0 ]]; then
    E2E_TRANSFER_ERROR="transfer $label exited with status $status after $took s: $last"
  elif [[ $last != "transfer: ok:"* ]]; then
    E2E_TRANSFER_ERROR="transfer $label: last line was: $last"
  else
    e2e_log "transfer $label ok in $took s"
    return 0
  fi
  e2e_log "$E2E_TRANSFER_ERROR"
  return 1
}

# e2e_transfer LABEL TIMEOUT_S TRANSFER_ARGS...: e2e_try_transfer, and the
# test fails when the transfer did.
e2e_transfer() {
  if ! e2e_try_transfer "$@"; then
    e2e_fail "$E2E_TRANSFER_ERROR"
  fi
}

# e2e_split_transfer LABEL TIMEOUT_S TRANSFER SERVER_SOCKET CLIENT_SOCKET
#     PEER [CLIENT_ARGS...]: the two-host procedure of docs/operations.md
# ("Two hosts", step 6) with rdmaplane_transfer's split mode: a server
# (--listen --once, a 2 MiB buffer) with a session on the daemon at
# SERVER_SOCKET, and a client with a session on the daemon at CLIENT_SOCKET
# that connects to the server's service at PEER (the data-port address of
# the server's daemon), so the RDMA connection crosses the data port. The
# out-of-band TCP connection, which carries the server's descriptor and the
# verdicts, goes over this host's loopback. Both must end with
# "transfer: ok" (the client: every byte it read and wrote back checked; the
# server: the client's bytes landed in its buffer, the rest unchanged),
# within TIMEOUT_S; otherwise the test fails.
e2e_split_transfer() {
  local label="$1" limit="$2" transfer="$3" server_sock="$4" client_sock="$5" peer="$6"
  shift 6
  local service="split-$label"
  local out="$E2E_TMP/split-server-$label.out" err="$E2E_TMP/split-server-$label.err"
  e2e_log "split transfer $label: server for '$service' on $server_sock, client on $client_sock to $peer"
  # Created here: the loop below reads them before the background shell
  # may have opened them.
  : >"$out"
  : >"$err"
  timeout --kill-after=5 "$limit" "$transfer" --listen="$service" \
    --socket="$server_sock" --once --oob_port=0 --bytes=2097152 \
    --timeout_s="$limit" >"$out" 2>"$err" &
  local server=$!
  E2E_HELPER_PIDS+=("$server")
  local i port=""
  for ((i = 0; i < 100; i++)); do
    port="$(sed -n 's/.*out-of-band TCP port \([0-9][0-9]*\).*/\1/p' "$err")"
    [[ -n $port ]] && break
    if ! kill -0 "$server" 2>/dev/null; then
      sed 's/^/    /' "$err" "$out"
      e2e_fail "split transfer $label: the server exited during start-up"
    fi
    sleep 0.1
  done
  [[ -n $port ]] || e2e_fail "split transfer $label: the server named no out-of-band port within 10 s"
  if ! e2e_try_transfer "$label" "$limit" "$transfer" --connect="$service" \
    --peer="$peer" --socket="$client_sock" --oob="127.0.0.1:$port" "$@"; then
    sed 's/^/    server: /' "$err" "$out"
    e2e_fail "$E2E_TRANSFER_ERROR"
  fi
  local last
  last="$(tail -n 1 "$E2E_TMP/transfer-$label.out")"
  [[ $last == *"; the server found all "*" written bytes in place" ]] ||
    e2e_fail "split transfer $label: the client's last line does not report the server's verdict: $last"
  local status=0
  wait "$server" || status=$?
  sed 's/^/    server: /' "$err" "$out"
  last="$(tail -n 1 "$out")"
  if [[ $status -ne 0 ]]; then
    e2e_fail "split transfer $label: the server exited with status $status: $last"
  fi
  [[ $last == "transfer: ok: client 127.0.0.1:"*": its "*" written bytes landed, the rest is unchanged" ]] ||
    e2e_fail "split transfer $label: the server's last line was: $last"
  e2e_log "split transfer $label: client and server ok"
}

# e2e_skip_round NAME REASON: an optional round of the test that cannot run
# here: logged, and reported by e2e_finish as a skipped test case of its own
# beside the test's.
E2E_SKIPPED_ROUNDS=()
e2e_skip_round() {
  local name="$1"
  shift
  e2e_log "$name skipped: $*"
  E2E_SKIPPED_ROUNDS+=("$name"$'\t'"$*")
}

# e2e_finish: the last step of a test that passed. With rounds skipped (and
# under Bazel, which names the file in XML_OUTPUT_FILE), writes a JUnit XML
# of one passed test case for the test and one skipped case per round, so
# that deploy/test.sh counts them; otherwise Bazel's own XML stands.
e2e_finish() {
  [[ ${#E2E_SKIPPED_ROUNDS[@]} -gt 0 && -n ${XML_OUTPUT_FILE:-} ]] || return 0
  local name="${TEST_TARGET:-$E2E_NAME}"
  printf '%s\n' "${E2E_SKIPPED_ROUNDS[@]}" | E2E_TEST_NAME="$name" python3 -c '
import os, sys
from xml.sax.saxutils import quoteattr
name = os.environ["E2E_TEST_NAME"]
rounds = [line.rstrip("\n").split("\t", 1) for line in sys.stdin if line.strip()]
out = ["<?xml version=\"1.0\" encoding=\"UTF-8\"?>", "<testsuites>",
       f"  <testsuite name={quoteattr(name)} tests=\"{1 + len(rounds)}\" "
       f"failures=\"0\" errors=\"0\" skipped=\"{len(rounds)}\">",
       f"    <testcase name={quoteattr(name)} status=\"run\"/>"]
for r, reason in rounds:
    case = quoteattr(name + "/" + r)
    out.append(f"    <testcase name={case} status=\"notrun\">")
    out.append(f"      <skipped message={quoteattr(reason)}/>")
    out.append("    </testcase>")
out += ["  </testsuite>", "</testsuites>"]
sys.stdout.write("\n".join(out) + "\n")
' >"$XML_OUTPUT_FILE" || e2e_fail "cannot write $XML_OUTPUT_FILE to report the skipped rounds"
}

# e2e_skip REASON: ends a test that cannot run here as SKIPPED, visibly: it
# prints "SKIPPED: REASON" and, under Bazel (which names the file in
# XML_OUTPUT_FILE), writes a JUnit XML whose one test case carries
# <skipped/>, which deploy/test.sh counts as skipped rather than passed.
# Exits 0. Call it before e2e_install_traps, or after: the cleanup runs
# either way.
e2e_skip() {
  local reason="$*"
  echo "SKIPPED: $reason"
  if [[ -n ${XML_OUTPUT_FILE:-} ]]; then
    local name="${TEST_TARGET:-$E2E_NAME}"
    E2E_SKIP_NAME="$name" E2E_SKIP_REASON="$reason" python3 -c '
import os, sys
from xml.sax.saxutils import quoteattr
name = quoteattr(os.environ["E2E_SKIP_NAME"])
reason = quoteattr(os.environ["E2E_SKIP_REASON"])
sys.stdout.write(
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<testsuites>\n"
    f"  <testsuite name={name} tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\">\n"
    f"    <testcase name={name} status=\"notrun\">\n"
    f"      <skipped message={reason}/>\n"
    "    </testcase>\n"
    "  </testsuite>\n"
    "</testsuites>\n")
' >"$XML_OUTPUT_FILE" || {
      echo "FAIL: $E2E_NAME: cannot write $XML_OUTPUT_FILE to report the skip" >&2
      exit 1
    }
  fi
  exit 0
}

# e2e_probe LABEL EXPECTED_STATUS MAX_SECONDS TEXT PROBE_ARGS...: runs the
# connect probe (bounded by 30 s) and checks that the connect failed with
# EXPECTED_STATUS within MAX_SECONDS and that its message contains TEXT.
e2e_probe() {
  local label="$1" expected="$2" max_s="$3" text="$4"
  shift 4
  local out="$E2E_TMP/probe-$label.out" status=0
  e2e_log "probe $label: $* (expecting $expected within $max_s s, naming '$text')"
  timeout --kill-after=5 30 "$@" >"$out" 2>&1 || status=$?
  sed 's/^/    /' "$out"
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    e2e_fail "probe $label: the connect did not return within 30 s"
  fi
  if [[ $status -ne 1 ]]; then
    e2e_fail "probe $label: exit status $status (1 expected: a failed connect)"
  fi
  local line
  line="$(grep '^connect_probe: status=' "$out" | tail -n 1)"
  local got="${line#connect_probe: status=}"
  got="${got%% *}"
  local seconds="${line#* seconds=}"
  seconds="${seconds%% *}"
  local message="${line#* message=}"
  if [[ $got != "$expected" ]]; then
    e2e_fail "probe $label: got $got, expected $expected"
  fi
  if [[ $message != *"$text"* ]]; then
    e2e_fail "probe $label: the message '$message' does not name '$text'"
  fi
  if ! awk -v s="$seconds" -v m="$max_s" 'BEGIN { exit !(s + 0 <= m + 0) }'; then
    e2e_fail "probe $label: the connect took $seconds s (at most $max_s s expected)"
  fi
  e2e_log "probe $label ok: $got after $seconds s: $message"
}

# e2e_counters NAME: prints the daemon's counters (rdmaplanectl at E2E_CTL,
# bounded) into E2E_TMP/counters-NAME.txt and on stdout.
e2e_counters() {
  local name="$1"
  local file="$E2E_TMP/counters-$name.txt" status=0
  timeout --kill-after=5 15 "$E2E_CTL" --socket="${E2E_SOCK[$name]}" \
    --timeout=5s counters >"$file" 2>&1 || status=$?
  if [[ $status -ne 0 ]]; then
    sed 's/^/    /' "$file"
    e2e_fail "rdmaplanectl counters of daemon $name: exit status $status"
  fi
  e2e_log "counters of daemon $name (non-zero):"
  awk 'NR > 1 && $2 != 0 { print "    " $0 }' "$file"
}

# e2e_counter NAME COUNTER: sets E2E_VALUE to the value of COUNTER in the
# last e2e_counters NAME; fails when the daemon did not report it. (Not for
# $(...): e2e_fail must end the test, not a subshell.)
E2E_VALUE=0
# shellcheck disable=SC2034  # E2E_VALUE is read by the sourcing scripts.
e2e_counter() {
  local name="$1" counter="$2" value
  value="$(awk -v c="$counter" '$1 == c { print $2 }' "$E2E_TMP/counters-$name.txt")"
  if [[ ! $value =~ ^[0-9]+$ ]]; then
    e2e_fail "daemon $name reports no counter $counter"
  fi
  E2E_VALUE="$value"
}

# e2e_status NAME FIELD: sets E2E_VALUE to FIELD of daemon NAME's status
# (rdmaplanectl status --json, bounded); fails when it cannot be read. (Not
# for $(...), as e2e_counter.)
e2e_status() {
  local json value
  json="$(timeout --kill-after=5 15 "$E2E_CTL" --socket="${E2E_SOCK[$1]}" --json \
    --timeout=5s status)" || e2e_fail "rdmaplanectl status of daemon $1 failed"
  value="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' \
    "$json" "$2")" || e2e_fail "daemon $1's status has no $2"
  E2E_VALUE="$value"
}

# Stops every daemon still running (SIGTERM, then SIGKILL after 5 s), removes
# the DPDK runtime folders they may have left, runs the hooks and removes
# E2E_TMP. The EXIT trap (e2e_install_traps); keeps the script's exit
# status.
# e2e_hugepages PAGES: PAGES free 2 MiB hugepages and a hugetlbfs for this
# test's daemons. As root, reserves what is missing and mounts a private
# hugetlbfs (in E2E_TMP), and gives both back at exit. Sets E2E_HUGE_DIR to
# the mount and E2E_HUGE_FREE to the free pages once ready; returns 1 with
# the reason in E2E_HUGE_WHY when it cannot.
E2E_HUGE_DIR="" E2E_HUGE_FREE=0 E2E_HUGE_WHY=""
e2e_hugepages() {
  local need="$1" free total
  free="$(sed -n 's/^HugePages_Free: *//p' /proc/meminfo)"
  total="$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)"
  if ((free < need)); then
    if [[ $(id -u) -ne 0 ]]; then
      E2E_HUGE_WHY="needs $need free 2 MiB hugepages ($free free; root reserves them)"
      return 1
    fi
    if echo $((total + need - free)) >/proc/sys/vm/nr_hugepages 2>/dev/null; then
      E2E_CLEANUP_HOOKS+=("echo $total >/proc/sys/vm/nr_hugepages")
    fi
    free="$(sed -n 's/^HugePages_Free: *//p' /proc/meminfo)"
    if ((free < need)); then
      E2E_HUGE_WHY="the kernel granted $free of $need free 2 MiB hugepages"
      return 1
    fi
  fi
  if [[ $(id -u) -eq 0 ]]; then
    mkdir -p "$E2E_TMP/huge"
    if ! mount -t hugetlbfs nodev "$E2E_TMP/huge"; then
      E2E_HUGE_WHY="cannot mount a hugetlbfs"
      return 1
    fi
    # Unmounted before the pages are given back (hooks run in order).
    E2E_CLEANUP_HOOKS=("umount $E2E_TMP/huge" "${E2E_CLEANUP_HOOKS[@]}")
    E2E_HUGE_DIR="$E2E_TMP/huge"
  else
    E2E_HUGE_DIR="$(awk '$3 == "hugetlbfs" { print $2; exit }' /proc/mounts)"
    if [[ -z $E2E_HUGE_DIR ]]; then
      E2E_HUGE_WHY="no hugetlbfs is mounted (root mounts one)"
      return 1
    fi
  fi
  E2E_HUGE_FREE="$free"
  return 0
}

e2e_cleanup() {
  local status=$?
  set +e
  local name pid
  # Helpers run under timeout(1), which passes SIGTERM on to its command.
  for pid in "${E2E_HELPER_PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  done
  for name in "${E2E_DAEMONS[@]}"; do
    if [[ -n ${E2E_PID[$name]:-} ]]; then
      echo "$E2E_NAME: cleanup: stopping daemon $name (pid ${E2E_PID[$name]})" >&2
      e2e_stop_daemon "$name"
    fi
  done
  local base
  base="$(e2e_dpdk_runtime_base)"
  for name in "${E2E_DAEMONS[@]}"; do
    # Only the folders named after this test's own prefixes.
    if [[ -n ${E2E_PREFIX[$name]:-} && -d $base/${E2E_PREFIX[$name]} ]]; then
      echo "$E2E_NAME: cleanup: removing $base/${E2E_PREFIX[$name]}" >&2
      rm -rf -- "${base:?}/${E2E_PREFIX[$name]}"
    fi
  done
  # Under Bazel the logs stay with the test's outputs.
  if [[ -n ${TEST_UNDECLARED_OUTPUTS_DIR:-} && -n $E2E_TMP && -d $E2E_TMP ]]; then
    cp -- "$E2E_TMP"/*.log "$TEST_UNDECLARED_OUTPUTS_DIR"/ 2>/dev/null
  fi
  local hook
  for hook in "${E2E_CLEANUP_HOOKS[@]}"; do
    eval "$hook"
  done
  if [[ -n $E2E_TMP && -d $E2E_TMP ]]; then
    rm -rf -- "$E2E_TMP"
  fi
  exit "$status"
}

# Cleans up at every exit: a normal one, a failure, or a signal (Bazel's
# timeout sends SIGTERM).
e2e_install_traps() {
  trap e2e_cleanup EXIT
  trap 'echo "$E2E_NAME: interrupted by a signal" >&2; exit 143' TERM INT HUP
}

# A private folder for sockets and logs. TEST_TMPDIR is used when its paths
# stay well below the 108 bytes of a Unix socket path, a short folder under
# /tmp otherwise.
e2e_make_tmp() {
  local base="${TEST_TMPDIR:-/tmp}"
  if ((${#base} > 60)); then
    base=/tmp
  fi
  E2E_TMP="$(mktemp -d "$base/rdp-e2e.XXXXXX")"
}
