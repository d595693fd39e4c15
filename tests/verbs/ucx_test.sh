#!/usr/bin/env bash
# Debian's UCX, unmodified, over librdmaplane-verbs.so (LD_PRELOAD): its
# verbs transports rc_verbs and ud_verbs on rdmaplane0, between two
# rdmaplaned daemons joined by memif (A, 10.9.0.1, and B, 10.9.0.2) and
# with both ends on daemon A.
#   1. ucx_info -d lists the memory domain rdmaplane0 with the transports
#      rc_verbs and ud_verbs on device rdmaplane0:1 (UCX takes the device
#      only when /dev/infiniband/uverbs0 looks like a character device it
#      may open: the front end answers stat and access for it).
#   2. ucx_perftest's UCP tests tag_lat (8 B), tag_bw, ucp_put_bw and
#      ucp_get (64 KiB), a server with its session on A and its client on B
#      (the out-of-band TCP connection over this host's loopback), then both
#      on A: with UCX_TLS=rc_verbs (and ud_verbs as UCX's auxiliary
#      transport for the connection's wire-up, which rc_verbs needs) and
#      with UCX_TLS=ud_verbs. Both ends exit 0, the client prints its
#      "Final:" row, and UCX's log says the endpoint runs the operation
#      over that transport on rdmaplane0:1.
#   3. The daemons stop cleanly.
#
#   ucx_test.sh E2E_LIB TCP_PORTS_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO
#
# ucx-utils is Debian's (deploy/setup.sh installs it).
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 E2E_LIB TCP_PORTS_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO" >&2
  exit 2
fi
E2E_NAME=verbs_ucx_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
# shellcheck source=tests/testing/tcp_ports.sh
source "$2"
daemon_bin="$3"
[[ -x $daemon_bin ]] || e2e_fail "no executable at $daemon_bin"
[[ -f $4 ]] || e2e_fail "no file at $4"
verbs_so="$(realpath "$4")"
for tool in ucx_info ucx_perftest ibv_devinfo; do
  command -v "$tool" >/dev/null ||
    e2e_fail "$tool is not installed (deploy/setup.sh installs ucx-utils and ibverbs-utils)"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

e2e_start_memif_pair "$daemon_bin" ucx
sock_a="$E2E_SOCK_A" sock_b="$E2E_SOCK_B"
e2e_wait_port_active a "$sock_a" "$verbs_so"
e2e_wait_port_active b "$sock_b" "$verbs_so"

# ucx SOCKET TLS LIMIT_S OUT COMMAND...: COMMAND under the verbs front end
# with RDMAPLANE_SOCKET=SOCKET and UCX on rdmaplane0 with UCX_TLS=TLS,
# bounded by LIMIT_S, its output in the file OUT. UCX's own shared memory
# and TCP transports stay out (UCX_TLS), and its log says which transport
# each endpoint uses (info).
ucx() {
  local sock="$1" tls="$2" limit="$3" out="$4"
  shift 4
  timeout --kill-after=5 "$limit" env RDMAPLANE_SOCKET="$sock" \
    LD_PRELOAD="$verbs_so" RDMAPLANE_VERBS_DEBUG=1 UCX_TLS="$tls" \
    UCX_NET_DEVICES=rdmaplane0:1 UCX_LOG_LEVEL=info "$@" >"$out" 2>&1
}

# --- 1. ucx_info -d ----------------------------------------------------------

out="$E2E_TMP/ucx_info.out"
status=0
ucx "$sock_a" all 30 "$out" ucx_info -d || status=$?
[[ $status -eq 0 ]] || {
  sed 's/^/    /' "$out" >&2
  e2e_fail "ucx_info -d exited with status $status"
}
# The rdmaplane0 memory domain's transports, as "transport device" lines.
listed="$(awk '/^# Memory domain:/ { md = $4 }
  md == "rdmaplane0" && /^#[[:space:]]+Transport:/ { tl = $3 }
  md == "rdmaplane0" && /^#[[:space:]]+Device:/ { print tl, $3 }' "$out")"
sed -n '/^# Memory domain: rdmaplane0/,/^# Memory domain: [^r]/p' "$out" |
  grep -E 'Memory domain|Transport|Device' | sed 's/^/    /'
for want in "rc_verbs rdmaplane0:1" "ud_verbs rdmaplane0:1"; do
  grep -qxF -- "$want" <<<"$listed" || {
    sed 's/^/    /' "$out" >&2
    e2e_fail "ucx_info -d does not list '$want' in memory domain rdmaplane0 (it lists: ${listed:-nothing})"
  }
done
e2e_log "ucx_info -d: memory domain rdmaplane0 with rc_verbs and ud_verbs on rdmaplane0:1"

# --- 2. ucx_perftest -----------------------------------------------------------

# perf LABEL SERVER_SOCK CLIENT_SOCK TLS TRANSPORT TEST ARGS...: a
# ucx_perftest server and client of TEST; both must exit 0, the client must
# print its final row, and its log must show an endpoint using TRANSPORT on
# rdmaplane0:1.
perf() {
  local label="$1" server_sock="$2" client_sock="$3" tls="$4" transport="$5"
  shift 5
  local port sout="$E2E_TMP/$label.server.out" cout="$E2E_TMP/$label.client.out"
  port="$(free_tcp_port)"
  e2e_log "pair $label: UCX_TLS=$tls ucx_perftest -t $* (port $port)"
  local start
  start="$(e2e_now)"
  # timeout itself in the background, so that the cleanup's SIGTERM
  # reaches it.
  timeout --kill-after=5 60 env RDMAPLANE_SOCKET="$server_sock" \
    LD_PRELOAD="$verbs_so" RDMAPLANE_VERBS_DEBUG=1 UCX_TLS="$tls" \
    UCX_NET_DEVICES=rdmaplane0:1 ucx_perftest -p "$port" >"$sout" 2>&1 &
  local server=$!
  E2E_HELPER_PIDS+=("$server")
  if ! wait_listening "$port" "$server"; then
    sed 's/^/    server: /' "$sout" >&2
    e2e_fail "pair $label: the server did not listen on port $port within 10 s"
  fi
  local cstatus=0 sstatus=0
  ucx "$client_sock" "$tls" 60 "$cout" ucx_perftest 127.0.0.1 -p "$port" \
    -t "$@" || cstatus=$?
  wait "$server" || sstatus=$?
  if [[ $cstatus -ne 0 || $sstatus -ne 0 ]]; then
    sed 's/^/    server: /' "$sout" >&2
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "pair $label: client exit status $cstatus, server exit status $sstatus (124/137: timed out)"
  fi
  local final
  final="$(grep -E '^Final:' "$cout" || true)"
  if [[ -z $final ]]; then
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "pair $label: the client printed no 'Final:' row"
  fi
  if ! grep -qE "ep_cfg\[[0-9]+\]: .*\\(${transport}/rdmaplane0:1\\)" "$cout"; then
    sed 's/^/    client: /' "$cout" >&2
    e2e_fail "pair $label: no endpoint of the client runs over $transport on rdmaplane0:1"
  fi
  grep -m1 -E '^\|[[:space:]]+Stage' "$cout" | sed 's/^/    /'
  printf '    %s\n' "$final"
  e2e_log "pair $label ok in $(e2e_since "$start") s"
}

# rc_verbs wires its connections up over an auxiliary transport: ud_verbs,
# taken for that alone.
rc_tls="rc_verbs,ud_verbs:aux"
placements=("two_daemons $sock_a $sock_b" "one_daemon $sock_a $sock_a")
for placement in "${placements[@]}"; do
  read -r where server_sock client_sock <<<"$placement"
  for transport in rc_verbs ud_verbs; do
    tls="$rc_tls"
    [[ $transport == ud_verbs ]] && tls=ud_verbs
    perf "tag_lat_${transport}_$where" "$server_sock" "$client_sock" "$tls" \
      "$transport" tag_lat -s 8 -n 2000
    perf "tag_bw_${transport}_$where" "$server_sock" "$client_sock" "$tls" \
      "$transport" tag_bw -s 65536 -n 500
    perf "ucp_put_bw_${transport}_$where" "$server_sock" "$client_sock" "$tls" \
      "$transport" ucp_put_bw -s 65536 -n 500
    perf "ucp_get_${transport}_$where" "$server_sock" "$client_sock" "$tls" \
      "$transport" ucp_get -s 65536 -n 200
  done
done

# --- 3. Clean stops -----------------------------------------------------------

e2e_check_clean_stop b
e2e_check_clean_stop a
e2e_log "ok in $(e2e_since "$test_start") s"
e2e_finish
