#!/bin/bash
# Golden-packet test: frames encoded by the RoCEv2 codec (RC frames and CM
# MADs) must be decoded identically by scapy.contrib.roce (which also
# recomputes every ICRC) and by tshark's InfiniBand dissector, and the ARP
# frames by scapy and tshark's ARP dissectors. See golden_check.py for what
# each checks.
#
# Usage: golden_test.sh FRAMES_TOOL GOLDEN_CHECK_PY [--set=golden|conversation]
# (FRAMES_TOOL writes OUT.pcap OUT.json: the golden frames, or a captured
# conversation of two queue pairs, which need not hold every message kind).
# Needs Debian's /usr/bin/python3 with python3-scapy and /usr/bin/tshark
# (deploy/setup.sh installs both); fails, never skips, when they are missing.
set -euo pipefail

readonly golden_frames="$1"
readonly golden_check="$2"
readonly frame_set="${3:---set=golden}"
readonly python=/usr/bin/python3
readonly tshark=/usr/bin/tshark

die() {
  echo "golden_test: FAIL: $*" >&2
  exit 1
}

work="${TEST_TMPDIR:-$(mktemp -d)}"
# tshark and scapy keep configuration under $HOME, which must be writable.
export HOME="${work}"
export XDG_CONFIG_HOME="${work}/.config"
mkdir -p "${XDG_CONFIG_HOME}"

if [[ ! -x "${python}" ]]; then
  die "${python} not found (install Debian python3; see deploy/setup.sh)"
fi
if ! import_error="$("${python}" -c 'import scapy.contrib.roce' 2>&1)"; then
  die "scapy.contrib.roce not importable by ${python}" \
      "(install python3-scapy; see deploy/setup.sh): ${import_error}"
fi
if [[ ! -x "${tshark}" ]]; then
  die "${tshark} not found (install tshark; see deploy/setup.sh)"
fi

readonly pcap="${work}/golden.pcap"
readonly json="${work}/golden.json"

echo "== encoding golden frames"
"${golden_frames}" "${pcap}" "${json}"
if [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]]; then
  cp "${pcap}" "${json}" "${TEST_UNDECLARED_OUTPUTS_DIR}/"
fi

echo "== scapy: fields, ICRC, byte-exact rebuild"
"${python}" "${golden_check}" scapy "${pcap}" "${json}" "${frame_set}"

echo "== tshark: dissection, fields, expert info"
"${python}" "${golden_check}" tshark "${pcap}" "${json}" "${frame_set}"

echo "PASS"
