#!/usr/bin/env bash
# Two rdmaplaned daemons joined by a memif link, end to end:
#   1. at the default path MTU, 4096 (one frame per memif buffer): RDMA
#      WRITE and READ of 1 B .. 4 MiB each way (depth 4, 2 clients with
#      2 connections each), every byte checked by rdmaplane_transfer; then
#      1 B .. 256 KiB with 256 requests outstanding per connection (its
#      whole send queue); then the two-host procedure of docs/operations.md
#      with rdmaplane_transfer's split mode (a --listen server with a session
#      on A, a --connect client on B), both ends checking every byte; each
#      daemon received exactly the frames the other sent;
#   2. a connect to a service nobody listens on at the peer is refused
#      (RDP_ERR_REFUSED, naming the service), and a connect to an address no
#      daemon has (10.0.0.99) times out (RDP_ERR_TIMEOUT) within 5 s, after
#      which a small transfer shows that both daemons still serve;
#   3. SIGTERM stops both daemons with status 0 within 5 s, and they leave
#      neither their sockets nor their DPDK runtime folders behind;
#   4. the same (sizes up to 1 MiB, no deep round) with 5 % loss, 1 %
#      duplication and 1 % reordering injected on both daemons' transmit
#      side;
#   5. daemons with different --mtu (512 on A, 1024 on B; rdmaplanectl
#      status shows each): transfers connecting from A and from B both
#      succeed at path MTU 512 on both sides (counted in frames sent);
#   6. memif's zero-copy mode on the memif client, which needs hugepages
#      (reserved as root, skipped with the reason otherwise).
#
#   memif_test.sh E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER CONNECT_PROBE
#
# The daemons' counters (rdmaplanectl) show that frames crossed the port and,
# in the lossy round, that faults were injected on both sides.
# Daemons run with --log_level=debug; their logs are printed on failure.
set -euo pipefail

if [[ $# -ne 5 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER CONNECT_PROBE" >&2
  exit 2
fi
E2E_NAME=memif_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
E2E_CTL="$3"
transfer_bin="$4"
probe_bin="$5"
for bin in "$daemon_bin" "$E2E_CTL" "$transfer_bin" "$probe_bin"; do
  [[ -x $bin ]] || e2e_fail "no executable at $bin"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

ip_a=10.0.0.1
ip_b=10.0.0.2
ip_nobody=10.0.0.99

# run_pair ROUND SIZES FAULTY [DAEMON_FLAGS...]: starts the memif server
# daemon A and the client daemon B, transfers, probes, and stops both.
# FAULTY (yes or no) says whether DAEMON_FLAGS inject port faults.
run_pair() {
  local round="$1" sizes="$2" faulty="$3"
  shift 3
  local sock_a="$E2E_TMP/a$round.sock" sock_b="$E2E_TMP/b$round.sock"
  # The memif socket is an abstract name (the default) made unique by the
  # private folder's name; it never clashes with another test's link.
  local memif="$E2E_TMP/memif$round.sock"
  local prefix_a="rdp-e2e-$$-a$round" prefix_b="rdp-e2e-$$-b$round"
  # The default path MTU, 4096: each frame fits one of memif's buffers,
  # which the memif client (B) sizes to fit.
  local common=(--log_level=debug "$@")

  # The memif server must be up before the client daemon starts.
  e2e_start_daemon "a$round" "$sock_a" "$prefix_a" \
    "$daemon_bin" --socket="$sock_a" --file_prefix="$prefix_a" \
    --port="net_memif0,role=server,socket=$memif" --ip="$ip_a" "${common[@]}" ||
    e2e_fail "daemon a$round (memif server) did not start"
  e2e_start_daemon "b$round" "$sock_b" "$prefix_b" \
    "$daemon_bin" --socket="$sock_b" --file_prefix="$prefix_b" \
    --port="net_memif0,role=client,socket=$memif" --ip="$ip_b" "${common[@]}" ||
    e2e_fail "daemon b$round (memif client) did not start"

  # Clients of B connect to listeners on A at A's data address.
  e2e_transfer "round$round" 240 "$transfer_bin" \
    --listen_socket="$sock_a" --connect_socket="$sock_b" --peer="$ip_a" \
    --sizes="$sizes" --depth=4 --connections=2 --clients=2 --timeout_s=60
  if [[ $faulty == no ]]; then
    # A connection's whole send queue (256 requests) outstanding at once:
    # far more than the 16 READs a requester lets out at a time (the peer's
    # responder resources), so the rest wait in its queue.
    e2e_transfer "round$round-deep" 120 "$transfer_bin" \
      --listen_socket="$sock_a" --connect_socket="$sock_b" --peer="$ip_a" \
      --sizes=1,4096,65536,262144 --depth=256 --connections=2 --clients=1 \
      --timeout_s=60
  fi
  # The two-host procedure: a split-mode server with a session on A, its
  # client with a session on B.
  e2e_split_transfer "round$round-split" 120 "$transfer_bin" "$sock_a" "$sock_b" \
    "$ip_a" --sizes=1,4096,65536,1048576 --depth=16 --timeout_s=60

  local name
  if [[ $faulty == no ]]; then
    # No frame was lost or received twice inside the link: each daemon
    # received exactly the frames the other sent (read again while a
    # farewell may still be crossing).
    local tries sent_a sent_b got_a got_b
    for tries in $(seq 50); do
      e2e_counters "a$round" >/dev/null
      e2e_counters "b$round" >/dev/null
      e2e_counter "a$round" port_tx_frames; sent_a=$E2E_VALUE
      e2e_counter "a$round" port_rx_frames; got_a=$E2E_VALUE
      e2e_counter "b$round" port_tx_frames; sent_b=$E2E_VALUE
      e2e_counter "b$round" port_rx_frames; got_b=$E2E_VALUE
      ((sent_a == got_b && sent_b == got_a)) && break
      sleep 0.1
    done
    ((sent_a == got_b)) || e2e_fail "daemon a$round sent $sent_a frames, b$round received $got_b"
    ((sent_b == got_a)) || e2e_fail "daemon b$round sent $sent_b frames, a$round received $got_a"
    e2e_log "every frame arrived once: $sent_a from a$round, $sent_b from b$round"
    e2e_status "a$round" mtu
    mtu_a="$E2E_VALUE"
    e2e_status "b$round" mtu
    [[ $mtu_a == 4096 && $E2E_VALUE == 4096 ]] ||
      e2e_fail "the daemons run path MTU $mtu_a and $E2E_VALUE, not 4096"
  fi
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
  done

  e2e_probe "refused$round" RDP_ERR_REFUSED 5 "nosuchservice" \
    "$probe_bin" --socket="$sock_b" --service=nosuchservice --peer="$ip_a"
  e2e_probe "nobody$round" RDP_ERR_TIMEOUT 5 "$ip_nobody" \
    "$probe_bin" --socket="$sock_b" --service=transfer-0 --peer="$ip_nobody"
  # The refusal came from A.
  e2e_counters "a$round"
  e2e_counter "a$round" remote_refused
  ((E2E_VALUE >= 1)) || e2e_fail "daemon a$round counted no refused connection request"

  # Both still serve after the failed connects.
  e2e_transfer "round$round-after-probes" 60 "$transfer_bin" \
    --listen_socket="$sock_a" --connect_socket="$sock_b" --peer="$ip_a" \
    --sizes=4096 --depth=4 --connections=1 --clients=1 --timeout_s=30

  e2e_check_clean_stop "b$round"
  e2e_check_clean_stop "a$round"
}

e2e_log "round 1: a clean memif link"
run_pair 1 1,4096,65536,1048576,4194304 no
e2e_log "round 1 done after $(e2e_since "$test_start") s"

# Sizes up to 1 MiB: with 5 % loss, go-back-N resends whole windows; up to
# 4 MiB this round sent about 3 million frames for 340 MB (17 s on an idle
# machine, over a minute on a busy one).
e2e_log "round 2: loss 5 %, duplication 1 %, reordering 1 % on both transmit sides"
run_pair 2 1,4096,65536,1048576 yes \
  --port_faults=loss=0.05,dup=0.01,reorder=0.01,seed=3
e2e_log "round 2 done after $(e2e_since "$test_start") s"

# Path MTU: each daemon announces its own in the connection request (REQ);
# the listening side takes the smaller of its own and the requester's.
# Observed through the frames the data ports sent: 1 MiB written and read
# each way (rdmaplane_transfer, depth 1) makes each daemon send 2 MiB of
# payload, 4096 frames at path MTU 512 and 2048 at 1024, plus a few dozen
# ACKs, ARP and CM frames.
# mtu_transfer LABEL LISTEN_NAME LISTEN_IP CONNECT_NAME: the transfer,
# listening on daemon LISTEN_NAME (data address LISTEN_IP) and connecting
# from CONNECT_NAME; returns 1 (reason in E2E_TRANSFER_ERROR) when it
# failed. The frames each daemon sent meanwhile go to MTU_TX[name].
declare -A MTU_TX=()
mtu_transfer() {
  local label="$1" listen="$2" listen_ip="$3" connect="$4" name ok=0
  local -A before=()
  for name in "$listen" "$connect"; do
    e2e_counters "$name"
    e2e_counter "$name" port_tx_frames
    before[$name]="$E2E_VALUE"
  done
  e2e_try_transfer "$label" 60 "$transfer_bin" \
    --listen_socket="${E2E_SOCK[$listen]}" --connect_socket="${E2E_SOCK[$connect]}" \
    --peer="$listen_ip" --service="$label" --sizes=1048576 --depth=1 \
    --connections=1 --clients=1 --timeout_s=30 || ok=1
  for name in "$listen" "$connect"; do
    e2e_counters "$name"
    e2e_counter "$name" port_tx_frames
    MTU_TX[$name]=$((E2E_VALUE - before[$name]))
  done
  return "$ok"
}

# check_mtu_512 NAME: daemon NAME sent its 2 MiB of the last mtu_transfer
# at path MTU 512: 4096 data frames and fewer than as many again.
check_mtu_512() {
  local name="$1" frames="${MTU_TX[$1]}"
  e2e_log "daemon $name sent $frames frames for its 2 MiB"
  ((frames >= 4096)) ||
    e2e_fail "daemon $name sent its 2 MiB in $frames frames: more than 512 bytes a frame, so not path MTU 512"
  ((frames < 8192)) ||
    e2e_fail "daemon $name sent its 2 MiB in $frames frames: 256 bytes a frame or less, not path MTU 512"
}

e2e_log "round 3: path MTU 512 on A, 1024 on B"
sock_a3="$E2E_TMP/a3.sock" sock_b3="$E2E_TMP/b3.sock" memif3="$E2E_TMP/memif3.sock"
e2e_start_daemon a3 "$sock_a3" "rdp-e2e-$$-a3" \
  "$daemon_bin" --socket="$sock_a3" --file_prefix="rdp-e2e-$$-a3" \
  --port="net_memif0,role=server,socket=$memif3" --ip="$ip_a" --mtu=512 \
  --log_level=debug || e2e_fail "daemon a3 (memif server, MTU 512) did not start"
e2e_start_daemon b3 "$sock_b3" "rdp-e2e-$$-b3" \
  "$daemon_bin" --socket="$sock_b3" --file_prefix="rdp-e2e-$$-b3" \
  --port="net_memif0,role=client,socket=$memif3" --ip="$ip_b" --mtu=1024 \
  --log_level=debug || e2e_fail "daemon b3 (memif client, MTU 1024) did not start"
e2e_status a3 mtu
mtu_a="$E2E_VALUE"
e2e_status b3 mtu
[[ $mtu_a == 512 && $E2E_VALUE == 1024 ]] ||
  e2e_fail "rdmaplanectl status shows MTU $mtu_a on a3 and $E2E_VALUE on b3, not 512 and 1024"

# B listens, A (MTU 512) connects: B takes A's 512.
mtu_transfer mtu-a-to-b b3 "$ip_b" a3 || e2e_fail "$E2E_TRANSFER_ERROR"
check_mtu_512 a3
check_mtu_512 b3

# A (MTU 512) listens, B (1024) connects: the connect reply (REP), which
# has no MTU field of its own, carries A's 512 in its private data.
mtu_transfer mtu-b-to-a a3 "$ip_a" b3 || e2e_fail "$E2E_TRANSFER_ERROR"
check_mtu_512 a3
check_mtu_512 b3
e2e_check_clean_stop b3
e2e_check_clean_stop a3
e2e_log "round 3 done after $(e2e_since "$test_start") s"

# memif's own zero-copy mode: the memif client (B) shares its packet
# buffers with A, which reads them in place. That needs B's DPDK memory in
# hugepage files: without --hugepages B refuses to start and says why; with
# them, transfers of 1 B .. 4 MiB each way arrive whole, and after a clean
# stop B has left no hugepage file behind and every page it took is free
# again. Where hugepages cannot be had (not root and none reserved), the
# round is skipped with the reason.
e2e_log "round 4: memif zero-copy mode on B (hugepages)"
sock_a4="$E2E_TMP/a4.sock" sock_b4="$E2E_TMP/b4.sock" memif4="$E2E_TMP/memif4.sock"
zc_port="net_memif0,role=client,socket=$memif4,zero-copy=yes"
status=0
out="$("$daemon_bin" --socket="$sock_b4" --file_prefix="rdp-e2e-$$-b4x" \
  --port="$zc_port" --ip="$ip_b" --mtu=1024 2>&1)" || status=$?
[[ $status -ne 0 && $out == *"zero-copy=yes needs --hugepages"* ]] ||
  e2e_fail "zero-copy=yes without --hugepages: status $status, said: $out"
e2e_log "refused as expected without hugepages: $out"
if e2e_hugepages 192; then
  free_before="$E2E_HUGE_FREE"
  e2e_start_daemon a4 "$sock_a4" "rdp-e2e-$$-a4" \
    "$daemon_bin" --socket="$sock_a4" --file_prefix="rdp-e2e-$$-a4" \
    --port="net_memif0,role=server,socket=$memif4" --ip="$ip_a" --mtu=1024 \
    --log_level=debug || e2e_fail "daemon a4 did not start"
  e2e_start_daemon b4 "$sock_b4" "rdp-e2e-$$-b4" \
    "$daemon_bin" --socket="$sock_b4" --file_prefix="rdp-e2e-$$-b4" \
    --port="$zc_port" --ip="$ip_b" --mtu=1024 --hugepages \
    --eal_args="--huge-dir=$E2E_HUGE_DIR" --log_level=debug ||
    e2e_fail "daemon b4 (memif zero-copy) did not start"
  e2e_transfer round4 120 "$transfer_bin" \
    --listen_socket="$sock_a4" --connect_socket="$sock_b4" --peer="$ip_a" \
    --sizes=1,4096,65536,1048576,4194304 --depth=8 --connections=2 \
    --clients=2 --timeout_s=60
  e2e_check_clean_stop b4
  e2e_check_clean_stop a4
  left="$(find "$E2E_HUGE_DIR" -name "rdp-e2e-$$-b4*" | wc -l)"
  ((left == 0)) || e2e_fail "daemon b4 left $left hugepage files in $E2E_HUGE_DIR"
  # The count is the whole machine's: another process may hold hugepages
  # for a while (a test of another checkout). Waits until they are back,
  # at most 30 s: pages the daemons leaked never come back.
  free_after=0
  for _ in $(seq 1 300); do
    free_after="$(sed -n 's/^HugePages_Free: *//p' /proc/meminfo)"
    ((free_after >= free_before)) && break
    sleep 0.1
  done
  ((free_after >= free_before)) ||
    e2e_fail "$((free_before - free_after)) hugepages stayed taken for 30 s after daemon b4 stopped"
  e2e_log "round 4 done after $(e2e_since "$test_start") s; $free_after hugepages free again"
else
  e2e_skip_round "memif zero copy" "$E2E_HUGE_WHY"
fi

e2e_log "ok in $(e2e_since "$test_start") s"
e2e_finish
