#!/usr/bin/env bash
# The main job on an embedded default: no NIC, no root, no hugepages needed.
#
# Builds rdmaplaned and a client, starts two daemons joined by a memif link
# (DPDK, between processes on this machine), and runs one client that
# registers memory with both, connects across the daemons (ARP and the IB
# connection manager on the link), writes 1 MiB each way and reads it back
# each way with every byte verified. Prints a short summary whose last line
# starts with "demo: ok", and leaves no process behind: not the daemons, and
# not the Bazel server its build started (one that already ran before the
# demo is left running).
#
#   deploy/demo.sh                              # defaults
#   deploy/demo.sh --bytes=4194304 --faults=loss=0.05,seed=7
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# start_ticks PID: when the process started, in clock ticks since boot
# (field 22 of /proc/PID/stat, counted after the command name, which may
# hold blanks and parentheses).
start_ticks() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  local fields
  read -r -a fields <<<"$stat"
  echo "${fields[19]}"
}

# A Bazel build leaves its server running (for hours) to serve the next
# command quickly. This script's own start time tells a server that the
# build started (younger than this script: strictly, since setup runs in
# between; one started in the same clock tick ran before it) from one that
# ran before it: only the first is shut down, whether the demo succeeds or
# fails. Nothing
# here asks Bazel anything before the build, so no server is started just
# to find out.
demo_ticks="$(start_ticks $$)"
built=false
stop_bazel_server() {
  local status=$? pid ticks
  trap - EXIT
  if [[ $built == true ]] && pid="$(bazel info server_pid 2>/dev/null)" &&
    [[ $pid =~ ^[0-9]+$ ]] && ticks="$(start_ticks "$pid")" &&
    ((ticks > demo_ticks)); then
    bazel shutdown 2>/dev/null || echo "demo: could not stop the Bazel server (pid $pid)" >&2
  fi
  exit "$status"
}
trap stop_bazel_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

deploy/setup.sh
echo "demo: building (the first time takes a few minutes)" >&2
built=true
bazel build -c opt --ui_event_filters=-info --noshow_progress \
  //control:rdmaplaned //control:rdmaplanectl //api/example:rdmaplane_transfer
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
deploy/demo_run.sh "$bin/control/rdmaplaned" \
  "$bin/api/example/rdmaplane_transfer" "$bin/control/rdmaplanectl" "$@"
