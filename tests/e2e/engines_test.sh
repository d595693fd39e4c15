#!/usr/bin/env bash
# Engines of daemons with a data port, end to end:
#   1. --engines, --engine_lcores and --burst are checked: bad values exit
#      with status 2 and say why; --check_config shows what would run;
#   2. two daemons joined by memif: A runs its engine pinned to CPU 1 (an
#      EAL lcore, the control thread on CPU 0), B runs two unpinned engines,
#      which keep every CPU the process may use (the EAL pins its main
#      thread to one lcore, which threads started later would inherit);
#      WRITE and READ of 1 B .. 1 MiB between their clients and, inside B
#      (on both of its engines, with --burst=8), every byte checked; both
#      stop cleanly.
# The CPU checks read /proc/PID/task/*/{comm,status}: engine threads are
# named rdp-engine-N. They need two CPUs; with one, part 2 runs unpinned.
#
#   engines_test.sh E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED RDMAPLANECTL RDMAPLANE_TRANSFER" >&2
  exit 2
fi
E2E_NAME=engines_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
E2E_CTL="$3"
transfer_bin="$4"
for bin in "$daemon_bin" "$E2E_CTL" "$transfer_bin"; do
  [[ -x $bin ]] || e2e_fail "no executable at $bin"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

# --- 1. Options ---------------------------------------------------------------

# rejects EXPECTED_TEXT FLAGS...: rdmaplaned --check_config exits with 2 and
# its message contains EXPECTED_TEXT.
rejects() {
  local text="$1" status=0 out
  shift
  out="$("$daemon_bin" --check_config "$@" 2>&1)" || status=$?
  [[ $status -eq 2 ]] ||
    e2e_fail "rdmaplaned $* exited with status $status, not 2: $out"
  [[ $out == *"$text"* ]] ||
    e2e_fail "rdmaplaned $* said '$out', which does not mention '$text'"
  e2e_log "refused as expected: $* ($out)"
}
rejects "--burst must be 1..256" --burst=0
rejects "--burst must be 1..256" --burst=257
rejects "--engines must be 1..32" --engines=33
rejects "CPU numbers" --engine_lcores=1,x
rejects "twice" --engine_lcores=0,0
rejects "--engines=2 but --engine_lcores lists 1" --engines=2 --engine_lcores=0
rejects "not one this process may run on" --engine_lcores=4095
rejects "share CPU 0" --engine_lcores=0 --control_lcore=0 \
  --port=net_ring0 --ip=10.0.0.1

config="$("$daemon_bin" --check_config --engines=3)" ||
  e2e_fail "--check_config --engines=3 failed: $config"
grep -qx 'engines=3' <<<"$config" || e2e_fail "no engines=3 in: $config"
grep -qx 'engine_lcores=(not pinned)' <<<"$config" ||
  e2e_fail "unpinned engines not shown in: $config"
grep -qx 'burst=32' <<<"$config" || e2e_fail "no burst=32 in: $config"
config="$("$daemon_bin" --check_config --engine_lcores=0)" ||
  e2e_fail "--check_config --engine_lcores=0 failed: $config"
grep -qx 'engines=1' <<<"$config" || e2e_fail "no engines=1 in: $config"
grep -qx 'engine_lcores=0' <<<"$config" || e2e_fail "no engine_lcores=0 in: $config"

# --- 2. Two daemons over memif -------------------------------------------------

# thread_cpus PID NAME: the Cpus_allowed_list of PID's thread NAME, or "".
thread_cpus() {
  local pid="$1" name="$2" task comm
  for task in /proc/"$pid"/task/*; do
    comm="$(cat "$task/comm" 2>/dev/null)" || continue
    if [[ $comm == "$name" ]]; then
      sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$task/status"
      return 0
    fi
  done
  echo ""
}

# expect_cpus DAEMON THREAD CPUS: the thread runs on exactly CPUS. The
# socket appears before the engines start (the EAL starts in between), so
# the thread may take a few seconds to show up.
expect_cpus() {
  local name="$1" thread="$2" want="$3" got="" i
  for ((i = 0; i < 100; i++)); do
    got="$(thread_cpus "${E2E_PID[$name]}" "$thread")"
    [[ -z $got ]] || break
    sleep 0.1
  done
  [[ -n $got ]] || e2e_fail "daemon $name has no thread $thread after 10 s"
  [[ $got == "$want" ]] ||
    e2e_fail "daemon $name: thread $thread may run on CPUs '$got', not '$want'"
  e2e_log "daemon $name: $thread runs on CPUs $got"
}

own_cpus="$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
pin_a=()
if (($(nproc) >= 2)); then
  pin_a=(--engine_lcores=1 --control_lcore=0)
else
  e2e_log "one CPU only: daemon A's engine runs unpinned"
fi

sock_a="$E2E_TMP/a.sock" sock_b="$E2E_TMP/b.sock" memif="$E2E_TMP/memif.sock"
prefix_a="rdp-e2e-$$-ea" prefix_b="rdp-e2e-$$-eb"
common=(--mtu=1024 --log_level=debug --poll_mode=adaptive)
e2e_start_daemon a "$sock_a" "$prefix_a" \
  "$daemon_bin" --socket="$sock_a" --file_prefix="$prefix_a" \
  --port="net_memif0,role=server,socket=$memif" --ip=10.0.0.1 \
  "${pin_a[@]}" "${common[@]}" || e2e_fail "daemon a did not start"
e2e_start_daemon b "$sock_b" "$prefix_b" \
  "$daemon_bin" --socket="$sock_b" --file_prefix="$prefix_b" \
  --port="net_memif0,role=client,socket=$memif" --ip=10.0.0.2 \
  --engines=2 --burst=8 "${common[@]}" || e2e_fail "daemon b did not start"

if ((${#pin_a[@]} > 0)); then
  expect_cpus a rdp-engine-0 1
else
  expect_cpus a rdp-engine-0 "$own_cpus"
fi
expect_cpus b rdp-engine-0 "$own_cpus"
expect_cpus b rdp-engine-1 "$own_cpus"
status="$("$E2E_CTL" --socket="$sock_b" --json status)" ||
  e2e_fail "rdmaplanectl status of b failed: $status"
[[ $status == *'"engines":2'* ]] || e2e_fail "daemon b does not report 2 engines: $status"

# Between the daemons (engine 0 of each owns the port), then inside B, whose
# four connections go to both of its engines.
e2e_transfer across 180 "$transfer_bin" \
  --listen_socket="$sock_a" --connect_socket="$sock_b" --peer=10.0.0.1 \
  --sizes=1,4096,65536,1048576 --depth=8 --connections=2 --clients=2 \
  --timeout_s=60
e2e_transfer inside-b 120 "$transfer_bin" \
  --listen_socket="$sock_b" --connect_socket="$sock_b" \
  --sizes=1,4096,65536,1048576 --depth=8 --connections=2 --clients=2 \
  --timeout_s=60
e2e_counters b
e2e_counter b connections
((E2E_VALUE == 0)) || e2e_fail "daemon b still holds $E2E_VALUE connections"

e2e_check_clean_stop b
e2e_check_clean_stop a
e2e_log "ok in $(e2e_since "$test_start") s"
