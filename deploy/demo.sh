#!/usr/bin/env bash
# The main job on an embedded default: no NIC, no root, no hugepages needed.
#
# Today it runs the RoCEv2 RC transport between two endpoints joined by a
# simulated lossy link (see dataplane/rc/sim_demo.cc): each side writes 1 MiB
# into the other's registered memory and reads it back, every byte verified.
# The last line starts with "demo: ok" when everything arrived intact.
#
#   deploy/demo.sh                       # defaults
#   deploy/demo.sh --bytes=4194304 --faults=loss=0.05,delay_us=20
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
deploy/setup.sh
bazel build -c opt --ui_event_filters=-info --noshow_progress //dataplane/rc:sim_demo
exec bazel-bin/dataplane/rc/sim_demo "$@"
