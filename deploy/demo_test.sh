#!/usr/bin/env bash
# Runs the demo the way deploy/demo.sh does (two daemons over memif, one
# client), by default and with a lossy link, and with bad arguments: it must
# end with "demo: ok", or for bad input exit 2 with a clear error, and leave
# no daemon behind. Then deploy/demo.sh itself, with a stand-in for `bazel`
# on PATH (fake_bazel.sh: its build starts a stand-in server process, and
# `info` names that server and a folder with this test's binaries): the
# demo must stop the server its build started, after a success and after a
# failed build, and leave running one that ran before it.
#
#   demo_test.sh DEMO_RUN RDMAPLANED RDMAPLANE_TRANSFER RDMAPLANECTL DEMO_SH
#       FAKE_BAZEL
set -euo pipefail
run="$1"
daemon="$2"
transfer="$3"
ctl="$4"
demo="$5"
fake_bazel="$6"

check_ok() {
  local out last
  if ! out="$("$run" "$daemon" "$transfer" "$ctl" "$@")"; then
    printf '%s\n' "$out"
    echo "FAIL: demo exited non-zero with $*" >&2
    exit 1
  fi
  printf '%s\n' "$out"
  last="$(printf '%s\n' "$out" | tail -n 1)"
  if [[ $last != "demo: ok"* ]]; then
    echo "FAIL: last line was: $last" >&2
    exit 1
  fi
}

check_ok
check_ok --bytes=300000 --faults=loss=0.05,dup=0.01,reorder=0.01,seed=5

for bad in --bytes=0 --bytes=99999999 --colour=red; do
  rc=0
  "$run" "$daemon" "$transfer" "$ctl" "$bad" >/dev/null 2>"$TEST_TMPDIR/err" || rc=$?
  if [[ $rc -ne 2 ]]; then
    echo "FAIL: $bad: exit status $rc, expected 2" >&2
    exit 1
  fi
  if ! grep -q "demo:" "$TEST_TMPDIR/err"; then
    echo "FAIL: $bad gave no clear error" >&2
    exit 1
  fi
done
# A bad fault spec reaches the daemons, which refuse to start: a failure with
# the daemon's reason, not a hang.
rc=0
out="$("$run" "$daemon" "$transfer" "$ctl" --faults=nonsense=1 2>/dev/null)" || rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "port_faults" <<<"$out"; then
  printf '%s\n' "$out"
  echo "FAIL: a bad fault spec gave status $rc without the daemon's reason" >&2
  exit 1
fi
if pgrep -f "rdmaplane-demo-" >/dev/null; then
  echo "FAIL: a demo daemon is still running" >&2
  exit 1
fi

# --- deploy/demo.sh and the Bazel server -----------------------------------
fake="$(mktemp -d "${TEST_TMPDIR:-/tmp}/demo-bazel.XXXXXX")"
export FAKE_BAZEL_DIR="$fake"
servers=() # every stand-in server this test saw, ended at exit
cleanup() {
  local pid
  for pid in "${servers[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$fake"
}
trap cleanup EXIT
mkdir -p "$fake/bin" "$fake/bazel-bin/control" "$fake/bazel-bin/api/example"
ln -s "$(realpath "$fake_bazel")" "$fake/bin/bazel"
ln -s "$(realpath "$daemon")" "$fake/bazel-bin/control/rdmaplaned"
ln -s "$(realpath "$ctl")" "$fake/bazel-bin/control/rdmaplanectl"
ln -s "$(realpath "$transfer")" "$fake/bazel-bin/api/example/rdmaplane_transfer"

# demo_sh EXPECTED_STATUS [FLAGS...]: deploy/demo.sh with the stand-in for
# bazel; sets SERVER to the pid of the server that ran during the demo.
demo_sh() {
  local expected="$1" rc=0 out
  shift
  : >"$fake/calls"
  out="$(PATH="$fake/bin:$PATH" "$demo" "$@" 2>&1)" || rc=$?
  SERVER="$(cat "$fake/server.pid")"
  servers+=("$SERVER")
  if [[ $rc -ne $expected ]]; then
    printf '%s\n' "$out"
    echo "FAIL: deploy/demo.sh $* exited with $rc, not $expected" >&2
    exit 1
  fi
  if [[ $expected -eq 0 && $(tail -n 1 <<<"$out") != "demo: ok"* ]]; then
    printf '%s\n' "$out"
    echo "FAIL: deploy/demo.sh $*: the last line is not 'demo: ok'" >&2
    exit 1
  fi
}
# stopped: the demo called `bazel shutdown` and SERVER ended within 5 s.
stopped() {
  local i
  grep -qx shutdown "$fake/calls" || return 1
  for ((i = 0; i < 50; i++)); do
    kill -0 "$SERVER" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

# No server before: the demo stops the one its build started.
rm -f "$fake/server.pid"
demo_sh 0 --bytes=65536
stopped || {
  cat "$fake/calls"
  echo "FAIL: the Bazel server the demo's build started (pid $SERVER) still runs" >&2
  exit 1
}
echo "demo.sh: stopped the Bazel server its build started"

# A server ran before: the demo leaves it running.
sleep 600 >/dev/null 2>&1 &
before=$!
servers+=("$before")
echo "$before" >"$fake/server.pid"
demo_sh 0 --bytes=65536
[[ $SERVER == "$before" ]] || { echo "FAIL: the stand-in replaced the server" >&2; exit 1; }
if grep -qx shutdown "$fake/calls" || ! kill -0 "$before" 2>/dev/null; then
  cat "$fake/calls"
  echo "FAIL: deploy/demo.sh stopped a Bazel server that ran before it" >&2
  exit 1
fi
echo "demo.sh: left the Bazel server that ran before it running"
kill -KILL "$before"
wait "$before" 2>/dev/null || true

# A failed build: the demo fails, and still stops the server.
rm -f "$fake/server.pid"
FAKE_BUILD_FAILS=1 demo_sh 1
stopped || {
  cat "$fake/calls"
  echo "FAIL: after a failed build the Bazel server (pid $SERVER) still runs" >&2
  exit 1
}
echo "demo.sh: stopped the Bazel server after a failed build"
if pgrep -f "rdmaplane-demo-" >/dev/null; then
  echo "FAIL: a demo daemon is still running" >&2
  exit 1
fi
echo "demo_test: ok"
