#!/usr/bin/env bash
# Debian's Open MPI, with its UCX layer (--mca pml ucx), over rdmaplane:
# ranks on two rdmaplaned daemons joined by memif (A, 10.9.0.1, and B,
# 10.9.0.2), each rank's libibverbs calls served through
# librdmaplane-verbs.so (LD_PRELOAD) by the daemon its RDMAPLANE_SOCKET
# names, UCX restricted to rdmaplane0 (rc_verbs, ud_verbs for its wire-up):
#   1. mpi_check pingpong, 2 ranks, rank 0 on A and rank 1 on B: 8 B to
#      4 MiB, every byte checked (tests/mpi/mpi_check.c).
#   2. mpi_check collectives, 4 ranks, two on each daemon: MPI_Allreduce,
#      MPI_Alltoall and MPI_Bcast, every result checked on every rank.
# Each: mpirun exits 0, rank 0 prints "mpi_check: ok", and UCX's log says
# the ranks' endpoints run over rc_verbs on rdmaplane0:1. Then the daemons
# stop cleanly.
#
#   mpi_test.sh E2E_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO MPI_CHECK_C
#
# openmpi-bin and libopenmpi-dev (mpirun, mpicc) are Debian's
# (deploy/setup.sh installs them); mpi_check.c is built here with mpicc.
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 E2E_LIB RDMAPLANED LIBRDMAPLANE_VERBS_SO MPI_CHECK_C" >&2
  exit 2
fi
E2E_NAME=mpi_test
# shellcheck source=tests/e2e/e2e_lib.sh
source "$1"
daemon_bin="$2"
[[ -x $daemon_bin ]] || e2e_fail "no executable at $daemon_bin"
[[ -f $3 ]] || e2e_fail "no file at $3"
[[ -f $4 ]] || e2e_fail "no file at $4"
verbs_so="$(realpath "$3")"
for tool in mpirun mpicc ibv_devinfo; do
  command -v "$tool" >/dev/null ||
    e2e_fail "$tool is not installed (deploy/setup.sh installs openmpi-bin, libopenmpi-dev and ibverbs-utils)"
done

e2e_install_traps
e2e_make_tmp
e2e_log "working in $E2E_TMP"
test_start="$(e2e_now)"

check="$E2E_TMP/mpi_check"
mpicc -O2 -Wall -Werror -o "$check" "$4" || e2e_fail "mpicc could not build $4"

e2e_start_memif_pair "$daemon_bin" mpi
sock_a="$E2E_SOCK_A" sock_b="$E2E_SOCK_B"
e2e_wait_port_active a "$sock_a" "$verbs_so"
e2e_wait_port_active b "$sock_b" "$verbs_so"

# job LABEL MODE RANKS_PER_DAEMON: mpirun of mpi_check MODE with
# RANKS_PER_DAEMON ranks on daemon A, then as many on B (one application
# context each, so that each has its own RDMAPLANE_SOCKET).
job() {
  local label="$1" mode="$2" per="$3"
  local out="$E2E_TMP/$label.out" status=0 start
  start="$(e2e_now)"
  e2e_log "job $label: mpirun, $per rank(s) on each daemon: mpi_check $mode"
  # Each application context gets its environment through env: mpirun's
  # -x does not reach every context of an MPMD command line. The process
  # group of timeout gets the cleanup's signal: mpirun passes it on to the
  # ranks.
  local rank_env=(LD_PRELOAD="$verbs_so" RDMAPLANE_VERBS_DEBUG=1
    UCX_TLS=rc_verbs,ud_verbs:aux UCX_NET_DEVICES=rdmaplane0:1
    UCX_LOG_LEVEL=info)
  timeout --kill-after=10 240 mpirun --allow-run-as-root --oversubscribe \
    --mca pml ucx --bind-to none \
    -np "$per" env RDMAPLANE_SOCKET="$sock_a" "${rank_env[@]}" "$check" "$mode" : \
    -np "$per" env RDMAPLANE_SOCKET="$sock_b" "${rank_env[@]}" "$check" "$mode" \
    >"$out" 2>&1 || status=$?
  if [[ $status -ne 0 ]] || ! grep -qx 'mpi_check: ok' "$out"; then
    sed 's/^/    /' "$out" >&2
    e2e_fail "job $label: mpirun exit status $status (124/137: timed out), or no 'mpi_check: ok'"
  fi
  if ! grep -qE 'ep_cfg\[[0-9]+\]: .*\(rc_verbs/rdmaplane0:1\)' "$out"; then
    sed 's/^/    /' "$out" >&2
    e2e_fail "job $label: no rank's endpoint runs over rc_verbs on rdmaplane0:1"
  fi
  grep -E '^(pingpong|collectives|mpi_check)' "$out" | sed 's/^/    /'
  e2e_log "job $label ok in $(e2e_since "$start") s"
}

job pingpong pingpong 1
job collectives collectives 2

e2e_check_clean_stop b
e2e_check_clean_stop a
e2e_log "ok in $(e2e_since "$test_start") s"
e2e_finish
