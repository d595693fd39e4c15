#!/usr/bin/env bash
# Installs the Debian 12 packages rdmaplane needs to build, test and run.
#
# Idempotent and silent when everything is already installed, so other scripts
# (deploy/test.sh, CI) can call it unconditionally. When something is missing
# it prints one line per action and keeps apt's own output in a log that is
# shown only if a step fails.
set -euo pipefail

# Every package the build, the tests and the tools around them use. The build
# is offline: Bazel's own dependencies (rules_java, a JDK) and every C++ library
# come from Debian rather than from the network.
PACKAGES=(
  # Build: Bazel 4 from Debian, its rules_java (referenced by WORKSPACE), the
  # JDK it runs on, and the C++ toolchain Bazel autodetects.
  bazel-bootstrap
  bazel-rules-java
  default-jdk-headless
  g++
  pkg-config
  # Libraries wrapped in third_party/BUILD and third_party/dpdk.BUILD.
  libabsl-dev
  libdpdk-dev
  dpdk
  libibverbs-dev
  libisal-dev
  # Verbs front end: perftest and ibverbs-utils (ibv_devinfo, ibv_rc_pingpong)
  # run unmodified over rdmaplane in tests/verbs.
  perftest
  ibverbs-utils
  # ... and the rdma_cm programs (rping, ucmatose, udaddy, cmtime, rstream,
  # riostream) over the front end's rdma_cm device.
  rdmacm-utils
  # librdmacm's headers: tests/verbs/cm_probe.c checks what the rdma_cm man
  # pages promise.
  librdmacm-dev
  # ... and UCX's tools (ucx_info, ucx_perftest) over its verbs transports,
  # and Open MPI (mpirun, and mpicc for tests/mpi) over UCX.
  ucx-utils
  # UCX's headers: tests/verbs/ucp_sockaddr.c connects through UCX's
  # rdma_cm connection manager.
  libucx-dev
  openmpi-bin
  libopenmpi-dev
  # rdma-core's own test suite (pyverbs, with its tests in
  # /usr/share/doc/rdma-core/tests): tests/verbs/rdma_core_tests_test.sh.
  python3-pyverbs
  # Tests and micro-benchmarks.
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  # Coverage-guided fuzzing (deploy/fuzz.sh, the fuzz stage of test.sh):
  # clang 14 with libFuzzer and the sanitizer runtimes.
  clang
  libclang-rt-14-dev
  # Test helpers: Debian's python3 runs the test-result parser in deploy/test.sh,
  # scapy cross-checks RoCEv2 framing and ICRC, tshark decodes captures.
  python3
  python3-scapy
  tshark
  # deploy_files_test: the Kubernetes manifest (PyYAML), the unit file
  # (systemd-analyze) and the shell scripts (shellcheck).
  python3-yaml
  systemd
  shellcheck
  # //tests/man:man_test renders every manual page with groff -ww and fails
  # on a warning; deploy/install.sh compresses the pages with gzip
  # (essential).
  groff
  # deploy/package.sh builds the .deb with dpkg-deb and dpkg-shlibdeps
  # (dpkg-dev) and checks it with lintian; //deploy:package_test installs
  # it and runs rdmaplane-run ibv_devinfo (ibverbs-utils, above).
  dpkg-dev
  lintian
  # Running and measuring: network namespaces/veth for multi-host tests, plots
  # for the benchmark report, perf for its profile of the engine.
  iproute2
  gnuplot-nox
  linux-perf
)

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# Prints the packages from PACKAGES that are not fully installed. dpkg-query
# exits non-zero for packages it has never heard of; those are simply missing.
missing_packages() {
  local installed
  installed="$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null \
    | awk '$2 == "installed" { print $1 }' || true)"
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    if ! grep -qxF -- "$pkg" <<<"$installed"; then
      printf '%s\n' "$pkg"
    fi
  done
}

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script supports Debian 12 only"

mapfile -t MISSING < <(missing_packages)
if [[ ${#MISSING[@]} -eq 0 ]]; then
  exit 0
fi

log "missing packages: ${MISSING[*]}"

# Installing needs root. Use sudo only when not already root (CI runs as root
# and may not have sudo at all); without a terminal, sudo must not prompt.
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 \
    || die "not root and sudo is not installed; run as root: apt-get install ${MISSING[*]}"
  if [[ -t 0 ]]; then
    SUDO=(sudo)
  else
    SUDO=(sudo -n)
  fi
fi

# apt's output goes to a log; it is printed only when a step fails.
APT_LOG="$(mktemp -t rdmaplane-setup.XXXXXX.log)"
trap 'rm -f "$APT_LOG"' EXIT

run_logged() {
  local what="$1"
  shift
  log "$what"
  if ! "$@" >>"$APT_LOG" 2>&1; then
    printf 'setup: error: %s failed; last lines of its output:\n' "$what" >&2
    tail -n 40 "$APT_LOG" >&2
    exit 1
  fi
}

# Never let debconf ask anything: no terminal in CI, and nobody to answer.
APT_ENV=(env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a)
# Wait for another apt/dpkg run (e.g. unattended-upgrades on a fresh VM)
# instead of failing on its lock.
APT_OPTS=(-y -q -o DPkg::Lock::Timeout=600)

# tshark's package asks whether non-root users may capture. Answer "no" in
# advance so the install never stops at that question.
for pkg in "${MISSING[@]}"; do
  if [[ $pkg == tshark ]]; then
    run_logged "preseeding wireshark-common/install-setuid=false" \
      "${SUDO[@]}" debconf-set-selections <<<"wireshark-common wireshark-common/install-setuid boolean false"
    break
  fi
done

# A fresh machine has empty (or stale) package lists, so refresh them, but only
# when there is something to install.
run_logged "apt-get update" "${SUDO[@]}" "${APT_ENV[@]}" apt-get "${APT_OPTS[@]}" update

# Recommends are installed on purpose (Debian's default): scapy's optional
# layers and DPDK's extra drivers come that way, and developers' machines
# have them too.
run_logged "apt-get install ${MISSING[*]}" \
  "${SUDO[@]}" "${APT_ENV[@]}" apt-get "${APT_OPTS[@]}" install "${MISSING[@]}"

# apt can exit 0 and still leave a package unconfigured; check the result.
mapfile -t STILL_MISSING < <(missing_packages)
if [[ ${#STILL_MISSING[@]} -ne 0 ]]; then
  die "still not installed after apt-get install: ${STILL_MISSING[*]}"
fi
command -v bazel >/dev/null 2>&1 || die "bazel-bootstrap is installed but 'bazel' is not on PATH"

log "all packages installed"
