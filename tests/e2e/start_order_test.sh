#!/usr/bin/env bash
# Two daemons joined by memif link in any start order, and again after
# either restarts under load (docs/operations.md, "One host, two daemons"):
#   1. RUNS times (20; RDP_START_ORDER_RUNS sets it), the memif server A and
#      the memif client B are launched together, A first on odd runs and B
#      first on even ones. Both must report the link up in `rdmaplanectl
#      status` within 30 s, and a verified transfer from B's clients to
#      listeners on A must pass; then both stop cleanly.
#   2. With transfers running between them, A is stopped and started again:
#      B connects to the new A by itself, both report the link up, and a
#      verified transfer passes. The same with B restarted, and with A
#      killed (SIGKILL, leaving its memif socket behind) and started again.
# Each run's link bound (30 s) is a hang bound, far above the 2-8 s a
# memif client waits between its tries: it only turns a link that never
# comes into a failure.
#
#   start_order_test.sh E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER" >&2
  exit 2
fi
E2E_NAME=start_order_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
E2E_CTL="$3"
transfer_bin="$4"
for bin in "$daemon_bin" "$E2E_CTL" "$transfer_bin"; do
  [[ -x $bin ]] || e2e_fail "no executable at $bin"
done
runs="${RDP_START_ORDER_RUNS:-20}"
[[ $runs =~ ^[1-9][0-9]*$ ]] || e2e_fail "RDP_START_ORDER_RUNS is not a count: $runs"

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"
memif="$E2E_TMP/memif.sock"
ip_a=10.9.0.1
ip_b=10.9.0.2

# launch NAME ROLE IP: a daemon with the memif port in ROLE, not waited for.
launch() {
  local name="$1" role="$2" ip="$3"
  e2e_launch_daemon "$name" "$E2E_TMP/$name.sock" "rdp-order-$$-$name" \
    "$daemon_bin" --socket="$E2E_TMP/$name.sock" --file_prefix="rdp-order-$$-$name" \
    --port="net_memif0,role=$role,socket=$memif" --ip="$ip"
}

await() {
  local name
  for name in "$@"; do
    e2e_await_daemon "$name" || e2e_fail "daemon $name did not start"
  done
}

# linked A B LABEL: until both daemons' status says the link is up (at most
# 300 looks, 0.1 s apart).
linked() {
  local a="$1" b="$2" label="$3" i la lb start
  start="$(e2e_now)"
  for ((i = 0; i < 300; i++)); do
    e2e_status "$a" link
    la="$E2E_VALUE"
    e2e_status "$b" link
    lb="$E2E_VALUE"
    if [[ $la == up && $lb == up ]]; then
      e2e_status "$b" link_changes
      e2e_log "$label: link up on both after $(e2e_since "$start") s ($b: $E2E_VALUE changes)"
      return 0
    fi
    sleep 0.1
  done
  e2e_fail "$label: the link is $la on $a and $lb on $b after 30 s"
}

# transfer LABEL A B: clients on B to listeners on A, every byte verified.
transfer() {
  e2e_transfer "$1" 120 "$transfer_bin" --listen_socket="${E2E_SOCK[$2]}" \
    --connect_socket="${E2E_SOCK[$3]}" --peer="$ip_a" --sizes=4096,1048576 \
    --depth=4 --timeout_s=60
}

# --- 1. Started together, in both orders ----------------------------------

for ((run = 1; run <= runs; run++)); do
  a="a$run" b="b$run"
  if ((run % 2 == 1)); then
    launch "$a" server "$ip_a"
    launch "$b" client "$ip_b"
  else
    launch "$b" client "$ip_b"
    launch "$a" server "$ip_a"
  fi
  await "$a" "$b"
  linked "$a" "$b" "run $run"
  transfer "run$run" "$a" "$b"
  e2e_check_clean_stop "$b"
  e2e_check_clean_stop "$a"
done
e2e_log "$runs runs linked and moved verified bytes"

# --- 2. Restarted under load ------------------------------------------------

# load A B: transfers one after the other until stopped (those cut short by
# a restart fail, as they must); LOAD_PID is the loop's. unload stops the
# loop and the transfer it is running, and waits for both: a transfer left
# running would still listen on the service the next checked transfer
# listens on, which the daemon then refuses to that one ("another client
# listens on this service").
load() {
  local a="$1" b="$2"
  (
    # SIGTERM ends the wait below early and the loop with it; the transfer
    # then running is stopped and waited for.
    stop=0 child=""
    trap 'stop=1' TERM
    while [[ $stop -eq 0 ]]; do
      timeout --kill-after=5 60 "$transfer_bin" --listen_socket="${E2E_SOCK[$a]}" \
        --connect_socket="${E2E_SOCK[$b]}" --peer="$ip_a" --sizes=65536 \
        --depth=16 --timeout_s=10 >/dev/null 2>&1 &
      child=$!
      wait "$child" || true
    done
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" || true
  ) &
  LOAD_PID=$!
  E2E_HELPER_PIDS+=("$LOAD_PID")
}

unload() {
  kill -TERM "$LOAD_PID" 2>/dev/null || true
  wait "$LOAD_PID" 2>/dev/null || true
  if pgrep -f -- "--listen_socket=$E2E_TMP/.* --sizes=65536 " >/dev/null; then
    e2e_fail "a load transfer still runs after the load was stopped"
  fi
}

launch a server "$ip_a"
launch b client "$ip_b"
await a b
linked a b "before the restarts"

load a b
e2e_check_clean_stop a
launch a2 server "$ip_a"
await a2
linked a2 b "server restarted under load"
unload
transfer server_restarted a2 b

load a2 b
e2e_check_clean_stop b
launch b2 client "$ip_b"
await b2
linked a2 b2 "client restarted under load"
unload
transfer client_restarted a2 b2

load a2 b2
e2e_status b2 link_changes
changes_before="$E2E_VALUE"
kill -KILL "${E2E_PID[a2]}"
wait "${E2E_PID[a2]}" 2>/dev/null || true
unset 'E2E_PID[a2]'
rm -rf "$(e2e_dpdk_runtime_base)/${E2E_PREFIX[a2]}" "${E2E_SOCK[a2]}"
launch a3 server "$ip_a"
await a3
linked a3 b2 "server killed and started again"
unload
transfer server_killed a3 b2
e2e_status b2 link_changes
[[ $E2E_VALUE -ge $((changes_before + 2)) ]] ||
  e2e_fail "daemon b2's status counts $E2E_VALUE link changes, $changes_before before its server was killed: the link did not go down and up again"

e2e_check_clean_stop b2
e2e_check_clean_stop a3
e2e_log "ok in $(e2e_since "$test_start") s"
e2e_finish
