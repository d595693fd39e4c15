#!/usr/bin/env bash
# Runs the demo binary with default and with harsh link settings, and with bad
# flags: it must finish with "demo: ok" or, for bad input, a clear error.
set -euo pipefail
demo="$1"

check_ok() {
  local out last
  out="$("$demo" "$@")"
  printf '%s\n' "$out"
  last="$(printf '%s\n' "$out" | tail -n 1)"
  if [[ $last != "demo: ok"* ]]; then
    echo "FAIL: last line was: $last" >&2
    exit 1
  fi
}

check_ok
check_ok --bytes=300000 --mtu=256 --faults=loss=0.1,dup=0.05,reorder=0.05,delay_us=3,seed=5

for bad in --bytes=0 --mtu=1000 --faults=loss=7 --faults=nonsense=1; do
  if "$demo" "$bad" >/dev/null 2>"$TEST_TMPDIR/err"; then
    echo "FAIL: $bad was accepted" >&2
    exit 1
  fi
  if ! grep -q "sim_demo:" "$TEST_TMPDIR/err"; then
    echo "FAIL: $bad gave no clear error" >&2
    exit 1
  fi
done
echo "demo_test: ok"
