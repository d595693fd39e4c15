#!/usr/bin/env bash
# The verbs conformance checks (conformance_test.c) against two rdmaplaned
# daemons joined by memif: A (memif server, 10.9.0.1) and B (memif client,
# 10.9.0.2). One process opens both, rdmaplane0 and rdmaplane1
# (RDMAPLANE_SOCKET=A:B), and connects queue pairs between them; it prints
# PASS or FAIL for every check and fails when one did. Afterwards both
# daemons must still stop cleanly.
#
#   conformance_test.sh E2E_LIB RDMAPLANED CONFORMANCE
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED CONFORMANCE" >&2
  exit 2
fi
E2E_NAME=verbs_conformance_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
conformance_bin="$3"
for bin in "$daemon_bin" "$conformance_bin"; do
  [[ -x $bin ]] || e2e_fail "no executable at $bin"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

e2e_start_memif_pair "$daemon_bin" verbs --log_level=debug
ip_a="$E2E_IP_A" ip_b="$E2E_IP_B" sock_a="$E2E_SOCK_A" sock_b="$E2E_SOCK_B"

out="$E2E_TMP/conformance.out"
status=0
e2e_log "conformance: RDMAPLANE_SOCKET=$sock_a:$sock_b $conformance_bin $ip_a $ip_b"
# RDMAPLANE_VERBS_DEBUG: the front end says on stderr why a call failed.
RDMAPLANE_SOCKET="$sock_a:$sock_b" RDMAPLANE_VERBS_DEBUG=1 \
  timeout --kill-after=5 100 "$conformance_bin" "$ip_a" "$ip_b" >"$out" 2>&1 ||
  status=$?
sed 's/^/    /' "$out"
if [[ $status -eq 124 || $status -eq 137 ]]; then
  e2e_fail "the conformance checks did not finish within 100 s"
fi
summary="$(grep '^conformance: ' "$out" | tail -n 1)" || true
if [[ $status -ne 0 ]]; then
  echo "failed checks:" >&2
  grep '^FAIL: ' "$out" >&2 || true
  e2e_fail "the conformance checks exited with status $status: ${summary:-no summary}"
fi
[[ $summary == "conformance: "*" passed, 0 failed in "* ]] ||
  e2e_fail "the conformance checks exited 0 without a clean summary: ${summary:-none}"
e2e_log "$summary"

# The daemons survived every error the checks provoked.
e2e_check_clean_stop b
e2e_check_clean_stop a
e2e_log "ok in $(e2e_since "$test_start") s"
