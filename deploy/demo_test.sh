#!/usr/bin/env bash
# Runs the demo the way deploy/demo.sh does (two daemons over memif, one
# client), by default and with a lossy link, and with bad arguments: it must
# end with "demo: ok", or for bad input exit 2 with a clear error, and leave
# no daemon behind.
set -euo pipefail
run="$1"
daemon="$2"
transfer="$3"
ctl="$4"

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
echo "demo_test: ok"
