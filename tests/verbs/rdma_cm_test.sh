#!/usr/bin/env bash
# Debian's rdma_cm programs, unmodified, over librdmaplane-verbs.so
# (LD_PRELOAD), which serves the kernel's rdma_cm device beneath the
# system's own librdmacm: between two rdmaplaned daemons joined by memif
# (A, 10.9.0.1, and B, 10.9.0.2; the IBTA IP CM on the link) and with
# both ends on daemon A.
#   1. rping -v -C 10: the client on B prints its 10 pings, the server on A
#      (bound to 0.0.0.0, so listening on every device) the same 10; both
#      exit 0. Then both on A.
#   2. ucmatose -c 4 -C 20 (four RC connections), with -P ib (RDMA_PS_IB)
#      and with -m (its ids moved to a new event channel once connected,
#      rdma_migrate_id), udaddy -c 2 -C 10 (UD,
#      through SIDR), cmtime -c 20 and rdma_server/rdma_client (which
#      register static arrays, and connect with rdma_create_ep): both ends
#      print "return status 0" (cmtime: its table of steps; rdma_server and
#      rdma_client: "end 0") and exit 0.
#   3. rsockets: rstream and riostream, 100 transfers each way; both ends
#      print their table row and exit 0. rcopy copies a file of 3 MB of
#      random bytes, which arrives the same.
#   4. perftest over rdma_cm (-R): ib_write_bw -s 65536 and ib_send_lat;
#      both print their table.
#   5. UCX's connection manager through rdma_cm: ucp_sockaddr.c (built
#      here with cc against Debian's libucx-dev) connects by socket address
#      (ucp_listener_create, ucp_ep_create with UCP_EP_PARAM_FIELD_SOCK_ADDR)
#      with UCX_SOCKADDR_TLS_PRIORITY=rdmacm and rc_verbs, and checks every
#      byte of 20 rounds of 64 KiB each way; across the daemons and on one.
#   6. cm_probe.c (built here with cc against Debian's librdmacm-dev):
#      rdma_migrate_id, private data at and past each message's room
#      (EINVAL past it), RDMA_PS_IB beside RDMA_PS_TCP on one port number,
#      the rdma_verbs.h helpers, and a peer that goes away in the middle
#      of the handshake on either side (REJECTED, reason 28).
#   6b. Several devices in one process: cm_probe's anyserver, with daemons A
#      and B as its devices, listens on 0.0.0.0, and each of five clients'
#      requests arrives on the device whose address it aimed at; the
#      clients' rdma_resolve_addr picks the device that reaches the
#      destination (past daemon C, which has no data port), the one an id
#      was bound to, or the process's own device of that address.
#   7. What bad addresses get: no listener on the port, REJECTED with
#      reason 8 (invalid service id), at once; an address no daemon answers
#      for, ADDR_ERROR with -110 (ETIMEDOUT) within rping's 2 s timeout.
#   8. The daemons stop cleanly.
#
#   rdma_cm_test.sh E2E_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO UCP_SOCKADDR_C \
#     CM_PROBE_C RDMAPLANECTL
#
# Each client starts once its server listens: the server's daemon counts
# one more rdma_cm listener (its ip_cm_listeners gauge).
#
# rdmacm-utils, perftest, librdmacm-dev and libucx-dev are Debian's (deploy/setup.sh
# installs them).
set -euo pipefail

if [[ $# -ne 6 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO UCP_SOCKADDR_C CM_PROBE_C RDMAPLANECTL" >&2
  exit 2
fi
E2E_NAME=verbs_rdma_cm_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
[[ -x $daemon_bin ]] || e2e_fail "no executable at $daemon_bin"
[[ -f $3 ]] || e2e_fail "no file at $3"
verbs_so="$(realpath "$3")"
ucp_source="$4"
[[ -f $ucp_source ]] || e2e_fail "no file at $ucp_source"
probe_source="$5"
[[ -f $probe_source ]] || e2e_fail "no file at $probe_source"
E2E_CTL="$6"
[[ -x $E2E_CTL ]] || e2e_fail "no executable at $E2E_CTL"
for tool in rping ucmatose udaddy cmtime rdma_server rdma_client rstream \
  riostream ib_write_bw ib_send_lat; do
  command -v "$tool" >/dev/null ||
    e2e_fail "$tool is not installed (deploy/setup.sh installs rdmacm-utils and perftest)"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

e2e_start_memif_pair "$daemon_bin" rdmacm
sock_a="$E2E_SOCK_A" sock_b="$E2E_SOCK_B" ip_a="$E2E_IP_A"
e2e_wait_port_active a "$sock_a" "$verbs_so"
e2e_wait_port_active b "$sock_b" "$verbs_so"

# on SOCKET LIMIT_S OUT COMMAND...: COMMAND under the verbs front end with
# RDMAPLANE_SOCKET=SOCKET, bounded by LIMIT_S, its output in OUT.
on() {
  local sock="$1" limit="$2" out="$3"
  shift 3
  timeout --kill-after=5 "$limit" env RDMAPLANE_SOCKET="$sock" \
    LD_PRELOAD="$verbs_so" "$@" >"$out" 2>&1
}

# listeners NAME: sets E2E_VALUE to the rdma_cm listeners daemon NAME holds
# (its ip_cm_listeners gauge).
listeners() {
  e2e_counters "$1" >/dev/null
  e2e_counter "$1" ip_cm_listeners
}

# await_listener NAME BEFORE PID LABEL [COUNT]: until daemon NAME holds
# COUNT (1) listeners more than BEFORE (the server of PID called
# rdma_listen), at most 300 looks 0.1 s apart; fails when the server ends
# first or never listens.
await_listener() {
  local name="$1" before="$2" pid="$3" label="$4" count="${5:-1}" i
  for ((i = 0; i < 300; i++)); do
    listeners "$name"
    [[ $E2E_VALUE -ge $((before + count)) ]] && return 0
    kill -0 "$pid" 2>/dev/null || e2e_fail "$label: the server ended before it listened"
    sleep 0.1
  done
  e2e_fail "$label: the server did not listen within 30 s"
}

# pair LABEL SERVER_DAEMON SERVER_SOCK CLIENT_SOCK "SERVER COMMAND"
#      "CLIENT COMMAND" SERVER_ERE CLIENT_ERE [stays]: the server in the
# background, then, once the daemon SERVER_DAEMON (a or b) holds its
# listener, the client; both must exit 0 and print a line matching their
# ERE (an empty one asks for nothing). A server that `stays` serves until
# it is stopped (cmtime's): it must still be running once the client is
# done, and is then stopped. Sets PAIR_SOUT and PAIR_COUT to their outputs.
pair() {
  local label="$1" server_daemon="$2" server_sock="$3" client_sock="$4"
  local server_cmd="$5" client_cmd="$6" server_ere="$7" client_ere="$8"
  local stays="${9:-}"
  local sout="$E2E_TMP/$label.server.out" cout="$E2E_TMP/$label.client.out"
  PAIR_SOUT="$sout" PAIR_COUT="$cout"
  e2e_log "pair $label: $server_cmd | $client_cmd"
  local start before
  start="$(e2e_now)"
  listeners "$server_daemon"
  before="$E2E_VALUE"
  # shellcheck disable=SC2086 # the commands are words on purpose
  timeout --kill-after=5 60 env RDMAPLANE_SOCKET="$server_sock" \
    LD_PRELOAD="$verbs_so" $server_cmd >"$sout" 2>&1 &
  local server=$!
  E2E_HELPER_PIDS+=("$server")
  await_listener "$server_daemon" "$before" "$server" "pair $label"
  local cstatus=0 sstatus=0
  # shellcheck disable=SC2086
  on "$client_sock" 60 "$cout" $client_cmd || cstatus=$?
  if [[ -n $stays ]]; then
    if ! kill -0 "$server" 2>/dev/null; then
      sstatus=0
      wait "$server" || sstatus=$?
      sed 's/^/    server: /' "$sout" >&2
      e2e_fail "pair $label: the server, which serves until stopped, ended with status $sstatus"
    fi
    kill -TERM "$server"
    wait "$server" || true
  else
    wait "$server" || sstatus=$?
  fi
  if [[ $cstatus -ne 0 || $sstatus -ne 0 ]]; then
    sed 's/^/    server: /' "$sout" >&2
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "pair $label: client exit status $cstatus, server exit status $sstatus (124/137: timed out)"
  fi
  [[ -z $server_ere ]] || grep -qE "$server_ere" "$sout" || {
    sed 's/^/    server: /' "$sout" >&2
    e2e_fail "pair $label: the server printed no line matching '$server_ere'"
  }
  grep -qE "$client_ere" "$cout" || {
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "pair $label: the client printed no line matching '$client_ere'"
  }
  e2e_log "pair $label ok in $(e2e_since "$start") s"
}

# count_lines FILE ERE WANT LABEL: FILE has exactly WANT lines matching ERE.
count_lines() {
  local n
  n="$(grep -cE "$2" "$1" || true)"
  [[ $n -eq $3 ]] || {
    sed 's/^/    /' "$1" >&2
    e2e_fail "$4: $n lines match '$2', not $3"
  }
}

# --- 1. rping ----------------------------------------------------------------

placements=("two_daemons $sock_a $sock_b" "one_daemon $sock_a $sock_a")
for placement in "${placements[@]}"; do
  read -r where server_sock client_sock <<<"$placement"
  pair "rping_$where" a "$server_sock" "$client_sock" \
    "rping -s -a 0.0.0.0 -p 7174 -C 10 -v" \
    "rping -c -a $ip_a -p 7174 -C 10 -v" \
    '^server ping data: rdma-ping-9: ' '^ping data: rdma-ping-9: '
  count_lines "$PAIR_COUT" '^ping data: rdma-ping-[0-9]+: [A-Za-z]' 10 \
    "rping_$where client"
  count_lines "$PAIR_SOUT" 'ping data: rdma-ping-[0-9]+: [A-Za-z]' 10 \
    "rping_$where server"
done

# --- 2. ucmatose, udaddy, cmtime ----------------------------------------------

pair ucmatose a "$sock_a" "$sock_b" "ucmatose -c 4 -C 20" \
  "ucmatose -s $ip_a -c 4 -C 20" '^return status 0' '^return status 0'
# RDMA_PS_IB, and ids moved to a new event channel once connected
# (rdma_migrate_id), then disconnected through it.
pair ucmatose_ps_ib a "$sock_a" "$sock_b" "ucmatose -P ib -c 2 -C 10" \
  "ucmatose -P ib -s $ip_a -c 2 -C 10" '^return status 0' '^return status 0'
pair ucmatose_migrate a "$sock_a" "$sock_b" "ucmatose -m -c 2 -C 10" \
  "ucmatose -m -s $ip_a -c 2 -C 10" '^migrating to new event channel' \
  '^migrating to new event channel'
grep -q '^return status 0' "$PAIR_SOUT" && grep -q '^return status 0' "$PAIR_COUT" ||
  e2e_fail "ucmatose -m: a side did not end with return status 0"
pair udaddy a "$sock_a" "$sock_b" "udaddy -c 2 -C 10" \
  "udaddy -s $ip_a -c 2 -C 10" '^return status 0' '^return status 0'
# (cmtime's server serves until stopped, printing nothing.)
pair cmtime a "$sock_a" "$sock_b" "cmtime -b $ip_a -c 20" \
  "cmtime -s $ip_a -c 20" '' '^connect +:' stays

# (rdma_server and rdma_client take no port: theirs is 7471, as each run's.)
pair rdma_server a "$sock_a" "$sock_b" "rdma_server -s $ip_a" \
  "rdma_client -s $ip_a" 'rdma_server: end 0' 'rdma_client: end 0'

# --- 3. rsockets ---------------------------------------------------------------

pair rstream a "$sock_a" "$sock_b" "rstream -S 65536 -C 100 -b $ip_a" \
  "rstream -S 65536 -C 100 -s $ip_a" '^custom +64k +100 ' '^custom +64k +100 '
pair riostream a "$sock_a" "$sock_b" "riostream -S 4096 -C 100 -b $ip_a" \
  "riostream -S 4096 -C 100 -s $ip_a" '^custom +4k +100 ' '^custom +4k +100 '

# rcopy: a 3 MB file of random bytes through rsockets; its server serves
# until stopped.
head -c 3000000 /dev/urandom >"$E2E_TMP/rcopy.src"
pair rcopy a "$sock_a" "$sock_b" "rcopy -p 7480" \
  "rcopy $E2E_TMP/rcopy.src $ip_a:$E2E_TMP/rcopy.dst -p 7480" '' \
  '^3000000 bytes in ' stays
cmp "$E2E_TMP/rcopy.src" "$E2E_TMP/rcopy.dst" ||
  e2e_fail "rcopy: the file that arrived differs from the one sent"

# --- 4. perftest over rdma_cm ----------------------------------------------------

row='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
pair write_bw_R a "$sock_a" "$sock_b" "ib_write_bw -R -d rdmaplane0 -s 65536 -n 200" \
  "ib_write_bw -R -d rdmaplane0 -s 65536 -n 200 $ip_a" "$row" "$row"
pair send_lat_R a "$sock_a" "$sock_b" "ib_send_lat -R -d rdmaplane0 -n 200" \
  "ib_send_lat -R -d rdmaplane0 -n 200 $ip_a" "$row" "$row"

# --- 5. UCX's connection manager over rdma_cm ---------------------------------------

ucp_bin="$E2E_TMP/ucp_sockaddr"
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -O1 -Wall -Werror -o "$ucp_bin" "$ucp_source" $(pkg-config --cflags --libs ucx) ||
  e2e_fail "cannot build ucp_sockaddr.c (deploy/setup.sh installs libucx-dev)"
ucx_env=(UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=rdmaplane0:1
  UCX_SOCKADDR_TLS_PRIORITY=rdmacm)
port=13400
for placement in "${placements[@]}"; do
  read -r where server_sock client_sock <<<"$placement"
  label="ucp_sockaddr_$where"
  sout="$E2E_TMP/$label.server.out" cout="$E2E_TMP/$label.client.out"
  port=$((port + 1))
  listeners a
  before="$E2E_VALUE"
  timeout --kill-after=5 60 env RDMAPLANE_SOCKET="$server_sock" \
    LD_PRELOAD="$verbs_so" "${ucx_env[@]}" "$ucp_bin" server "$port" >"$sout" 2>&1 &
  server=$!
  E2E_HELPER_PIDS+=("$server")
  await_listener a "$before" "$server" "$label"
  cstatus=0 sstatus=0
  on "$client_sock" 60 "$cout" env "${ucx_env[@]}" UCX_LOG_LEVEL=info \
    "$ucp_bin" client "$ip_a" "$port" || cstatus=$?
  wait "$server" || sstatus=$?
  if [[ $cstatus -ne 0 || $sstatus -ne 0 ]] ||
    ! grep -q '^ucp_sockaddr: ok' "$sout" || ! grep -q '^ucp_sockaddr: ok' "$cout"; then
    sed 's/^/    server: /' "$sout" >&2
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "$label: client exit status $cstatus, server exit status $sstatus"
  fi
  # The endpoint was made through the connection manager, and runs its
  # tags over rc_verbs on rdmaplane0.
  grep -qE 'tag\(rc_verbs/rdmaplane0:1\)' "$cout" || {
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "$label: no endpoint of the client runs its tags over rc_verbs"
  }
  e2e_log "$label: $(grep '^ucp_sockaddr: ok' "$cout")"
done

# --- 6. What the man pages promise: cm_probe.c ----------------------------------

probe_bin="$E2E_TMP/cm_probe"
cc -O1 -Wall -Werror -o "$probe_bin" "$probe_source" -lrdmacm -libverbs ||
  e2e_fail "cannot build cm_probe.c (deploy/setup.sh installs librdmacm-dev)"

# probe LABEL SERVER_ROLE CLIENT_ROLE PORT SERVER_ERE CLIENT_ERE: the server
# role on daemon A until it listens, then the client role on B; both must
# exit 0 and print a line matching their ERE.
probe() {
  local label="$1" srole="$2" crole="$3" port="$4" sere="$5" cere="$6"
  local sout="$E2E_TMP/probe_$label.server.out" cout="$E2E_TMP/probe_$label.client.out"
  local server cstatus=0 sstatus=0 before
  listeners a
  before="$E2E_VALUE"
  timeout --kill-after=5 60 env RDMAPLANE_SOCKET="$sock_a" \
    LD_PRELOAD="$verbs_so" "$probe_bin" "$srole" "$ip_a" "$port" >"$sout" 2>&1 &
  server=$!
  E2E_HELPER_PIDS+=("$server")
  # (The semantics server listens on two port spaces.)
  await_listener a "$before" "$server" "probe $label" \
    "$([[ $srole == server ]] && echo 2 || echo 1)"
  on "$sock_b" 60 "$cout" "$probe_bin" "$crole" "$ip_a" "$port" || cstatus=$?
  wait "$server" || sstatus=$?
  if [[ $cstatus -ne 0 || $sstatus -ne 0 ]] || ! grep -qE "$sere" "$sout" ||
    ! grep -qE "$cere" "$cout"; then
    sed 's/^/    server: /' "$sout" >&2
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "probe $label: client exit status $cstatus, server exit status $sstatus, or a line missing ('$sere' / '$cere')"
  fi
  e2e_log "probe $label: $(grep -v '^cm_probe: ok' "$cout" | tr '\n' ' ')"
}

# rdma_migrate_id; private data at and past each message's room; RDMA_PS_IB
# beside RDMA_PS_TCP on one port number; rdma_verbs.h's helpers.
probe semantics server client 7400 '^cm_probe: ok' '^cm_probe: ok'
# A peer that goes away in the middle of the handshake: REJECTED with
# reason 28 (consumer defined), as Linux's CM sends when an id that has a
# request or a reply unanswered is destroyed.
probe server_vanishes vanish lost 7401 '^cm_probe: vanishing' \
  '^cm_probe: REJECTED, status 28$'
probe client_leaves gone leave 7402 '^cm_probe: REJECTED, status 28$' \
  '^cm_probe: leaving'

# --- 6b. Several devices in one process ------------------------------------------
#
# A server whose process has both daemons as devices (rdmaplane0 = A,
# rdmaplane1 = B) listens on 0.0.0.0: each request arrives on the device
# whose address the client aimed at. The clients pick their device as
# rdma_resolve_addr(3) has it: a process whose only other device is daemon
# C, which has no data port (it reaches only its own address), reaches B's
# address through A; an id bound to B's address goes out through B; an
# unbound id aimed at one of the process's own devices takes that device.

sock_c="$E2E_TMP/c.sock"
e2e_start_daemon c "$sock_c" "rdp-rdmacm-$$-c" "$daemon_bin" \
  --socket="$sock_c" --file_prefix="rdp-rdmacm-$$-c" ||
  e2e_fail "daemon c (no data port) did not start"
ip_b="$E2E_IP_B"
listeners a
before_a="$E2E_VALUE"
listeners b
before_b="$E2E_VALUE"
any_out="$E2E_TMP/anyserver.out"
timeout --kill-after=5 120 env RDMAPLANE_SOCKET="$sock_a:$sock_b" \
  LD_PRELOAD="$verbs_so" "$probe_bin" anyserver 0.0.0.0 7403 5 >"$any_out" 2>&1 &
any_server=$!
E2E_HELPER_PIDS+=("$any_server")
await_listener a "$before_a" "$any_server" "anyserver on A"
await_listener b "$before_b" "$any_server" "anyserver on B"
# reach LABEL SOCKETS WANT ARGS...: cm_probe reach ARGS with
# RDMAPLANE_SOCKET=SOCKETS must print WANT (its "resolved" line) and ok.
reach() {
  local label="$1" socks="$2" want="$3" out="$E2E_TMP/reach_$1.out" status=0
  shift 3
  on "$socks" 60 "$out" "$probe_bin" reach "$@" || status=$?
  if [[ $status -ne 0 ]] || ! grep -qxF "cm_probe: $want" "$out" ||
    ! grep -qx 'cm_probe: ok' "$out"; then
    sed 's/^/    client: /' "$out" >&2
    sed 's/^/    server: /' "$any_out" >&2
    e2e_fail "reach $label: exit status $status, or no line '$want'"
  fi
  e2e_log "reach $label: $want"
}
reach b_to_a "$sock_b" "resolved $ip_a on rdmaplane0 from $ip_b" "$ip_a" 7403
reach a_to_b "$sock_a" "resolved $ip_b on rdmaplane0 from $ip_a" "$ip_b" 7403
reach past_c "$sock_c:$sock_a" "resolved $ip_b on rdmaplane1 from $ip_a" \
  "$ip_b" 7403
reach bound_b "$sock_a:$sock_b" "resolved $ip_a on rdmaplane1 from $ip_b" \
  "$ip_a" 7403 "$ip_b"
reach own_b "$sock_a:$sock_b" "resolved $ip_b on rdmaplane1 from $ip_b" \
  "$ip_b" 7403
any_status=0
wait "$any_server" || any_status=$?
want_lines=("request for $ip_a on rdmaplane0" "request for $ip_b on rdmaplane1"
  "request for $ip_b on rdmaplane1" "request for $ip_a on rdmaplane0"
  "request for $ip_b on rdmaplane1" "ok")
mapfile -t got_lines < <(sed -n 's/^cm_probe: //p' "$any_out" | grep -v '^listening$')
if [[ $any_status -ne 0 || "${got_lines[*]}" != "${want_lines[*]}" ]]; then
  sed 's/^/    server: /' "$any_out" >&2
  e2e_fail "anyserver: exit status $any_status; its requests were not, in order: ${want_lines[*]}"
fi
e2e_log "0.0.0.0 on two devices: 5 requests, each on the device aimed at"
e2e_check_clean_stop c

# --- 7. Bad addresses --------------------------------------------------------------

out="$E2E_TMP/no_listener.out"
status=0
on "$sock_b" 30 "$out" rping -c -a "$ip_a" -p 7999 -C 1 -v || status=$?
[[ $status -ne 0 ]] || e2e_fail "rping to a port nobody listens on succeeded"
grep -qE 'RDMA_CM_EVENT_REJECTED, error 8' "$out" || {
  sed 's/^/    /' "$out" >&2
  e2e_fail "rping to a port nobody listens on was not REJECTED with reason 8"
}
e2e_log "no listener: REJECTED, reason 8 (invalid service id)"

out="$E2E_TMP/unreachable.out"
status=0
start="$(e2e_now)"
on "$sock_b" 30 "$out" rping -c -a 10.9.0.99 -p 7174 -C 1 -v || status=$?
[[ $status -ne 0 ]] || e2e_fail "rping to an address nobody serves succeeded"
grep -qE 'RDMA_CM_EVENT_ADDR_ERROR, error -110' "$out" || {
  sed 's/^/    /' "$out" >&2
  e2e_fail "rping to an address nobody serves got no ADDR_ERROR -110 (ETIMEDOUT)"
}
e2e_log "address nobody serves: ADDR_ERROR -110 after $(e2e_since "$start") s"

# --- 8. Clean stops ---------------------------------------------------------------

e2e_check_clean_stop b
e2e_check_clean_stop a
e2e_log "ok in $(e2e_since "$test_start") s"
e2e_finish
