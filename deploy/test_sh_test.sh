#!/usr/bin/env bash
# Checks deploy/test.sh's counting, stages and case floors against a
# stand-in for `bazel` that reports as many test cases as it is told, in
# the build event protocol and test.xml files test.sh reads:
#
# - a whole run that reaches every floor passes, and the counts of the four
#   stages (plain, asan, tsan, fuzz) add up in the closing line;
# - a stage that runs fewer cases than its floor fails the run and is named,
#   whichever stage it is (plain, asan, tsan, fuzz); skipped cases do not
#   count as run;
# - named targets run without floors, unless RDMAPLANE_CASE_FLOOR=always;
# - a failed case, a target that failed without a failed case, a fuzz target
#   that crashed, and a bazel that failed with no test to blame each fail
#   the run;
# - a floor file that cannot be read or parsed fails before anything runs;
# - bazel-* links into another output base are removed before //... is
#   loaded, links into Bazel's own are kept;
# - each failed test's target and the lines of its log that say why (FAIL
#   lines) are printed after every stage, right above the closing line;
# - the closing "N passed, M failed" line is always the last line printed.
#
#   test_sh_test.sh TEST_SH CASE_FLOOR
#
# test.sh runs from a copy in a scratch tree whose deploy/setup.sh and
# deploy/fuzz.sh are stand-ins too.
set -uo pipefail

test_sh="$1"
case_floor="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/test_sh_test"
rm -rf "$tmp"
mkdir -p "$tmp/repo/deploy" "$tmp/bin"

failures=0
fail() {
  printf 'FAIL: %s\n' "$*"
  failures=$((failures + 1))
}
pass() { printf 'ok: %s\n' "$*"; }

cp "$test_sh" "$tmp/repo/deploy/test.sh"
cp "$case_floor" "$tmp/repo/deploy/case_floor.txt"
printf '#!/bin/sh\nexit 0\n' >"$tmp/repo/deploy/setup.sh"
# The fuzz stage's stand-in prints what FAKE_FUZZ says ("P F", or "none"
# for no summary line) and fails when any failed.
cat >"$tmp/repo/deploy/fuzz.sh" <<'FUZZ'
#!/usr/bin/env bash
read -r p f <<<"${FAKE_FUZZ:-6 0}"
[[ $p == none ]] && exit 1
echo "fuzz: $p passed, $f failed"
[[ $f -eq 0 ]]
FUZZ
# bazel test ... --build_event_json_file=F [--config=C] ...: one test target
# per stage with FAKE_<STAGE> = "passed failed skipped" cases (default 0 0
# 0) and FAKE_STATUS_<STAGE> as its status (PASSED when no case failed);
# FAKE_RC_<STAGE> sets the exit code (3 when a case failed, else 0).
cat >"$tmp/bin/bazel" <<'BAZEL'
#!/usr/bin/env bash
set -euo pipefail
if [[ $1 == info && $2 == output_base ]]; then
  echo "$FAKE_OUTPUT_BASE"
  exit 0
fi
[[ $1 == test ]] || exit 2
bep="" stage=plain
for arg in "$@"; do
  case "$arg" in
    --build_event_json_file=*) bep="${arg#*=}" ;;
    --config=*) stage="${arg#*=}" ;;
  esac
done
echo "$stage $*" >>"$FAKE_CALLS"
upper="${stage^^}"
counts_var="FAKE_$upper" status_var="FAKE_STATUS_$upper" rc_var="FAKE_RC_$upper"
read -r passed failed skipped <<<"${!counts_var:-0 0 0}"
dir="$(dirname "$bep")/$stage-logs"
mkdir -p "$dir"
xml="$dir/test.xml"
{
  echo '<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="t">'
  for ((i = 0; i < passed; i++)); do echo "<testcase name=\"p$i\"/>"; done
  for ((i = 0; i < failed; i++)); do echo "<testcase name=\"f$i\"><failure message=\"x\"/></testcase>"; done
  for ((i = 0; i < skipped; i++)); do echo "<testcase name=\"s$i\"><skipped/></testcase>"; done
  echo '</testsuite></testsuites>'
} >"$xml"
status="${!status_var:-}"
if [[ -z $status ]]; then
  if [[ $failed -gt 0 ]]; then status=FAILED; else status=PASSED; fi
fi
label="//fake:$stage"
log="$dir/test.log"
{
  echo "fake $stage: starting"
  for ((i = 0; i < 30; i++)); do echo "fake $stage: step $i"; done
  if [[ $status != PASSED ]]; then echo "FAIL: fake $stage: the link is down on daemon a$stage"; fi
  echo "fake $stage: a daemon log line"
} >"$log"
{
  echo "{\"id\":{\"targetConfigured\":{\"label\":\"$label\"}},\"configured\":{\"targetKind\":\"cc_test rule\",\"testSize\":\"SMALL\"}}"
  echo "{\"id\":{\"testResult\":{\"label\":\"$label\",\"run\":1,\"shard\":1,\"attempt\":1}},\"testResult\":{\"status\":\"$status\",\"testActionOutput\":[{\"name\":\"test.xml\",\"uri\":\"file://$xml\"},{\"name\":\"test.log\",\"uri\":\"file://$log\"}]}}"
  echo "{\"id\":{\"testSummary\":{\"label\":\"$label\"}},\"testSummary\":{\"overallStatus\":\"$status\"}}"
} >"$bep"
rc="${!rc_var:-}"
if [[ -z $rc ]]; then
  if [[ $status == PASSED ]]; then rc=0; else rc=3; fi
fi
exit "$rc"
BAZEL
chmod +x "$tmp/repo/deploy/"*.sh "$tmp/bin/bazel"

# run NAME EXPECTED_RC EXPECTED_LAST_LINE [STDERR_REGEX] -- ENV... -- ARGS...:
# runs test.sh with the stand-ins and checks its exit code, its last line
# and, when given, that stderr matches.
run() {
  local name="$1" want_rc="$2" want_last="$3" want_err="$4"
  shift 4
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  local out="$tmp/$name.out" err="$tmp/$name.err" rc=0
  : >"$tmp/calls"
  env PATH="$tmp/bin:$PATH" FAKE_CALLS="$tmp/calls" \
    FAKE_OUTPUT_BASE="$tmp/output_base" "${envs[@]}" \
    "$tmp/repo/deploy/test.sh" "$@" >"$out" 2>"$err" </dev/null || rc=$?
  local last
  last="$(tail -n 1 "$out")"
  if [[ $rc -ne $want_rc ]]; then
    fail "$name: exit code $rc, expected $want_rc (stderr: $(tail -n 3 "$err" | tr '\n' ' '))"
  elif [[ $last != "$want_last" ]]; then
    fail "$name: last line \"$last\", expected \"$want_last\""
  elif [[ -n $want_err ]] && ! grep -Eq -- "$want_err" "$err"; then
    fail "$name: stderr has no line matching /$want_err/: $(tail -n 3 "$err" | tr '\n' ' ')"
  else
    pass "$name"
  fi
}

# The floors of the tree's own file, read back so that the counts below sit
# on either side of them.
floor_of() { awk -v s="$1" '$1 == s { print $2 }' "$case_floor"; }
plain="$(floor_of plain)" asan="$(floor_of asan)" tsan="$(floor_of tsan)"
fuzz="$(floor_of fuzz)"
for v in plain asan tsan fuzz; do
  [[ ${!v} =~ ^[0-9]+$ ]] || fail "case_floor.txt has no floor for $v"
done

met=("FAKE_PLAIN=$plain 0 0" "FAKE_ASAN=$asan 0 0" "FAKE_TSAN=$tsan 0 0"
  "FAKE_FUZZ=$fuzz 0")
total=$((plain + asan + tsan + fuzz))

run whole-run-at-its-floors 0 "$total passed, 0 failed" "" "${met[@]}" --
if grep -q "^asan .*--test_tag_filters=sanitize " "$tmp/calls" &&
  grep -q "^tsan .*--test_tag_filters=sanitize,-single_threaded " "$tmp/calls"; then
  pass "the sanitizer stages run the tests tagged sanitize (single-threaded ones not under tsan)"
else
  fail "the sanitizer stages' calls: $(cat "$tmp/calls")"
fi

for stage in plain asan tsan; do
  upper="${stage^^}"
  floor="${!stage}"
  run "$stage-one-short" 1 "$((total - 1)) passed, 1 failed" \
    "stage $stage: $((floor - 1)) cases ran, fewer than its floor of $floor" \
    "${met[@]}" "FAKE_$upper=$((floor - 1)) 0 0" --
done
run fuzz-one-short 1 "$((total - 1)) passed, 1 failed" \
  "stage fuzz: $((fuzz - 1)) cases ran, fewer than its floor of $fuzz" \
  "${met[@]}" "FAKE_FUZZ=$((fuzz - 1)) 0" --
run skipped-cases-did-not-run 1 "$((total - 2)) passed, 1 failed, 2 skipped" \
  "stage plain: $((plain - 2)) cases ran" \
  "${met[@]}" "FAKE_PLAIN=$((plain - 2)) 0 2" --
run a-failed-case 1 "$((total - 1)) passed, 1 failed" "" \
  "${met[@]}" "FAKE_PLAIN=$((plain - 1)) 1 0" --
# Why a test failed closes the output, above the closing line: the
# digest names the target and quotes the FAIL line of its log, and comes
# after every stage's own lines. A run with no failure has none.
expect_digest() {
  local name="$1" stage="$2" status="$3" err="$tmp/$1.err"
  local head line fail_line last_stage
  head="$(grep -n "^test: the failed tests" "$err" | cut -d: -f1)"
  line="$(grep -n "^//fake:$stage (run 1, shard 1): $status; log " "$err" | cut -d: -f1)"
  fail_line="$(grep -n "^    FAIL: fake $stage: the link is down on daemon a$stage\$" "$err" | cut -d: -f1)"
  last_stage="$(grep -n "^test: stage fuzz" "$err" | tail -n 1 | cut -d: -f1)"
  if [[ -z $head || -z $line || -z $fail_line || -z $last_stage ]]; then
    fail "$name: no digest naming //fake:$stage ($status) with its FAIL line: $(tail -n 5 "$err" | tr '\n' ' ')"
  elif ! ((last_stage < head && head < line && line < fail_line)); then
    fail "$name: the digest is not after the stages (lines $last_stage, $head, $line, $fail_line)"
  elif grep -q "step 3" "$err"; then
    fail "$name: the digest quotes lines that do not say why"
  else
    pass "$name: the digest names //fake:$stage and quotes its FAIL line"
  fi
}
expect_digest a-failed-case plain failed
run a-target-failed-without-a-failed-case 1 "$total passed, 1 failed" \
  "counted as 1 failure" "${met[@]}" "FAKE_STATUS_ASAN=TIMEOUT" --
expect_digest a-target-failed-without-a-failed-case asan timeout
if grep -q "^test: the failed tests" "$tmp/whole-run-at-its-floors.err"; then
  fail "a run with no failure printed a digest of failed tests"
else
  pass "a run with no failure prints no digest"
fi
run a-fuzz-target-crashed 1 "$((total - 1)) passed, 1 failed" "" \
  "${met[@]}" "FAKE_FUZZ=$((fuzz - 1)) 1" --
run fuzz-printed-no-summary 1 "$((total - fuzz)) passed, 1 failed" "" \
  "${met[@]}" "FAKE_FUZZ=none" --
run bazel-failed-with-no-test-to-blame 1 "$total passed, 1 failed" \
  "exited with code 1" "${met[@]}" "FAKE_RC_TSAN=1" --
run named-targets-have-no-floor 0 "3 passed, 0 failed" "" \
  "FAKE_PLAIN=3 0 0" -- //fake:plain
run named-targets-with-floors-always 1 "3 passed, 1 failed" \
  "stage plain: 3 cases ran, fewer than its floor" \
  "FAKE_PLAIN=3 0 0" RDMAPLANE_CASE_FLOOR=always -- //fake:plain
run a-narrowing-flag-has-no-floor 0 "$((total - plain + 3)) passed, 0 failed" "" \
  "${met[@]}" "FAKE_PLAIN=3 0 0" -- --test_filter=Foo
printf 'plain twelve\n' >"$tmp/bad_floor"
run an-unparsable-floor-file 1 "0 passed, 1 failed" "is not \"STAGE COUNT\"" \
  "${met[@]}" "RDMAPLANE_CASE_FLOOR_FILE=$tmp/bad_floor" --
if [[ -s $tmp/calls ]]; then
  fail "bazel ran although the floor file was bad: $(cat "$tmp/calls")"
else
  pass "nothing ran with a bad floor file"
fi
run an-unknown-floor-mode 1 "0 passed, 1 failed" "RDMAPLANE_CASE_FLOOR" \
  "${met[@]}" RDMAPLANE_CASE_FLOOR=sometimes --

# Links left by a build with another output base are taken away.
mkdir -p "$tmp/output_base/execroot" "$tmp/elsewhere/execroot"
ln -sfn "$tmp/elsewhere/execroot" "$tmp/repo/bazel-stale"
ln -sfn "$tmp/output_base/execroot" "$tmp/repo/bazel-own"
run links-into-another-output-base 0 "$total passed, 0 failed" \
  "removing .*bazel-stale: it points into another output base" "${met[@]}" --
if [[ -L $tmp/repo/bazel-stale ]]; then
  fail "bazel-stale was left in place"
elif [[ ! -L $tmp/repo/bazel-own ]]; then
  fail "bazel-own, a link into Bazel's own output base, was removed"
else
  pass "only the link into another output base was removed"
fi

if [[ $failures -gt 0 ]]; then
  echo "test_sh_test: $failures failed"
  exit 1
fi
echo "test_sh_test: ok"
