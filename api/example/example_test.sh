#!/usr/bin/env bash
# Starts rdmaplaned on a private socket, runs the C example against it and
# checks that the example's last line is "example: ok". The daemon is always
# stopped (SIGTERM, then SIGKILL after a bound) and its socket removed. Given
# docs/api.md, also checks that its excerpt of the example is still verbatim.
#
#   example_test.sh RDMAPLANED RDMAPLANE_EXAMPLE EXAMPLE_SOURCE [API_DOC]
set -euo pipefail

daemon_bin="$1"
example_bin="$2"
example_src="$3"
api_doc="${4:-}"
tmp="${TEST_TMPDIR:-/tmp}"
# Unix socket paths are limited to 108 bytes, which TEST_TMPDIR can exceed.
sock="/tmp/rdp-example-$$.sock"
log="$tmp/rdmaplaned-$$.log"
daemon_pid=""

fail() {
  echo "FAIL: $*" >&2
  if [[ -s $log ]]; then
    echo "--- rdmaplaned log:" >&2
    cat "$log" >&2
  fi
  exit 1
}

# Stops the daemon; returns its exit status (137 when it had to be killed).
stop_daemon() {
  local pid="$daemon_pid" status=0 i
  daemon_pid=""
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do # 5 s
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "rdmaplaned ignored SIGTERM for 5 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" || status=$?
  return "$status"
}

cleanup() {
  stop_daemon || true
  rm -f "$sock"
}
trap cleanup EXIT

[[ -s $example_src ]] || fail "no example source at $example_src"

# --- docs/api.md quotes the example verbatim (when given) --------------------
# Every line of the ```c blocks in its section "11. The complete example"
# must be a line of the program.
if [[ -n $api_doc ]]; then
  excerpt="$tmp/excerpt-$$.txt"
  awk '/^## /{in_section = ($0 ~ /^## 11\. The complete example/)}
       in_section && /^```c$/ {in_code = 1; next}
       in_code && /^```$/ {in_code = 0; next}
       in_code && NF > 0 {print}' "$api_doc" >"$excerpt"
  [[ -s $excerpt ]] || fail "no C excerpt found in section 11 of $api_doc"
  while IFS= read -r line; do
    grep -Fxq -- "$line" "$example_src" ||
      fail "docs/api.md quotes a line the example does not have: $line"
  done <"$excerpt"
fi

# --- the example against a real daemon --------------------------------------
rm -f "$sock"
"$daemon_bin" --socket="$sock" 2>"$log" &
daemon_pid=$!

# Wait (at most 5 s) for the socket to appear.
for ((i = 0; i < 50; i++)); do
  [[ -S $sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || fail "rdmaplaned exited during start-up"
  sleep 0.1
done
[[ -S $sock ]] || fail "rdmaplaned did not create $sock within 5 s"

status=0
# Bounded: a socket whose owner never answers must not hang the test.
out="$(timeout 30 "$example_bin" "$sock")" || status=$?
printf '%s\n' "$out"
if ((status != 0)); then
  fail "rdmaplane_example exited with status $status"
fi
last="$(printf '%s\n' "$out" | tail -n 1)"
if [[ $last != "example: ok" ]]; then
  fail "the example's last line was: $last"
fi

# Without a daemon the example fails cleanly (non-zero exit) and names the
# cause.
missing="/tmp/rdp-example-missing-$$.sock"
err="$tmp/missing-$$.err"
status=0
timeout 30 "$example_bin" "$missing" >/dev/null 2>"$err" || status=$?
if ((status == 0)); then
  fail "the example succeeded without a daemon"
fi
grep -q "daemon unreachable" "$err" ||
  fail "no clear error without a daemon: $(cat "$err")"

# A clean shutdown: SIGTERM ends the daemon with status 0.
status=0
stop_daemon || status=$?
if ((status != 0)); then
  fail "rdmaplaned exited with status $status after SIGTERM"
fi
[[ ! -e $sock ]] || fail "rdmaplaned left its socket $sock behind"
echo "example_test: ok"
