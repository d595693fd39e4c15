#!/usr/bin/env bash
# A stand-in for `bazel` for demo_test: just enough of it for deploy/demo.sh.
# FAKE_BAZEL_DIR holds its state: server.pid (the "server", a sleeping
# process), calls (one line per call) and bazel-bin (the folder `info
# bazel-bin` names).
#   build ...            starts a server when none runs; fails when
#                        FAKE_BUILD_FAILS is set
#   info ... server_pid  the server's pid (fails without a server)
#   info ... bazel-bin   FAKE_BAZEL_DIR/bazel-bin
#   shutdown             stops the server, if one runs
set -euo pipefail

dir="${FAKE_BAZEL_DIR:?}"
echo "$*" >>"$dir/calls"
running() {
  [[ -s $dir/server.pid ]] && kill -0 "$(cat "$dir/server.pid")" 2>/dev/null
}
case "$1" in
  build)
    if ! running; then
      # Its output off the caller's pipes: it outlives its client, the way a
      # Bazel server does.
      sleep 600 >/dev/null 2>&1 &
      echo $! >"$dir/server.pid"
    fi
    if [[ -n ${FAKE_BUILD_FAILS:-} ]]; then
      echo "ERROR: the stand-in's build fails" >&2
      exit 1
    fi
    ;;
  info)
    running || {
      echo "the stand-in has no server" >&2
      exit 37
    }
    case "${*: -1}" in
      server_pid) cat "$dir/server.pid" ;;
      bazel-bin) echo "$dir/bazel-bin" ;;
      *) exit 2 ;;
    esac
    ;;
  shutdown)
    if running; then kill -TERM "$(cat "$dir/server.pid")"; fi
    ;;
  *) exit 2 ;;
esac
