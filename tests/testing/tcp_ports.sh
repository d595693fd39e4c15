# shellcheck shell=bash
# Loopback TCP ports for tools that meet over their own socket, as perftest's
# two ends do (tests/verbs/perftest_test.sh, bench/compare_run.sh). Sourced;
# defines functions only.

# A TCP port nobody listens on now (the kernel's choice of a free one).
free_tcp_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# tcp_listening PORT: 0 when a socket listens on PORT (IPv4 or IPv6), read
# from /proc/net: without connecting, since a perftest server takes the
# first connection as its peer's.
tcp_listening() {
  local hex
  hex="$(printf '%04X' "$1")"
  awk -v port=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == port { found = 1 }
    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# wait_listening PORT PID: waits up to 10 s for a socket listening on PORT
# while process PID lives; 1 when PID died first or the time ran out.
wait_listening() {
  local waited=0
  until tcp_listening "$1"; do
    if ! kill -0 "$2" 2>/dev/null || ((waited >= 100)); then return 1; fi
    sleep 0.1
    waited=$((waited + 1))
  done
}
