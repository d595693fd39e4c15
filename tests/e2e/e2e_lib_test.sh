#!/usr/bin/env bash
# e2e_skip of e2e_lib.sh, the way a shell test that cannot run here ends:
#   1. with XML_OUTPUT_FILE set (as Bazel sets it), it exits 0, prints
#      "SKIPPED: <reason>", and writes a JUnit XML with exactly one test
#      case, which carries <skipped/> with the reason (markup characters
#      escaped), so that deploy/test.sh's parser counts 1 skipped and
#      nothing passed or failed;
#   2. without XML_OUTPUT_FILE it exits 0 and prints the same line;
#   3. called after e2e_install_traps, the EXIT trap still cleans up (the
#      test's private folder is gone) and the status stays 0;
#   4. e2e_skip_round and e2e_finish: a test that passed with two optional
#      rounds skipped writes one passed case and two skipped ones, each
#      with its reason; with no round skipped it writes nothing (Bazel's own
#      XML stands).
#
#   e2e_lib_test.sh E2E_LIB
#
# The scripts given to `bash -c` below expand their own arguments.
# shellcheck disable=SC2016
set -euo pipefail

lib="$1"
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/e2e-lib-test.XXXXXX")"
trap 'rm -rf -- "$tmp"' EXIT

fail() {
  echo "FAIL: e2e_lib_test: $*" >&2
  exit 1
}

reason='needs <root> & "namespaces"'

# --- 1. Under Bazel: the XML ------------------------------------------------
xml="$tmp/test.xml"
status=0
out="$(XML_OUTPUT_FILE="$xml" TEST_TARGET=//tests/e2e:some_test bash -c '
  set -euo pipefail
  E2E_NAME=some_test
  source "$1"
  e2e_skip "$2"
  echo "still running after e2e_skip"
' _ "$lib" "$reason")" || status=$?
[[ $status -eq 0 ]] || fail "e2e_skip exited with status $status"
[[ $out == "SKIPPED: $reason" ]] || fail "e2e_skip printed: $out"
[[ -s $xml ]] || fail "e2e_skip wrote no XML to XML_OUTPUT_FILE"
# The counting rules of deploy/test.sh's parser.
/usr/bin/python3 - "$xml" "$reason" <<'PY' || fail "the XML: $(cat "$xml")"
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
cases = list(root.iter("testcase"))
assert len(cases) == 1, f"{len(cases)} test cases"
case = cases[0]
children = {child.tag for child in case}
assert "failure" not in children and "error" not in children, children
assert "skipped" in children, children
assert case.get("name") == "//tests/e2e:some_test", case.get("name")
assert case.find("skipped").get("message") == sys.argv[2], case.find("skipped").get("message")
print("ok: 1 test case, skipped, reason intact")
PY

# --- 2. Outside Bazel ---------------------------------------------------------
status=0
out="$(env -u XML_OUTPUT_FILE bash -c '
  set -euo pipefail
  source "$1"
  e2e_skip no network here
' _ "$lib")" || status=$?
[[ $status -eq 0 && $out == "SKIPPED: no network here" ]] ||
  fail "without XML_OUTPUT_FILE: status $status, output: $out"
echo "ok: without XML_OUTPUT_FILE"

# --- 3. After the traps: the cleanup runs -------------------------------------
status=0
out="$(XML_OUTPUT_FILE="$tmp/after.xml" bash -c '
  set -euo pipefail
  E2E_NAME=trap_test
  source "$1"
  e2e_install_traps
  TEST_TMPDIR="$2" e2e_make_tmp
  echo "tmp=$E2E_TMP"
  e2e_skip late
' _ "$lib" "$tmp")" || status=$?
[[ $status -eq 0 ]] || fail "e2e_skip after the traps: exit status $status"
private="$(sed -n 's/^tmp=//p' <<<"$out")"
[[ -n $private ]] || fail "no private folder was made: $out"
[[ ! -e $private ]] || fail "the EXIT trap did not remove $private"
grep -q '<skipped message="late"' "$tmp/after.xml" || fail "no skip in $(cat "$tmp/after.xml")"
echo "ok: after e2e_install_traps"
# --- 4. Skipped rounds ---------------------------------------------------------
rounds_xml="$tmp/rounds.xml"
XML_OUTPUT_FILE="$rounds_xml" TEST_TARGET=//x:rounds_test bash -c '
  set -euo pipefail
  E2E_NAME=rounds_test
  source "$1"
  e2e_skip_round "zero copy" "no <hugepages> here"
  e2e_skip_round af_xdp "the driver refused"
  e2e_finish
' _ "$lib" >/dev/null || fail "e2e_finish with skipped rounds failed"
python3 - "$rounds_xml" <<'PY' || fail "the rounds XML is wrong: $(cat "$rounds_xml")"
import sys
import xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
names = [c.get("name") for c in cases]
assert names == ["//x:rounds_test", "//x:rounds_test/zero copy",
                 "//x:rounds_test/af_xdp"], names
assert [c.find("skipped") is not None for c in cases] == [False, True, True]
assert cases[1].find("skipped").get("message") == "no <hugepages> here"
assert cases[2].find("skipped").get("message") == "the driver refused"
print("ok: 1 passed case and 2 skipped rounds, reasons intact")
PY
rm -f "$rounds_xml"
XML_OUTPUT_FILE="$rounds_xml" bash -c '
  set -euo pipefail
  source "$1"
  e2e_finish
' _ "$lib" || fail "e2e_finish without skipped rounds failed"
[[ ! -e $rounds_xml ]] || fail "e2e_finish wrote an XML although no round was skipped"
echo "ok: no skipped round, no XML"
echo "e2e_lib_test: ok"
