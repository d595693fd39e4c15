#!/usr/bin/env bash
# rdmaplane_transfer's split mode against one real rdmaplaned: a server
# (--listen --once) in the background and a client (--connect --local) with
# sessions on the same daemon, so the RDMA connection stays inside it while
# the descriptor and the verdicts cross a real TCP connection. Both must end
# with "transfer: ok". Then the failures: a client whose service the server
# does not serve fails, and so does the server, each with its reason; a
# client against a TCP port nobody serves fails fast; a client without
# --peer or --local is a usage error. Every process is bounded, and the
# daemon is always stopped and its socket removed.
#
#   transfer_split_test.sh RDMAPLANED RDMAPLANE_TRANSFER
set -euo pipefail

daemon_bin="$1"
transfer_bin="$2"
tmp="${TEST_TMPDIR:-/tmp}"
# Unix socket paths are limited to 108 bytes, which TEST_TMPDIR can exceed.
sock="/tmp/rdp-split-$$.sock"
log="$tmp/rdmaplaned-$$.log"
service="split-test"
daemon_pid=""
server_pid=""

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$tmp"/server.out "$tmp"/server.err "$tmp"/client.err "$log"; do
    if [[ -s $f ]]; then
      echo "--- $f:" >&2
      cat "$f" >&2
    fi
  done
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
  if [[ -n $server_pid ]]; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  stop_daemon || true
  rm -f "$sock"
}
trap cleanup EXIT

# Starts a --once server for $service in the background; sets server_pid
# and port (the out-of-band TCP port it printed).
start_server() {
  : >"$tmp/server.out"
  : >"$tmp/server.err"
  timeout 30 "$transfer_bin" --listen="$service" --socket="$sock" --once \
    --oob_port=0 --bytes=1048576 --timeout_s=10 \
    >"$tmp/server.out" 2>"$tmp/server.err" &
  server_pid=$!
  port=""
  for ((i = 0; i < 100; i++)); do # 10 s
    port="$(sed -n 's/.*out-of-band TCP port \([0-9][0-9]*\).*/\1/p' \
      "$tmp/server.err")"
    [[ -n $port ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited during start-up"
    sleep 0.1
  done
  fail "the server named no out-of-band port within 10 s"
}

# Waits for the server; sets server_status.
wait_server() {
  server_status=0
  wait "$server_pid" || server_status=$?
  server_pid=""
}

# --- the daemon -----------------------------------------------------------
rm -f "$sock"
"$daemon_bin" --socket="$sock" 2>"$log" &
daemon_pid=$!
for ((i = 0; i < 50; i++)); do # 5 s
  [[ -S $sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || fail "rdmaplaned exited during start-up"
  sleep 0.1
done
[[ -S $sock ]] || fail "rdmaplaned did not create $sock within 5 s"

# --- a transfer: server and client both say ok ----------------------------
start_server
status=0
out="$(timeout 30 "$transfer_bin" --connect="$service" --local \
  --socket="$sock" --oob="127.0.0.1:$port" --sizes=1,4096,65536,524288 \
  --depth=4 --timeout_s=10 2>"$tmp/client.err")" || status=$?
printf 'client: %s\n' "$out"
((status == 0)) || fail "the client exited with status $status"
last="$(printf '%s\n' "$out" | tail -n 1)"
[[ $last == "transfer: ok: "*" the server found all 524288 written bytes in place" ]] ||
  fail "the client's last line was: $last"
for size in 1 4096 65536 524288; do
  grep -q "transfer: $size-byte requests, depth 4: .* ok" "$tmp/client.err" ||
    fail "the client reported no $size-byte requests"
done
wait_server
printf 'server: %s\n' "$(tail -n 1 "$tmp/server.out")"
((server_status == 0)) || fail "the server exited with status $server_status"
last="$(tail -n 1 "$tmp/server.out")"
[[ $last == "transfer: ok: client 127.0.0.1:"*": its 524288 written bytes landed, the rest is unchanged" ]] ||
  fail "the server's last line was: $last"

# --- a client for another service: both fail, and say why ---------------
start_server
status=0
out="$(timeout 30 "$transfer_bin" --connect=other-service --local \
  --socket="$sock" --oob="127.0.0.1:$port" --timeout_s=10 \
  2>"$tmp/client.err")" || status=$?
((status == 1)) || fail "a client for another service exited with $status"
[[ $out == "transfer: FAILED: the server serves '$service', not 'other-service'" ]] ||
  fail "a client for another service said: $out"
wait_server
((server_status == 1)) ||
  fail "the server exited with $server_status after a failed client"
last="$(tail -n 1 "$tmp/server.out")"
[[ $last == "transfer: FAILED: client 127.0.0.1:"*": the client failed: the server serves"* ]] ||
  fail "after a failed client the server said: $last"

# --- no server on the port: a fast, clear failure -------------------------
# The last server has exited, so nobody serves its port any more.
status=0
start=$SECONDS
out="$(timeout 30 "$transfer_bin" --connect="$service" --local \
  --socket="$sock" --oob="127.0.0.1:$port" --timeout_s=10 \
  2>"$tmp/client.err")" || status=$?
((status == 1)) || fail "a client without a server exited with $status"
[[ $out == "transfer: FAILED: no rdmaplane_transfer server at 127.0.0.1:$port (connection refused)" ]] ||
  fail "a client without a server said: $out"
((SECONDS - start < 5)) ||
  fail "a client without a server took $((SECONDS - start)) s to fail"

# --- usage errors exit 2 --------------------------------------------------
status=0
timeout 10 "$transfer_bin" --connect="$service" --socket="$sock" \
  >/dev/null 2>"$tmp/client.err" || status=$?
((status == 2)) || fail "a client without --peer or --local exited with $status"
grep -q -- "--peer=IP" "$tmp/client.err" ||
  fail "no usage message without --peer: $(cat "$tmp/client.err")"

status=0
stop_daemon || status=$?
((status == 0)) || fail "rdmaplaned exited with status $status after SIGTERM"
echo "transfer_split_test: ok"
