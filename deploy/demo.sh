#!/usr/bin/env bash
# The main job on an embedded default: no NIC, no root, no hugepages needed.
#
# Builds rdmaplaned and a client, starts two daemons joined by a memif link
# (DPDK, between processes on this machine), and runs one client that
# registers memory with both, connects across the daemons (ARP and the IB
# connection manager on the link), writes 1 MiB each way and reads it back
# each way with every byte verified. Prints a short summary whose last line
# starts with "demo: ok", and leaves no process behind.
#
#   deploy/demo.sh                              # defaults
#   deploy/demo.sh --bytes=4194304 --faults=loss=0.05,seed=7
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
deploy/setup.sh
echo "demo: building (the first time takes a few minutes)" >&2
bazel build -c opt --ui_event_filters=-info --noshow_progress \
  //control:rdmaplaned //control:rdmaplanectl //api/example:rdmaplane_transfer
exec deploy/demo_run.sh bazel-bin/control/rdmaplaned \
  bazel-bin/api/example/rdmaplane_transfer bazel-bin/control/rdmaplanectl "$@"
