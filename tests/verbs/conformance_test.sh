#!/usr/bin/env bash
# The verbs conformance checks (conformance_test.c) against two rdmaplaned
# daemons joined by memif: A (memif server, 10.9.0.1) and B (memif client,
# 10.9.0.2). One process opens both, rdmaplane0 and rdmaplane1
# (RDMAPLANE_SOCKET=A:B), and connects queue pairs between them; it prints
# PASS or FAIL for every check and fails when one did. Daemon b must have
# reported the file that shrank under an MR (t_shared_files). Afterwards both
# daemons must still stop cleanly; B's stop raises IBV_EVENT_DEVICE_FATAL
# in a process on B and IBV_EVENT_PORT_ERR in one on A, whose port is
# then DOWN, and B started again raises IBV_EVENT_PORT_ACTIVE there.
#
#   conformance_test.sh E2E_LIB RDMAPLANED CONFORMANCE
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED CONFORMANCE" >&2
  exit 2
fi
E2E_NAME=verbs_conformance_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
conformance_bin="$3"
for bin in "$daemon_bin" "$conformance_bin"; do
  [[ -x $bin ]] || e2e_fail "no executable at $bin"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

e2e_start_memif_pair "$daemon_bin" verbs --log_level=debug
ip_a="$E2E_IP_A" ip_b="$E2E_IP_B" sock_a="$E2E_SOCK_A" sock_b="$E2E_SOCK_B"

# Free hugepages for the hugetlbfs and SysV hugepage cases (t_shared_files,
# t_sysv_hugepages), beside those the process's own arenas take; reserved
# once the daemons run, so that they are left for the process.
if ! e2e_hugepages 128; then
  e2e_skip_round hugepages "$E2E_HUGE_WHY"
fi

out="$E2E_TMP/conformance.out"
status=0
e2e_log "conformance: RDMAPLANE_SOCKET=$sock_a:$sock_b $conformance_bin $ip_a $ip_b"
# RDMAPLANE_VERBS_DEBUG: the front end says on stderr why a call failed.
RDMAPLANE_SOCKET="$sock_a:$sock_b" RDMAPLANE_VERBS_DEBUG=1 \
  timeout --kill-after=5 100 "$conformance_bin" "$ip_a" "$ip_b" >"$out" 2>&1 ||
  status=$?
sed 's/^/    /' "$out"
if [[ $status -eq 124 || $status -eq 137 ]]; then
  e2e_fail "the conformance checks did not finish within 100 s"
fi
summary="$(grep '^conformance: ' "$out" | tail -n 1)" || true
if [[ $status -ne 0 ]]; then
  echo "failed checks:" >&2
  grep '^FAIL: ' "$out" >&2 || true
  e2e_fail "the conformance checks exited with status $status: ${summary:-no summary}"
fi
[[ $summary == "conformance: "*" passed, 0 failed in "* ]] ||
  e2e_fail "the conformance checks exited 0 without a clean summary: ${summary:-none}"
e2e_log "$summary"
# The file that shrank under its MR (t_shared_files) lost its pages under
# daemon b's mapping: b said so, and lives on.
grep -q "lost pages under the daemon's mapping" "$E2E_TMP/b.log" ||
  e2e_fail "daemon b did not report the file that shrank under its mapping"

# wait_line FILE PID LINE WHAT: waits at most 30 s for the process PID to
# print LINE into FILE; fails the test (FILE printed) if it does not.
wait_line() {
  local file="$1" pid="$2" line="$3" what="$4" i
  for ((i = 0; i < 300; i++)); do
    grep -qx "$line" "$file" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  sed 's/^/    /' "$file"
  e2e_fail "$what did not print '$line' within 30 s"
}

# wait_done PID FILE WHAT: waits for the process PID, prints its output
# FILE, and fails the test unless it exited with status 0.
wait_done() {
  local pid="$1" file="$2" what="$3" status=0
  wait "$pid" || status=$?
  sed 's/^/    /' "$file"
  [[ $status -eq 0 ]] || e2e_fail "$what exited with status $status"
}

# IBV_EVENT_DEVICE_FATAL: a process waiting in ibv_get_async_event on
# rdmaplane0 = B learns that B went, when B stops (after the check that it
# survived every error the checks provoked and stops cleanly). Meanwhile a
# process with A's device open sees A's port go down (IBV_EVENT_PORT_ERR),
# and come back up when B is started again (IBV_EVENT_PORT_ACTIVE).
fatal_out="$E2E_TMP/device_fatal.out"
RDMAPLANE_SOCKET="$sock_b" timeout --kill-after=5 60 \
  "$conformance_bin" --device-fatal >"$fatal_out" 2>&1 &
fatal_pid=$!
wait_line "$fatal_out" "$fatal_pid" ready "conformance --device-fatal"
events_out="$E2E_TMP/port_events.out"
RDMAPLANE_SOCKET="$sock_a" timeout --kill-after=5 90 \
  "$conformance_bin" --port-events >"$events_out" 2>&1 &
events_pid=$!
E2E_HELPER_PIDS+=("$events_pid")
wait_line "$events_out" "$events_pid" ready "conformance --port-events"
e2e_check_clean_stop b
wait_done "$fatal_pid" "$fatal_out" "conformance --device-fatal"
e2e_log "IBV_EVENT_DEVICE_FATAL came when daemon b stopped"
# With B gone, A's data port has no peer: its port is DOWN.
down_status=0
RDMAPLANE_SOCKET="$sock_a" timeout --kill-after=5 30 \
  "$conformance_bin" --port-down >"$E2E_TMP/port_down.out" 2>&1 ||
  down_status=$?
sed 's/^/    /' "$E2E_TMP/port_down.out"
if [[ $down_status -ne 0 ]]; then
  e2e_fail "conformance --port-down exited with status $down_status"
fi
wait_line "$events_out" "$events_pid" down "conformance --port-events"
e2e_log "IBV_EVENT_PORT_ERR came on A's device when daemon b stopped"
e2e_start_daemon b "$sock_b" "rdp-verbs-$$-b" \
  "$daemon_bin" --socket="$sock_b" --file_prefix="rdp-verbs-$$-b" \
  --port="net_memif0,role=client,socket=$E2E_TMP/memif.sock" --ip="$ip_b" \
  --log_level=debug || e2e_fail "daemon b did not start again"
wait_done "$events_pid" "$events_out" "conformance --port-events"
e2e_log "IBV_EVENT_PORT_ACTIVE came on A's device when daemon b was back"
e2e_check_clean_stop b
e2e_check_clean_stop a
e2e_log "ok in $(e2e_since "$test_start") s"
