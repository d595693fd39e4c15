#!/usr/bin/env bash
# Unmodified RDMA tools over librdmaplane-verbs.so (LD_PRELOAD), between two
# rdmaplaned daemons joined by memif: A (memif server, 10.9.0.1) and B (memif
# client, 10.9.0.2).
#   1. ibv_devices and ibv_devinfo -v show each daemon as rdmaplane0: port
#      active, MTU 4096, Ethernet, GID 0 its IPv4-mapped address, RoCE v2;
#      with RDMAPLANE_SOCKET=A:B both appear, B as rdmaplane1.
#   2. With RDMAPLANE_SOCKET naming a socket nobody serves, ibv_devices lists
#      no device, and ibv_devinfo and ib_write_bw fail saying so.
#   3. Pairs of one tool, a server with a session on A and its client on B
#      (the out-of-band TCP connection over this host's loopback, a free
#      port per run); both ends must exit 0 and print their results:
#      - perftest's ib_write_bw, ib_read_bw, ib_write_lat and ib_read_lat,
#        each with -s 65536 and with -a (2 B .. 8 MiB), and ib_read_bw and
#        ib_read_lat in event mode (-e) too: perftest's results table (the server of
#        ib_read_lat prints none); ib_write_bw and ib_read_bw (16 READs
#        outstanding, -o 16) over 64 queue pairs (-q 64), ib_send_bw over
#        16. ib_write_bw refuses -e itself ("Events
#        feature not available on WRITE verb").
#      - ib_write_bw --use_hugepages -s 65536, its buffers on 2 MiB
#        hugepages: as root only, with 64 free hugepages (reserved here when
#        missing; nr_hugepages is set back at every exit); otherwise this
#        case alone is skipped, saying why.
#      - ibverbs-utils' ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong
#        and ibv_srq_pingpong (16 queue pairs on one shared receive queue)
#        (SEND/RECV,
#        -g 0 for RoCE), polling and with -e, with -c, and with both ends
#        on daemon A: both print the bytes and iterations they exchanged,
#        and neither reports invalid data.
#      - UC queue pairs in perftest: ib_write_bw, and ib_send_bw and
#        ib_send_lat (polling and -e) with -c UC; UD: ibv_ud_pingpong as
#        above, and ib_send_bw and ib_send_lat (polling and -e) with -c UD;
#        ib_send_lat -c UD -n 16000, whose receive queue is 16000 deep.
#      - ib_read_lat -s 8 with RDMAPLANE_VERBS_YIELD_AFTER=0 (ibv_poll_cq
#        never yields) and =often (not a number: a warning on stderr).
#      - perftest's two-sided ib_send_bw and ib_send_lat, each with -s 65536
#        and with -a, polling and with -e: results tables as above.
#      - perftest's ib_atomic_bw and ib_atomic_lat, each with -A
#        CMP_AND_SWAP and -A FETCH_AND_ADD, and one of each in event mode
#        (-e): one row of 8 bytes (the server of ib_atomic_lat prints
#        none).
#   4. A daemon C without a data port: ibv_devinfo shows its port active
#      with GID ::ffff:127.0.0.1, and tools with both ends on C run as
#      above: ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and
#      ibv_srq_pingpong -c, ib_write_bw, ib_read_lat, ib_send_lat -c UD and
#      ib_atomic_lat.
#   5. The daemons then stop cleanly.
#
#   perftest_test.sh E2E_LIB TCP_PORTS_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO
#
# perftest and ibverbs-utils are Debian's (deploy/setup.sh installs them).
# ib_write_lat spins on memory and, on a small machine shared with two
# daemons, measures milliseconds: only its table and exit status count.
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 E2E_LIB TCP_PORTS_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO" >&2
  exit 2
fi
E2E_NAME=verbs_perftest_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
# shellcheck source=tests/testing/tcp_ports.sh
source "$2"
daemon_bin="$3"
[[ -x $daemon_bin ]] || e2e_fail "no executable at $daemon_bin"
[[ -f $4 ]] || e2e_fail "no file at $4"
# Absolute: the tools resolve LD_PRELOAD themselves.
verbs_so="$(realpath "$4")"
for tool in ibv_devices ibv_devinfo ib_write_bw ib_read_bw ib_write_lat ib_read_lat \
  ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat ibv_rc_pingpong ibv_uc_pingpong \
  ibv_ud_pingpong ibv_srq_pingpong; do
  command -v "$tool" >/dev/null ||
    e2e_fail "$tool is not installed (deploy/setup.sh installs perftest and ibverbs-utils)"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

e2e_start_memif_pair "$daemon_bin" verbs --log_level=debug
ip_a="$E2E_IP_A" ip_b="$E2E_IP_B" sock_a="$E2E_SOCK_A" sock_b="$E2E_SOCK_B"

# verbs SOCKETS LIMIT_S OUT COMMAND...: COMMAND with the verbs front end
# preloaded and RDMAPLANE_SOCKET=SOCKETS, bounded by LIMIT_S, its output in
# the file OUT. (timeout runs env, which runs COMMAND: only COMMAND loads
# the front end. The redirection is the command's own, not the function
# call's: a signal's trap, which runs once the command returns, still
# writes to the test's output.)
verbs() {
  local sockets="$1" limit="$2" out="$3"
  shift 3
  timeout --kill-after=5 "$limit" env RDMAPLANE_SOCKET="$sockets" \
    LD_PRELOAD="$verbs_so" RDMAPLANE_VERBS_DEBUG=1 "$@" >"$out" 2>&1
}

# expect_line FILE LABEL ERE: FILE has a line matching ERE, or the test
# fails (FILE printed).
expect_line() {
  local file="$1" label="$2" ere="$3"
  if ! grep -qE -- "$ere" "$file"; then
    sed 's/^/    /' "$file" >&2
    e2e_fail "$label: no line matches '$ere'"
  fi
}

# --- 1. Devices -----------------------------------------------------------

# check_devices LABEL SOCKETS NAME...: ibv_devices lists exactly NAMEs, each
# with a node GUID.
check_devices() {
  local label="$1" sockets="$2"
  shift 2
  local out="$E2E_TMP/ibv_devices-$label.out" status=0
  verbs "$sockets" 20 "$out" ibv_devices || status=$?
  sed 's/^/    /' "$out"
  [[ $status -eq 0 ]] || e2e_fail "ibv_devices ($label) exited with status $status"
  local listed want="" name
  listed="$(awk '$1 ~ /^rdmaplane[0-9]+$/ { printf "%s ", $1 }' "$out")"
  for name in "$@"; do
    want+="$name "
  done
  [[ $listed == "$want" ]] ||
    e2e_fail "ibv_devices ($label) lists '$listed', expected '$want'"
  for name in "$@"; do
    expect_line "$out" "ibv_devices ($label)" "^[[:space:]]*${name}[[:space:]]+[0-9a-f]{16}\$"
  done
  e2e_log "ibv_devices ($label): ${*:-no device}"
}

# check_devinfo LABEL SOCKETS DEVICE IP: ibv_devinfo -v of DEVICE shows the
# port as perftest needs it, with GID 0 the IPv4-mapped IP, RoCE v2.
check_devinfo() {
  local label="$1" sockets="$2" device="$3" ip="$4"
  local out="$E2E_TMP/ibv_devinfo-$label.out" status=0
  verbs "$sockets" 20 "$out" ibv_devinfo -v -d "$device" || status=$?
  [[ $status -eq 0 ]] || {
    sed 's/^/    /' "$out" >&2
    e2e_fail "ibv_devinfo -v -d $device ($label) exited with status $status"
  }
  local what="ibv_devinfo -v -d $device ($label)"
  expect_line "$out" "$what" "^hca_id:[[:space:]]+$device\$"
  expect_line "$out" "$what" "^[[:space:]]+phys_port_cnt:[[:space:]]+1\$"
  expect_line "$out" "$what" "^[[:space:]]+port:[[:space:]]+1\$"
  expect_line "$out" "$what" "^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \\(4\\)\$"
  expect_line "$out" "$what" "^[[:space:]]+active_mtu:[[:space:]]+4096 \\(5\\)\$"
  expect_line "$out" "$what" "^[[:space:]]+link_layer:[[:space:]]+Ethernet\$"
  expect_line "$out" "$what" "^[[:space:]]+GID\\[  0\\]:[[:space:]]+::ffff:${ip//./\\.}, RoCE v2\$"
  e2e_log "$what: port 1 active, MTU 4096, Ethernet, GID ::ffff:$ip RoCE v2"
}

check_devices a "$sock_a" rdmaplane0
check_devices b "$sock_b" rdmaplane0
check_devices a+b "$sock_a:$sock_b" rdmaplane0 rdmaplane1
e2e_wait_port_active a "$sock_a" "$verbs_so"
e2e_wait_port_active b "$sock_b" "$verbs_so"
check_devinfo a "$sock_a" rdmaplane0 "$ip_a"
check_devinfo b "$sock_b" rdmaplane0 "$ip_b"
check_devinfo a+b "$sock_a:$sock_b" rdmaplane1 "$ip_b"

# --- 2. No daemon -----------------------------------------------------------

missing="$E2E_TMP/nobody.sock"
check_devices none "$missing"
out="$E2E_TMP/ibv_devinfo-none.out"
status=0
verbs "$missing" 20 "$out" ibv_devinfo || status=$?
sed 's/^/    /' "$out"
[[ $status -ne 0 && $status -ne 124 && $status -ne 137 ]] ||
  e2e_fail "ibv_devinfo without a daemon exited with status $status, not a failure of its own"
expect_line "$out" "ibv_devinfo without a daemon" "No IB devices found"
out="$E2E_TMP/ib_write_bw-none.out"
status=0
verbs "$missing" 20 "$out" ib_write_bw -d rdmaplane0 -p "$(free_tcp_port)" || status=$?
sed 's/^/    /' "$out"
[[ $status -ne 0 && $status -ne 124 && $status -ne 137 ]] ||
  e2e_fail "ib_write_bw without a daemon exited with status $status, not a failure of its own"
expect_line "$out" "ib_write_bw without a daemon" "Did not detect devices|Unable to find the Infiniband/RoCE device"
e2e_log "without a daemon: no device listed; ibv_devinfo and ib_write_bw (status $status) fail saying so"

# --- 3. Tool pairs ------------------------------------------------------------

# check_table LABEL SIDE FILE ITERATIONS FIRST_SIZE LAST_SIZE ROWS: FILE has
# perftest's header line (#bytes) and ROWS numeric rows (0: any number) from
# FIRST_SIZE (empty: any) to LAST_SIZE, each of ITERATIONS iterations.
# Returns 1 with the reason in CHECK_ERROR otherwise.
CHECK_ERROR=""
check_table() {
  local label="$1" side="$2" file="$3" iters="$4" first="$5" last="$6" rows="$7"
  CHECK_ERROR=""
  if ! grep -qE '^[[:space:]]*#bytes[[:space:]]+#iterations' "$file"; then
    CHECK_ERROR="$label: the $side printed no results table (#bytes #iterations ...)"
    return 1
  fi
  local table
  table="$(awk '/^[[:space:]]*#bytes/ { on = 1; next }
    on && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ { print $1, $2 }' "$file")"
  if [[ -z $table ]]; then
    CHECK_ERROR="$label: the $side's table has no numeric row"
    return 1
  fi
  local n got_first got_last bad_iters
  n="$(wc -l <<<"$table")"
  got_first="$(head -n 1 <<<"$table" | cut -d' ' -f1)"
  got_last="$(tail -n 1 <<<"$table" | cut -d' ' -f1)"
  bad_iters="$(awk -v i="$iters" '$2 != i' <<<"$table" | head -n 1)"
  if [[ $rows -ne 0 && $n -ne $rows ]]; then
    CHECK_ERROR="$label: the $side's table has $n rows, expected $rows"
  elif [[ -n $first && $got_first != "$first" ]]; then
    CHECK_ERROR="$label: the $side's table starts at $got_first bytes, expected $first"
  elif [[ $got_last != "$last" ]]; then
    CHECK_ERROR="$label: the $side's table ends at $got_last bytes, expected $last"
  elif [[ -n $bad_iters ]]; then
    CHECK_ERROR="$label: the $side's table has a row '$bad_iters', not $iters iterations"
  else
    return 0
  fi
  return 1
}

# check_pingpong LABEL SIDE FILE ITERATIONS SIZE: FILE is what one end of
# ibv_rc_pingpong printed: "BYTES bytes in ..." with BYTES = 2 x SIZE x
# ITERATIONS (what both directions carried), "ITERATIONS iters in ...",
# and no "invalid data in page N" (-c: the server checks, at the start of
# each page of its buffer, the byte the client wrote there). Returns 1 with
# the reason in CHECK_ERROR otherwise.
check_pingpong() {
  local label="$1" side="$2" file="$3" iters="$4" size="$5"
  CHECK_ERROR=""
  local bytes=$((2 * size * iters))
  if ! grep -qE "^$bytes bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$" "$file"; then
    CHECK_ERROR="$label: the $side printed no '$bytes bytes in ... Mbit/sec' line"
  elif ! grep -qE "^$iters iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$" "$file"; then
    CHECK_ERROR="$label: the $side printed no '$iters iters in ... usec/iter' line"
  elif grep -q 'invalid data' "$file"; then
    CHECK_ERROR="$label: the $side found invalid data: $(grep -m 1 'invalid data' "$file")"
  else
    return 0
  fi
  return 1
}

# perf_pair LABEL CHECK TOOL ARGS...: one run of a pair, the one place where
# the tools run: TOOL ARGS as server on daemon A (rdmaplane0 of
# RDMAPLANE_SOCKET=A; PERF_SERVER_SOCK names another), then as client on B
# (on A too with PERF_CLIENT_SOCK set to A's socket: loopback, two
# processes on one daemon whose queue pairs connect by its own GID)
# connecting to it over 127.0.0.1
# on a free port. Both must exit 0 within 60 s and print their results, as
# CHECK says:
#   tables    perftest's results table at both ends;
#   client    ... at the client only (perftest's ib_read_lat server prints
#             none);
#   pingpong  ibv_rc_pingpong's two lines at both ends (check_pingpong).
# For a table, -s SIZE gives one row, SIZE; -a gives 2 .. 8388608 bytes (23
# rows) on the client and the last row at least on the server; an atomic
# (-A) one row, 8 bytes; the iterations come from -n (for ibv_rc_pingpong
# too; its size from -s, default 4096). On failure both ends' output and the daemons' logs are
# printed.
# One run of a perf_pair (its arguments, after LABEL KIND TOOL, are in
# "$@"; label, kind, tool, iters, size, first, last, rows, server_rows, sout
# and cout are the caller's): sets why to the reason it failed, or to "",
# and took to the seconds it took.
perf_pair_once() {
  local port
  port="$(free_tcp_port)"
  e2e_log "pair $label: $tool $* (port $port)"
  local start
  start="$(e2e_now)"
  : >"$sout"
  # timeout itself in the background (not the verbs function, which would
  # run in a subshell): the cleanup's SIGTERM reaches it, and it passes the
  # signal on to the server.
  timeout --kill-after=5 60 env RDMAPLANE_SOCKET="${PERF_SERVER_SOCK:-$sock_a}" LD_PRELOAD="$verbs_so" \
    RDMAPLANE_VERBS_DEBUG=1 "$tool" -d rdmaplane0 -p "$port" "$@" >"$sout" 2>&1 &
  local server=$!
  E2E_HELPER_PIDS+=("$server")
  if ! wait_listening "$port" "$server"; then
    sed 's/^/    server: /' "$sout" >&2
    e2e_fail "pair $label: the server did not listen on port $port within 10 s"
  fi
  local cstatus=0 sstatus=0
  verbs "${PERF_CLIENT_SOCK:-$sock_b}" 60 "$cout" "$tool" -d rdmaplane0 \
    -p "$port" "$@" 127.0.0.1 || cstatus=$?
  wait "$server" || sstatus=$?
  why=""
  took="$(e2e_since "$start")"
  if [[ $cstatus -ne 0 || $sstatus -ne 0 ]]; then
    why="pair $label: client exit status $cstatus, server exit status $sstatus (124/137: timed out)"
  elif [[ $kind == pingpong ]]; then
    if ! check_pingpong "pair $label" client "$cout" "$iters" "$size" ||
      ! check_pingpong "pair $label" server "$sout" "$iters" "$size"; then
      why="$CHECK_ERROR"
    fi
  elif ! check_table "pair $label" client "$cout" "$iters" "$first" "$last" "$rows"; then
    why="$CHECK_ERROR"
  elif [[ $kind == tables ]] &&
    ! check_table "pair $label" server "$sout" "$iters" "" "$last" "$server_rows"; then
    why="$CHECK_ERROR"
  fi
}

perf_pair() {
  local label="$1" kind="$2" tool="$3"
  shift 3
  local args=("$@") iters="" size="" all=no qps=1 i
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
      -n) iters="${args[$((i + 1))]}" ;;
      -q) qps="${args[$((i + 1))]}" ;; # the table counts every QP's iterations
      -s) size="${args[$((i + 1))]}" ;;
      -a) all=yes ;;
      -A) size=8 ;; # an atomic's 8 bytes
    esac
  done
  [[ -n $iters ]] || e2e_fail "perf_pair $label: give -n"
  iters=$((iters * qps))
  local first last rows server_rows
  case "$kind" in
    tables | client)
      if [[ $all == yes ]]; then
        first=2 last=8388608 rows=23 server_rows=0
      else
        [[ -n $size ]] || e2e_fail "perf_pair $label: give -s or -a"
        first="$size" last="$size" rows=1 server_rows=1
      fi
      ;;
    pingpong) size="${size:-4096}" ;;
    *) e2e_fail "perf_pair $label: unknown check '$kind'" ;;
  esac
  local sout="$E2E_TMP/$label.server.out" cout="$E2E_TMP/$label.client.out"
  local attempt why="" took=""
  # perftest's latency tools time with the TSC, whose rate they first
  # measure against the clock: on a busy machine that measurement can fail
  # ("Correlation coefficient r^2: ... < 0.9"), and the tool then prints
  # "inf" for every time. The run is the tool's failure, not the
  # transport's: it is run again, at most twice.
  for attempt in 1 2 3; do
    perf_pair_once "$@"
    [[ -n $why ]] || break
    grep -q 'Correlation coefficient r^2: .* < 0\.9' "$cout" "$sout" || break
    [[ $attempt -lt 3 ]] || break
    e2e_log "pair $label: perftest could not measure the TSC's rate (machine busy); again"
  done
  if [[ -n $why ]]; then
    sed 's/^/    server: /' "$sout" >&2
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "$why"
  fi
  # The client's results, for the log.
  if [[ $kind == pingpong ]]; then
    grep -E ' (bytes|iters) in ' "$cout" | sed 's/^/    /'
  else
    awk '/^[[:space:]]*#bytes/ { on = 1 } on && NF > 0 && !/^-/ { print "    " $0 }' "$cout"
  fi
  e2e_log "pair $label ok in $took s"
}

perf_pair write_bw tables ib_write_bw -s 65536 -n 200
perf_pair write_bw_all tables ib_write_bw -a -n 5
perf_pair read_bw tables ib_read_bw -s 65536 -n 200
perf_pair read_bw_all tables ib_read_bw -a -n 5
perf_pair read_bw_events tables ib_read_bw -e -s 65536 -n 200
perf_pair read_bw_events_all tables ib_read_bw -e -a -n 5
# Many queue pairs (a table row counts every queue pair's iterations), and
# 16 READs outstanding on each.
perf_pair write_bw_q64 tables ib_write_bw -q 64 -s 65536 -n 100
perf_pair read_bw_q64_outs16 tables ib_read_bw -q 64 -o 16 -s 65536 -n 100
perf_pair read_bw_outs16_events tables ib_read_bw -e -o 16 -s 65536 -n 200
perf_pair send_bw_q16 tables ib_send_bw -q 16 -s 65536 -n 100
perf_pair write_lat tables ib_write_lat -s 65536 -n 200
perf_pair write_lat_all tables ib_write_lat -a -n 5
perf_pair read_lat client ib_read_lat -s 65536 -n 200
perf_pair read_lat_all client ib_read_lat -a -n 5
perf_pair read_lat_events client ib_read_lat -e -s 65536 -n 200
# Loopback: both ends on daemon A.
PERF_CLIENT_SOCK="$sock_a" perf_pair write_bw_loopback tables ib_write_bw -s 65536 -n 200
PERF_CLIENT_SOCK="$sock_a" perf_pair read_lat_loopback client ib_read_lat -s 8 -n 200
# ibv_poll_cq's yield cadence (RDMAPLANE_VERBS_YIELD_AFTER): 0, never
# yielding, still completes; a value that is not a number is named on
# stderr, and the default kept.
RDMAPLANE_VERBS_YIELD_AFTER=0 perf_pair read_lat_never_yield client ib_read_lat -s 8 -n 200
RDMAPLANE_VERBS_YIELD_AFTER=often perf_pair read_lat_bad_yield client ib_read_lat -s 8 -n 200
expect_line "$E2E_TMP/read_lat_bad_yield.client.out" "RDMAPLANE_VERBS_YIELD_AFTER=often" \
  "RDMAPLANE_VERBS_YIELD_AFTER=often is not a number from 0 to 4294967295; yielding after every round of empty polls"

# ib_write_bw on hugepages: perftest's --use_hugepages puts its buffers on a
# SysV segment of 2 MiB hugepages (shmget with SHM_HUGETLB), which
# ibv_reg_mr moves like other memory (docs/verbs.md). HUGE_PAGES of them
# must be free; as root, reserve_hugepages reserves what is missing and
# registers restore_hugepages, which sets nr_hugepages back, as a cleanup
# hook (the EXIT trap runs it, whatever ends the test) before changing it.
HUGE_PAGES=64
HUGE_WHY=""
huge_before="" # nr_hugepages to set back; empty: nothing changed
restore_hugepages() {
  [[ -n $huge_before ]] || return 0
  if echo "$huge_before" >/proc/sys/vm/nr_hugepages; then
    e2e_log "nr_hugepages set back to $huge_before"
  else
    echo "$E2E_NAME: could not set nr_hugepages back to $huge_before" >&2
  fi
  huge_before=""
}
# Returns 1 with the reason in HUGE_WHY when HUGE_PAGES cannot be had.
reserve_hugepages() {
  local size total free
  size="$(awk '$1 == "Hugepagesize:" { print $2 $3 }' /proc/meminfo)"
  if [[ $(id -u) -ne 0 ]]; then
    HUGE_WHY="not root (reserving hugepages needs root)"
    return 1
  elif [[ $size != 2048kB ]]; then
    HUGE_WHY="the default hugepage size is ${size:-unknown}, not 2048kB"
    return 1
  elif [[ ! -w /proc/sys/vm/nr_hugepages ]]; then
    HUGE_WHY="/proc/sys/vm/nr_hugepages is not writable here"
    return 1
  fi
  total="$(cat /proc/sys/vm/nr_hugepages)"
  free="$(awk '$1 == "HugePages_Free:" { print $2 }' /proc/meminfo)"
  if ((free < HUGE_PAGES)); then
    huge_before="$total"
    E2E_CLEANUP_HOOKS+=(restore_hugepages)
    e2e_log "nr_hugepages $total ($free free): reserving $((HUGE_PAGES - free)) more"
    echo $((total + HUGE_PAGES - free)) >/proc/sys/vm/nr_hugepages || true
    free="$(awk '$1 == "HugePages_Free:" { print $2 }' /proc/meminfo)"
    if ((free < HUGE_PAGES)); then
      restore_hugepages
      HUGE_WHY="the kernel granted $free of $HUGE_PAGES free 2 MiB hugepages"
      return 1
    fi
  fi
  e2e_log "$free free 2 MiB hugepages"
  return 0
}
if reserve_hugepages; then
  perf_pair write_bw_hugepages tables ib_write_bw --use_hugepages -s 65536 -n 200
  restore_hugepages
else
  e2e_skip_round write_bw_hugepages "$HUGE_WHY"
fi

perf_pair rc_pingpong pingpong ibv_rc_pingpong -g 0 -c -s 65536 -n 200
perf_pair rc_pingpong_events pingpong ibv_rc_pingpong -g 0 -c -e -s 65536 -n 200
PERF_CLIENT_SOCK="$sock_a" perf_pair rc_pingpong_loopback pingpong ibv_rc_pingpong -g 0 -c -s 65536 -n 200
perf_pair uc_pingpong pingpong ibv_uc_pingpong -g 0 -c -s 4096 -n 200
perf_pair uc_pingpong_events pingpong ibv_uc_pingpong -g 0 -c -e -s 4096 -n 200
PERF_CLIENT_SOCK="$sock_a" perf_pair uc_pingpong_loopback pingpong ibv_uc_pingpong -g 0 -c -s 4096 -n 200
perf_pair write_bw_uc tables ib_write_bw -c UC -s 65536 -n 200
perf_pair send_lat_uc tables ib_send_lat -c UC -s 4096 -n 200
perf_pair send_lat_uc_events tables ib_send_lat -c UC -e -s 4096 -n 200
perf_pair send_bw_uc tables ib_send_bw -c UC -s 4096 -n 200
perf_pair send_bw_uc_events tables ib_send_bw -c UC -e -s 4096 -n 200
perf_pair srq_pingpong pingpong ibv_srq_pingpong -g 0 -c -s 4096 -n 200
perf_pair srq_pingpong_events pingpong ibv_srq_pingpong -g 0 -c -e -s 4096 -n 200
PERF_CLIENT_SOCK="$sock_a" perf_pair srq_pingpong_loopback pingpong ibv_srq_pingpong -g 0 -c -s 4096 -n 200
perf_pair ud_pingpong pingpong ibv_ud_pingpong -g 0 -c -s 2048 -n 200
perf_pair ud_pingpong_events pingpong ibv_ud_pingpong -g 0 -c -e -s 2048 -n 200
PERF_CLIENT_SOCK="$sock_a" perf_pair ud_pingpong_loopback pingpong ibv_ud_pingpong -g 0 -c -s 2048 -n 200
perf_pair send_lat_ud tables ib_send_lat -c UD -s 2048 -n 200
perf_pair send_lat_ud_events tables ib_send_lat -c UD -e -s 2048 -n 200
perf_pair send_bw_ud tables ib_send_bw -c UD -s 2048 -n 200
perf_pair send_bw_ud_events tables ib_send_bw -c UD -e -s 2048 -n 200
# For UD, perftest asks a receive queue as deep as the iterations (up to
# 16000): a queue pair of 16384 receives (one of a session's deep slots).
perf_pair send_lat_ud_deep tables ib_send_lat -c UD -s 64 -n 16000

perf_pair send_bw tables ib_send_bw -s 65536 -n 200
perf_pair send_bw_all tables ib_send_bw -a -n 5
perf_pair send_bw_events tables ib_send_bw -e -s 65536 -n 200
perf_pair send_bw_events_all tables ib_send_bw -e -a -n 5
perf_pair send_lat tables ib_send_lat -s 65536 -n 200
perf_pair send_lat_all tables ib_send_lat -a -n 5
perf_pair send_lat_events tables ib_send_lat -e -s 65536 -n 200
perf_pair send_lat_events_all tables ib_send_lat -e -a -n 5

# Atomics: the server's memory is the target of the client's COMPARE AND
# SWAPs or FETCH AND ADDs.
perf_pair atomic_bw_cas tables ib_atomic_bw -A CMP_AND_SWAP -n 1000
perf_pair atomic_bw_faa tables ib_atomic_bw -A FETCH_AND_ADD -n 1000
perf_pair atomic_lat_cas client ib_atomic_lat -A CMP_AND_SWAP -n 1000
perf_pair atomic_lat_faa client ib_atomic_lat -A FETCH_AND_ADD -n 1000
perf_pair atomic_bw_faa_events tables ib_atomic_bw -A FETCH_AND_ADD -e -n 1000
perf_pair atomic_lat_cas_events client ib_atomic_lat -A CMP_AND_SWAP -e -n 1000

# --- 4. Without a data port -----------------------------------------------------

# The daemon is a network of its own: its queue pairs reach each other at
# 127.0.0.1 over the engine's link to itself.
sock_c="$E2E_TMP/c.sock"
e2e_start_daemon c "$sock_c" "rdp-verbs-$$-c" "$daemon_bin" \
  --socket="$sock_c" --log_level=debug ||
  e2e_fail "daemon c (no data port) did not start"
check_devinfo c "$sock_c" rdmaplane0 127.0.0.1
noport() {
  PERF_SERVER_SOCK="$sock_c" PERF_CLIENT_SOCK="$sock_c" perf_pair "$@"
}
noport rc_pingpong_noport pingpong ibv_rc_pingpong -g 0 -c -s 65536 -n 200
noport uc_pingpong_noport pingpong ibv_uc_pingpong -g 0 -c -s 4096 -n 200
noport ud_pingpong_noport pingpong ibv_ud_pingpong -g 0 -c -s 2048 -n 200
noport srq_pingpong_noport pingpong ibv_srq_pingpong -g 0 -c -s 4096 -n 200
noport write_bw_noport tables ib_write_bw -s 65536 -n 200
noport read_lat_noport client ib_read_lat -s 8 -n 200
noport send_lat_ud_noport tables ib_send_lat -c UD -s 2048 -n 200
noport atomic_lat_faa_noport client ib_atomic_lat -A FETCH_AND_ADD -n 1000

# --- 5. Clean stops -----------------------------------------------------------

e2e_check_clean_stop c
e2e_check_clean_stop b
e2e_check_clean_stop a
e2e_log "ok in $(e2e_since "$test_start") s"
e2e_finish
