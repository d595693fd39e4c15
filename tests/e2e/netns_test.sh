#!/usr/bin/env bash
# Two rdmaplaned daemons in two network namespaces joined by a veth pair,
# each using its end of the pair as its DPDK data port (root only):
#   1. af_packet on veths of MTU 9000, where the daemons' default path MTU
#      is 4096: RDMA WRITE and READ of 1 B .. 4 MiB each way
#      (depth 4, 2 clients with 3 connections each), every byte checked;
#      no frame lost at a receiving port (port_rx_dropped: the kernel's
#      drops at af_packet's receive ring); the two-host
#      procedure of docs/operations.md (rdmaplane_transfer's split mode, the
#      server on A, the client on B, both checking every byte); a connect to
#      a service nobody listens on is refused, one to an address nobody has
#      times out within 5 s; SIGTERM stops both with status 0 within 5 s,
#      leaving no socket and no DPDK runtime folder;
#   2. the same transfer up to 1 MiB with 5 % loss on both daemons' transmit
#      side (standing in for netem, which this kernel lacks), with --mtu=4096
#      on veths of MTU 1500, which the daemons raise to 4156;
#   3. af_packet with receive rings of 32 slots (framecnt=32), too few for a
#      window of frames: the kernel drops frames at the ring, both daemons
#      count them in port_rx_dropped, and the transfer still delivers every
#      byte; on veths of MTU 1500, A at its default (1024: what its veth
#      carries, which it leaves as it is) and B at --mtu=4096, so the
#      connections run at the smaller of the two;
#   4. af_xdp on the same veths (MTU 2200: the default path MTU is 2048), when the daemons can open it (optional: if
#      a daemon cannot start with af_xdp here, the reason is printed and the
#      test goes on): the same transfer, and every frame the daemons' ports
#      took for transmission was sent by the kernel; no XDP program may stay
#      attached after the stop.
# The daemons' counters (rdmaplanectl) show that frames crossed the ports
# and, in the lossy round, that frames were dropped on purpose.
# The namespaces and the veth pair are this test's own (named after its pid)
# and are deleted at exit, also on failure; no other interface is touched.
# The transfer tool and the probe run in the initial namespace: the daemons'
# Unix sockets are file system paths, reachable from every namespace.
#
#   netns_test.sh E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER CONNECT_PROBE
#
# Without root, or where `ip netns` cannot create namespaces, it prints
# "SKIPPED: <reason>", reports its one test case as skipped in the JUnit XML
# Bazel asks for (e2e_skip; deploy/test.sh counts it as skipped, not
# passed) and exits 0. Daemons run with --log_level=debug; their logs are
# printed on failure.
set -euo pipefail

if [[ $# -ne 5 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER CONNECT_PROBE" >&2
  exit 2
fi
E2E_NAME=netns_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
E2E_CTL="$3"
transfer_bin="$4"
probe_bin="$5"
# Bazel's strict action environment leaves /usr/sbin out of PATH.
export PATH="$PATH:/usr/sbin:/sbin"

if [[ $(id -u) -ne 0 ]]; then
  e2e_skip "needs root (network namespaces, veth, af_packet)"
fi
if ! command -v ip >/dev/null; then
  e2e_skip "no ip command (iproute2)"
fi
if ! ip netns list >/dev/null 2>&1; then
  e2e_skip "ip netns is unavailable: $(ip netns list 2>&1 | head -n 1)"
fi
for bin in "$daemon_bin" "$E2E_CTL" "$transfer_bin" "$probe_bin"; do
  [[ -x $bin ]] || e2e_fail "no executable at $bin"
done

ns_a="rdp-a-$$"
ns_b="rdp-b-$$"
# Interface names have at most 15 characters; pids at most 7 digits.
veth_a="rdpa$$"
veth_b="rdpb$$"
ip_a=198.51.100.1
ip_b=198.51.100.2
ip_nobody=198.51.100.99
created_ns=()
created_veth=false

# Cleanup hook: deletes what this test created, and only that. Deleting a
# namespace deletes the veth end in it, and with it the pair.
delete_network() {
  local ns
  for ns in "${created_ns[@]}"; do
    if [[ -e /var/run/netns/$ns ]]; then
      ip netns del "$ns" || echo "$E2E_NAME: cleanup: could not delete namespace $ns" >&2
    fi
  done
  created_ns=()
  # Should an end ever have been left in the initial namespace.
  if [[ $created_veth == true ]]; then
    local v
    for v in "$veth_a" "$veth_b"; do
      if ip link show dev "$v" >/dev/null 2>&1; then
        ip link del dev "$v" || echo "$E2E_NAME: cleanup: could not delete $v" >&2
      fi
    done
  fi
}

E2E_CLEANUP_HOOKS+=(delete_network)
e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

# --- the network: two namespaces, one veth pair ----------------------------
for ns in "$ns_a" "$ns_b"; do
  [[ ! -e /var/run/netns/$ns ]] || e2e_fail "namespace $ns exists already"
done
for v in "$veth_a" "$veth_b"; do
  if ip link show dev "$v" >/dev/null 2>&1; then
    e2e_fail "interface $v exists already"
  fi
done
for ns in "$ns_a" "$ns_b"; do
  e2e_log "ip netns add $ns"
  if ! err="$(ip netns add "$ns" 2>&1)"; then
    if [[ ${#created_ns[@]} -eq 0 ]]; then
      e2e_skip "ip netns add fails here: $err"
    fi
    e2e_fail "ip netns add $ns: $err"
  fi
  created_ns+=("$ns")
done
# Both ends are created directly in their namespaces: the initial namespace
# never sees them.
e2e_log "ip link add $veth_a netns $ns_a type veth peer name $veth_b netns $ns_b"
created_veth=true
if ! err="$(ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" 2>&1)"; then
  if [[ $err == *"Unknown device type"* || $err == *"not supported"* ]]; then
    e2e_skip "no veth support in this kernel: $err"
  fi
  e2e_fail "creating the veth pair: $err"
fi
for pair in "$ns_a:$veth_a" "$ns_b:$veth_b"; do
  ns="${pair%%:*}"
  v="${pair#*:}"
  e2e_log "ip -n $ns link set lo up; ip -n $ns link set $v up"
  ip -n "$ns" link set lo up || e2e_fail "cannot bring lo up in $ns"
  ip -n "$ns" link set "$v" up || e2e_fail "cannot bring $v up in $ns"
done
# The kernel has no address on the veths: the daemons answer ARP for their
# --ip themselves, and the kernel neither answers RoCEv2 frames with ICMP
# nor claims the addresses.
for pair in "$ns_a:$veth_a" "$ns_b:$veth_b"; do
  ns="${pair%%:*}"
  v="${pair#*:}"
  state=""
  for ((i = 0; i < 50; i++)); do
    state="$(ip -n "$ns" -o link show dev "$v" 2>/dev/null || true)"
    if [[ $state == *"state UP"* ]]; then
      break
    fi
    sleep 0.1
  done
  [[ $state == *"state UP"* ]] || e2e_fail "$v in $ns is not up after 5 s: $state"
  e2e_log "$v in $ns is up"
done

# start_pair ROUND DRIVER [DAEMON_FLAGS...]: starts daemon A in ns_a and B in
# ns_b on their veth ends with DPDK driver DRIVER (af_packet or af_xdp), at
# their default path MTU unless DAEMON_FLAGS say otherwise. PORT_ARGS, when
# set (PORT_ARGS=... start_pair ...), is appended to both device strings,
# and B_MTU, when set, is B's --mtu. Returns 1 (with the reason printed, and
# nothing left running) when either could not start.
start_pair() {
  local round="$1" driver="$2"
  shift 2
  local common=(--log_level=debug "$@")
  if ! e2e_start_daemon "a$round" "$E2E_TMP/a$round.sock" "rdp-e2e-$$-a$round" \
    ip netns exec "$ns_a" "$daemon_bin" --socket="$E2E_TMP/a$round.sock" \
    --file_prefix="rdp-e2e-$$-a$round" \
    --port="net_${driver}0,iface=$veth_a${PORT_ARGS:-}" \
    --ip="$ip_a" "${common[@]}"; then
    return 1
  fi
  if ! e2e_start_daemon "b$round" "$E2E_TMP/b$round.sock" "rdp-e2e-$$-b$round" \
    ip netns exec "$ns_b" "$daemon_bin" --socket="$E2E_TMP/b$round.sock" \
    --file_prefix="rdp-e2e-$$-b$round" \
    --port="net_${driver}0,iface=$veth_b${PORT_ARGS:-}" \
    --ip="$ip_b" "${common[@]}" ${B_MTU:+"--mtu=$B_MTU"}; then
    e2e_stop_daemon "a$round" || true
    return 1
  fi
  return 0
}

# transfer ROUND SIZES CONNECTIONS: the transfer between clients of A and B
# (listening on A, connecting from B); 0 when every byte arrived.
transfer() {
  local round="$1" sizes="$2" connections="$3"
  e2e_try_transfer "round$round" 240 "$transfer_bin" \
    --listen_socket="$E2E_TMP/a$round.sock" --connect_socket="$E2E_TMP/b$round.sock" \
    --peer="$ip_a" --sizes="$sizes" --depth=4 --connections="$connections" \
    --clients=2 --timeout_s=30
}

# check_counters ROUND FAULTY [RX_DROPS]: both daemons sent frames on their
# ports, and dropped some on purpose exactly when FAULTY is yes
# (--port_faults on); no frame was lost on the way in (port_rx_dropped),
# unless RX_DROPS is yes, and then both lost some there.
check_counters() {
  local round="$1" faulty="$2" rx_drops="${3:-no}" name
  for name in "a$round" "b$round"; do
    e2e_counters "$name"
    e2e_counter "$name" port_tx_frames
    ((E2E_VALUE > 0)) || e2e_fail "daemon $name sent no frames on its port"
    e2e_counter "$name" port_fault_dropped
    if [[ $faulty == yes ]]; then
      ((E2E_VALUE > 0)) || e2e_fail "daemon $name dropped no frame despite --port_faults"
    else
      ((E2E_VALUE == 0)) || e2e_fail "daemon $name dropped $E2E_VALUE frames without --port_faults"
    fi
    e2e_counter "$name" port_rx_dropped
    if [[ $rx_drops == yes ]]; then
      ((E2E_VALUE > 0)) || e2e_fail "daemon $name counted no receive drop with a ring of 32 slots"
    else
      ((E2E_VALUE == 0)) || e2e_fail "daemon $name lost $E2E_VALUE received frames before its engine saw them"
    fi
  done
}

# set_veths ARGS...: `ip link set dev VETH ARGS...` on both veth ends.
set_veths() {
  local pair
  for pair in "$ns_a:$veth_a" "$ns_b:$veth_b"; do
    ip -n "${pair%%:*}" link set dev "${pair#*:}" "$@" ||
      e2e_fail "cannot set ${pair#*:} $*"
  done
}

# veth_sysfs NS IFACE FILE: sets E2E_VALUE to /sys/class/net/IFACE/FILE in
# NS (mtu, statistics/tx_packets).
veth_sysfs() {
  local value
  value="$(ip netns exec "$1" cat "/sys/class/net/$2/$3")" ||
    e2e_fail "cannot read $3 of $2 in $1"
  E2E_VALUE="$value"
}

# check_mtu ROUND WANT_A WANT_B: the daemons' path MTUs (rdmaplanectl
# status) and, at 4096, their veths' MTUs raised to carry such frames (the
# IP packet of a first WRITE frame: 4156 bytes).
check_mtu() {
  local round="$1" want_a="$2" want_b="$3" entry name ns v want got
  for entry in "a$round:$ns_a:$veth_a:$want_a" "b$round:$ns_b:$veth_b:$want_b"; do
    IFS=: read -r name ns v want <<<"$entry"
    e2e_status "$name" mtu
    got="$E2E_VALUE"
    [[ $got == "$want" ]] || e2e_fail "daemon $name runs path MTU '$got', not $want"
    veth_sysfs "$ns" "$v" mtu
    if [[ $want == 4096 ]]; then
      ((E2E_VALUE >= 4156)) || e2e_fail "the MTU of $v is $E2E_VALUE, too small for path MTU 4096"
    fi
    e2e_log "daemon $name: path MTU $got; $v: mtu $E2E_VALUE"
  done
}

# probe ROUND: a connect to a service nobody listens on is refused, and one
# to an address nobody has times out, both within 5 s.
probe() {
  local round="$1"
  e2e_probe "refused$round" RDP_ERR_REFUSED 5 "nosuchservice" \
    "$probe_bin" --socket="$E2E_TMP/b$round.sock" --service=nosuchservice --peer="$ip_a"
  e2e_probe "nobody$round" RDP_ERR_TIMEOUT 5 "$ip_nobody" \
    "$probe_bin" --socket="$E2E_TMP/b$round.sock" --service=transfer-0 --peer="$ip_nobody"
}

# stop_pair ROUND: SIGTERM to both; each must exit 0 within 5 s and leave no
# socket, no DPDK runtime folder and no XDP program on its veth.
stop_pair() {
  local round="$1" pair ns v
  e2e_check_clean_stop "b$round"
  e2e_check_clean_stop "a$round"
  local link
  for pair in "$ns_a:$veth_a" "$ns_b:$veth_b"; do
    ns="${pair%%:*}"
    v="${pair#*:}"
    # Read first: a failing `ip` must fail the test, not pass for a veth
    # without an XDP program.
    link="$(ip -n "$ns" link show dev "$v" 2>&1)" ||
      e2e_fail "cannot look at $v in $ns for XDP programs: $link"
    if [[ $link == *"prog/xdp"* ]]; then
      e2e_fail "an XDP program is still attached to $v after its daemon stopped: $link"
    fi
  done
}

# af_xdp_tx_lost ROUND TX_A TX_B: whether the daemons' af_xdp ports took
# frames for transmission (port_tx_frames) that the kernel never sent on the
# veths. TX_A and TX_B are the veths' transmit counters from before the
# daemons started; the kernel's own frames count too, so a shortfall is
# certain loss. Prints the numbers either way.
af_xdp_tx_lost() {
  local round="$1" tx_a="$2" tx_b="$3" lost=0
  local name ns v before sent kernel entry
  for entry in "a$round:$ns_a:$veth_a:$tx_a" "b$round:$ns_b:$veth_b:$tx_b"; do
    IFS=: read -r name ns v before <<<"$entry"
    e2e_counters "$name"
    e2e_counter "$name" port_tx_frames
    sent="$E2E_VALUE"
    veth_sysfs "$ns" "$v" statistics/tx_packets
    kernel=$((E2E_VALUE - before))
    e2e_log "daemon $name: its af_xdp port took $sent frames to send; the kernel sent $kernel on $v"
    if ((sent > kernel)); then
      lost=1
    fi
  done
  [[ $lost -eq 1 ]]
}

e2e_log "round 1: af_packet on the veth pair (MTU 9000), default path MTU (4096)"
set_veths mtu 9000
start_pair 1 af_packet || e2e_fail "the daemons did not start with af_packet"
check_mtu 1 4096 4096
transfer 1 1,4096,65536,1048576,4194304 3 || e2e_fail "$E2E_TRANSFER_ERROR"
# The two-host procedure of docs/operations.md, split mode: the server with
# a session on A (in ns_a), the client on B (in ns_b); the RDMA connection
# crosses the veth pair.
e2e_split_transfer round1-split 120 "$transfer_bin" "$E2E_TMP/a1.sock" \
  "$E2E_TMP/b1.sock" "$ip_a" --sizes=1,4096,65536,1048576 --depth=16 --timeout_s=30
check_counters 1 no
# An interface going down leaves an error pending on af_packet's socket,
# which an engine sleeping on it must take, or it never sleeps again: after
# a down and up of both veths, idle engines sleep about as often as before
# (a spinning one would go round thousands of times a second), and the
# connection probes below still reach the peer.
set_veths down
set_veths up
# The engine takes the error when it next looks at its socket: wait for the
# counter, polled quietly and logged once (the 30 s only turn an error never
# taken into a failure).
for ((i = 0; i < 300; i++)); do
  e2e_counters a1 >/dev/null
  e2e_counter a1 engine_port_socket_errors
  ((E2E_VALUE > 0)) && break
  sleep 0.1
done
e2e_counters a1
e2e_counter a1 engine_port_socket_errors
((E2E_VALUE > 0)) || e2e_fail "daemon a1 took no error from its af_packet socket within 30 s after its veth went down"
e2e_counter a1 engine_sleeps
sleeps_before="$E2E_VALUE"
sleep 2
e2e_counters a1
e2e_counter a1 engine_sleeps
e2e_log "daemon a1 slept $((E2E_VALUE - sleeps_before)) times in 2 s after its veth went down and up"
((E2E_VALUE - sleeps_before < 2000)) ||
  e2e_fail "daemon a1's engine went round $((E2E_VALUE - sleeps_before)) times in 2 s idle after its veth went down and up: it spins"
probe 1
stop_pair 1
e2e_log "round 1 done after $(e2e_since "$test_start") s"

# The kernel here has no netem (sch_netem) to make the veth lossy, so the
# daemons' own fault-injecting port drops 5 % of the frames they send.
# Sizes up to 1 MiB: go-back-N over af_packet at this loss takes about a
# minute for the 4 MiB round alone.
e2e_log "round 2: af_packet with 5 % loss on both transmit sides (in place of netem)"
set_veths mtu 1500
start_pair 2 af_packet --mtu=4096 --port_faults=loss=0.05,seed=11 ||
  e2e_fail "the daemons did not start with af_packet and --port_faults"
check_mtu 2 4096 4096
transfer 2 1,4096,65536,1048576 2 || e2e_fail "$E2E_TRANSFER_ERROR"
check_counters 2 yes
stop_pair 2
e2e_log "round 2 done after $(e2e_since "$test_start") s"

# Receive rings far smaller than a window: the kernel drops what does not
# fit, and the count must show it (a clean link is not enough to prove
# the counter). On veths of MTU 1500, A at its default (1024, leaving its
# veth as it is), B at --mtu=4096: the connections run at 1024.
e2e_log "round 3: af_packet with receive rings of 32 slots, path MTU 1024 on A (default on MTU 1500) and 4096 on B"
set_veths mtu 1500
PORT_ARGS=",framesz=4352,blocksz=69632,framecnt=32" B_MTU=4096 start_pair 3 af_packet ||
  e2e_fail "the daemons did not start with rings of 32 slots"
check_mtu 3 1024 4096
veth_sysfs "$ns_a" "$veth_a" mtu
[[ $E2E_VALUE == 1500 ]] ||
  e2e_fail "daemon a3 changed the MTU of $veth_a to $E2E_VALUE without --mtu"
transfer 3 1,4096,65536,1048576 2 || e2e_fail "$E2E_TRANSFER_ERROR"
check_counters 3 no yes
stop_pair 3
e2e_log "round 3 done after $(e2e_since "$test_start") s"

# af_xdp is optional: where a daemon cannot open it, the reason is printed
# and the test goes on. Where it opens, nothing may be lost: DPDK 22.11's
# af_xdp PMD registers the mbuf pool as one UMEM region, and the daemon
# gives af_xdp ports a pool without gaps for it (dataplane/port/eth_port.cc,
# NeedsDensePool); frames in mbufs outside the region would be dropped by
# the kernel without an error.
e2e_log "round 4: af_xdp on the veth pair (optional)"
# XDP on a veth takes frames of at most a page: MTU 2200, on which the
# daemons' default path MTU is the largest af_xdp carries, 2048.
set_veths mtu 2200
veth_sysfs "$ns_a" "$veth_a" statistics/tx_packets
tx_a="$E2E_VALUE"
veth_sysfs "$ns_b" "$veth_b" statistics/tx_packets
tx_b="$E2E_VALUE"
if start_pair 4 af_xdp; then
  check_mtu 4 2048 2048
  veth_sysfs "$ns_a" "$veth_a" mtu
  [[ $E2E_VALUE == 2200 ]] ||
    e2e_fail "daemon a4 changed the MTU of $veth_a from 2200 to $E2E_VALUE (it carries 2048 as it is)"
  if ! transfer 4 1,4096,65536,1048576,4194304 3; then
    af_xdp_tx_lost 4 "$tx_a" "$tx_b" || true
    e2e_fail "af_xdp: $E2E_TRANSFER_ERROR"
  fi
  check_counters 4 no
  if af_xdp_tx_lost 4 "$tx_a" "$tx_b"; then
    e2e_fail "af_xdp: the kernel sent fewer frames than the daemons' ports took"
  fi
  stop_pair 4
  e2e_log "round 4 done after $(e2e_since "$test_start") s"
else
  e2e_skip_round "af_xdp" "af_xdp is not usable here (the daemon's log above says why)"
fi

# The network goes away with the namespaces; check that it did.
e2e_log "deleting namespaces $ns_a and $ns_b"
delete_network
for ns in "$ns_a" "$ns_b"; do
  [[ ! -e /var/run/netns/$ns ]] || e2e_fail "namespace $ns is still there"
done
for v in "$veth_a" "$veth_b"; do
  if ip link show dev "$v" >/dev/null 2>&1; then
    e2e_fail "interface $v is still there"
  fi
done
e2e_log "ok in $(e2e_since "$test_start") s"
e2e_finish
