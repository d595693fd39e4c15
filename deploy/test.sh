#!/usr/bin/env bash
# Builds and runs rdmaplane's tests and prints a one-line count of test cases.
#
#   deploy/test.sh                      # bazel test //...
#   deploy/test.sh //dataplane/...      # arguments go to `bazel test` as they are
#   deploy/test.sh --runs_per_test=3    # only flags: //... is still tested
#
# The last line printed is always "N passed, M failed" (", K skipped" is added
# when some cases were skipped), and the exit code is non-zero whenever anything
# failed, including a build failure that left no test to run.
#
# Without named targets it runs four stages: every test, then the tests tagged
# "sanitize" under AddressSanitizer+UndefinedBehaviorSanitizer and under
# ThreadSanitizer (RDMAPLANE_SANITIZERS=0 leaves those out), then each
# libFuzzer target for a short campaign (deploy/fuzz.sh; RDMAPLANE_FUZZ=0
# leaves it out); the counts add up over the stages.
# The fuzzers, the random transfers and the chaos soak are tagged
# "external", which Bazel never caches: each run draws new seeds (README.md).
#
# A whole run (no named targets, no flag that narrows which tests or cases
# run: see narrows_run) must reach the case floors of deploy/case_floor.txt:
# a stage that ran fewer cases (passed or failed; skipped ones did not run)
# than its floor counts as one failure, and the stage is named.
# RDMAPLANE_CASE_FLOOR_FILE reads the floors from another file, and
# RDMAPLANE_CASE_FLOOR=always checks them whatever the arguments, e.g. to
# see the check fail on one quick target:
#   RDMAPLANE_CASE_FLOOR=always RDMAPLANE_CASE_FLOOR_FILE=<(echo plain 99) \
#     deploy/test.sh //api/shm:ring_test
#
# Counts are per test CASE, read from the test.xml of every test that each
# invocation ran or took from the cache: gtest writes one <testcase> per TEST(),
# and Bazel writes one for tests that do not produce their own XML (sh_test).
# Which XML files belong to an invocation comes from Bazel's build event
# protocol, not from whatever happens to lie in bazel-testlogs.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

# Debian's interpreter, not whichever python3 comes first on PATH.
PYTHON=/usr/bin/python3

summary_and_exit() {
  # $1 = line to print last, $2 = exit code
  printf '%s\n' "$1"
  exit "$2"
}

# Quiet when everything is installed; installs what is missing otherwise.
if ! "$REPO_ROOT/deploy/setup.sh"; then
  echo "test: deploy/setup.sh failed; cannot build or test" >&2
  summary_and_exit "0 passed, 1 failed" 1
fi

# Test //... unless the caller named targets. Arguments that all start with
# "-" are only flags (use the --flag=value form), so //... is added to them.
args=("$@")
have_target=false
for arg in "${args[@]}"; do
  if [[ $arg == "--" || $arg != -* ]]; then
    have_target=true
    break
  fi
done
if [[ $have_target == false ]]; then
  args+=("//...")
fi

# narrows_run ARGS...: true when a flag makes Bazel run fewer tests or cases
# than the whole suite has (a target named in ARGS is seen by the caller).
narrows_run() {
  local arg
  for arg in "$@"; do
    case "$arg" in
      --test_filter=* | --test_arg=* | --test_env=GTEST_* | \
        --test_env=TESTBRIDGE_* | --test_tag_filters=* | \
        --test_size_filters=* | --test_timeout_filters=* | \
        --test_lang_filters=* | --build_tag_filters=* | \
        --target_pattern_file=* | --deleted_packages=*)
        return 0
        ;;
    esac
  done
  return 1
}

# The case floors, per stage, when they apply (see the header).
declare -A floors=()
floor_file="${RDMAPLANE_CASE_FLOOR_FILE:-$REPO_ROOT/deploy/case_floor.txt}"
check_floors=false
case "${RDMAPLANE_CASE_FLOOR:-}" in
  "")
    if [[ $have_target == false ]] && ! narrows_run "${args[@]}"; then
      check_floors=true
    fi
    ;;
  always) check_floors=true ;;
  *)
    echo "test: RDMAPLANE_CASE_FLOOR is \"$RDMAPLANE_CASE_FLOOR\"; only \"always\" (or unset) is known" >&2
    summary_and_exit "0 passed, 1 failed" 1
    ;;
esac
if [[ $check_floors == true ]]; then
  # Lines "STAGE COUNT"; "#" starts a comment. A floor file that cannot be
  # read fails the run before anything is built.
  floor_error=""
  if [[ ! -r $floor_file ]]; then
    floor_error="cannot read it"
  else
    line_no=0
    while IFS= read -r floor_line || [[ -n $floor_line ]]; do
      line_no=$((line_no + 1))
      floor_line="${floor_line%%#*}"
      read -r -a fields <<<"$floor_line" || true
      [[ ${#fields[@]} -eq 0 ]] && continue
      if [[ ${#fields[@]} -ne 2 || ! ${fields[0]} =~ ^[a-z0-9_]+$ ||
        ! ${fields[1]} =~ ^[0-9]{1,9}$ ]]; then
        floor_error="line $line_no is not \"STAGE COUNT\": ${floor_line}"
        break
      fi
      floors[${fields[0]}]=$((10#${fields[1]}))
    done <"$floor_file"
  fi
  if [[ -n $floor_error ]]; then
    echo "test: case floor file $floor_file: $floor_error" >&2
    summary_and_exit "0 passed, 1 failed" 1
  fi
fi

# Bazel's bazel-* links in the tree must point into this output base: a
# link into another one (left by a build with another output base and
# links, such as deploy/fuzz.sh's before it stopped making them) is taken
# for a package by //..., whose loading then fails.
if output_base="$(bazel info output_base 2>/dev/null)" && [[ -n $output_base ]]; then
  for link in "$REPO_ROOT"/bazel-*; do
    [[ -L $link ]] || continue
    if [[ $(readlink "$link") != "$output_base"/* ]]; then
      echo "test: removing $link: it points into another output base ($(readlink "$link"))" >&2
      rm -f "$link"
    fi
  done
fi

WORK_DIR="$(mktemp -d -t rdmaplane-test.XXXXXX)"
trap 'rm -rf "$WORK_DIR"' EXIT

# --keep_going: one broken target must not hide the results of all the others.
# Bazel's exit code is kept, not fatal: the summary must be printed either way.
# count_results BEP_FILE DIGEST_FILE: prints "<passed> <failed> <skipped>
# <test targets that did not build>" for one bazel invocation and, on
# stderr, one line for every test target it had to count without test
# cases; writes into DIGEST_FILE, for each failed test, the lines of its log
# that say why.
count_results() {
  "$PYTHON" - "$1" "$2" <<'PY'
import json
import os
import re
import sys
import urllib.parse
import xml.etree.ElementTree as ET

bep_path = sys.argv[1]

# (label, run, shard) -> (attempt, status, path of test.xml or None)
results = {}
# Every test target Bazel reports a summary for, with its overall status.
summaries = {}
# Test targets that did not build (no summary is posted for them in some
# versions of Bazel), keyed by label.
failed_to_build = set()
test_kinds = {}


def uri_to_path(uri):
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme != "file":
        return None
    return urllib.parse.unquote(parsed.path)


if os.path.exists(bep_path):
    with open(bep_path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            eid = event.get("id", {})
            if "testResult" in eid and "testResult" in event:
                key = eid["testResult"]
                label = key.get("label", "")
                slot = (label, key.get("run", 1), key.get("shard", 1))
                attempt = key.get("attempt", 1)
                result = event["testResult"]
                xml_path = log_path = None
                for out in result.get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        xml_path = uri_to_path(out.get("uri", ""))
                    elif out.get("name") == "test.log":
                        log_path = uri_to_path(out.get("uri", ""))
                previous = results.get(slot)
                # With flaky-test retries only the last attempt counts.
                if previous is None or attempt >= previous[0]:
                    results[slot] = (attempt, result.get("status", "NO_STATUS"), xml_path,
                                     log_path)
            elif "testSummary" in eid and "testSummary" in event:
                summaries[eid["testSummary"].get("label", "")] = event["testSummary"].get(
                    "overallStatus", "NO_STATUS"
                )
            elif "targetConfigured" in eid and "configured" in event:
                kind = event["configured"].get("targetKind", "")
                if kind.endswith(" test") or "testSize" in event["configured"]:
                    test_kinds[eid["targetConfigured"].get("label", "")] = kind
            elif "targetCompleted" in eid:
                label = eid["targetCompleted"].get("label", "")
                completed = event.get("completed")
                if event.get("aborted") is not None or (
                    completed is not None and not completed.get("success", False)
                ):
                    failed_to_build.add(label)

passed = failed = skipped = 0
counted_labels = set()

# digest(label, run, shard, status, log_path): why a test failed, in a few
# lines of its log, for the end of the run's output (where a reader of a
# long log looks first): the lines that say FAIL or name a failure, else
# its last lines.
MARKS = re.compile(r"FAIL|Failure|\[  FAILED  \]|Sanitizer|runtime error|did not|Timeout|TIMEOUT")


def digest(label, run, shard, status, log_path):
    lines = []
    if log_path and os.path.exists(log_path):
        with open(log_path, encoding="utf-8", errors="replace") as log:
            lines = [line.rstrip("\n") for line in log]
    picked = [line for line in lines if MARKS.search(line)][:12] or lines[-12:]
    out = [f"{label} (run {run}, shard {shard}): {status.lower()}; log {log_path}"]
    out += ["    " + line[:300] for line in picked]
    return "\n".join(out) + "\n"


digests = []
for (label, run, shard), (attempt, status, xml_path, log_path) in sorted(results.items()):
    counted_labels.add(label)
    case_passed = case_failed = case_skipped = 0
    parsed = False
    if xml_path and os.path.exists(xml_path):
        try:
            root = ET.parse(xml_path).getroot()
            parsed = True
            for case in root.iter("testcase"):
                children = {child.tag for child in case}
                if "failure" in children or "error" in children:
                    case_failed += 1
                elif (
                    "skipped" in children
                    or case.get("result") in ("skipped", "suppressed")
                    or case.get("status") == "notrun"
                ):
                    case_skipped += 1
                else:
                    case_passed += 1
        except ET.ParseError:
            parsed = False
    if status != "PASSED" and case_failed == 0:
        # Crash, timeout, sanitizer report at exit, unreadable XML: the cases
        # that ran may all look fine, but the target failed.
        case_failed = 1
        print(f"test: {label} {status.lower()} without a failed test case; counted as 1 failure",
              file=sys.stderr)
    elif status == "PASSED" and not parsed:
        case_passed = max(case_passed, 1)
    passed += case_passed
    failed += case_failed
    skipped += case_skipped
    if case_failed:
        digests.append(digest(label, run, shard, status, log_path))

# Test targets that never ran: they failed to build, or a dependency did.
never_ran = set(failed_to_build & set(test_kinds)) | {
    label for label, status in summaries.items() if status != "PASSED"
}
build_failed = 0
for label in sorted(never_ran - counted_labels):
    build_failed += 1
    print(f"test: {label} did not run (build failed); counted as 1 failure", file=sys.stderr)
failed += build_failed

with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("".join(digests))
print(passed, failed, skipped, build_failed)
PY
}

# floor_short STAGE RAN: true, after saying so on stderr, when the floors
# apply and the RAN cases of STAGE are fewer than its floor (a stage with
# no floor is never short). A stage counts a short floor as one failure.
floor_short() {
  local name="$1" ran="$2"
  [[ $check_floors == true && -n ${floors[$name]:-} ]] || return 1
  [[ $ran -lt ${floors[$name]} ]] || return 1
  echo "test: stage $name: $ran cases ran, fewer than its floor of ${floors[$name]} ($floor_file); counted as 1 failure" >&2
}

# run_stage NAME BAZEL_ARGS...: one `bazel test` invocation whose cases are
# added to the totals. A stage's failure never stops the next one.
n_passed=0 n_failed=0 n_skipped=0
any_failure=0
run_stage() {
  local name="$1"
  shift
  local bep="$WORK_DIR/build_events.$name.json"
  local rc=0
  echo "test: stage $name: bazel test $*" >&2
  bazel test --keep_going --build_event_json_file="$bep" "$@" || rc=$?
  local counts=""
  if ! counts="$(count_results "$bep" "$WORK_DIR/digest.$name.txt")"; then
    echo "test: stage $name: could not read the test results" >&2
    counts="0 1 0 0"
  fi
  local p f sk b
  read -r p f sk b <<<"$counts"
  # Cases that ran: a test target that did not build ran none.
  local ran=$((p + f - b))
  # Bazel can fail in ways no test target accounts for: a BUILD file that
  # does not parse, a library no test uses that does not compile, a bad
  # target pattern, no tests found, a bad flag, an interrupt. Exit code 3
  # means only that tests failed; any other non-zero code is a failure of
  # its own unless a test target that did not build already explains it.
  if [[ $rc -ne 0 ]] && { [[ $f -eq 0 ]] || [[ $rc -ne 3 && $b -eq 0 ]]; }; then
    echo "test: stage $name: bazel test exited with code $rc; counted as 1 failure" >&2
    f=$((f + 1))
  fi
  if floor_short "$name" "$ran"; then f=$((f + 1)); fi
  local floor_note=""
  if [[ $check_floors == true && -n ${floors[$name]:-} ]]; then
    floor_note="; floor ${floors[$name]}"
  fi
  echo "test: stage $name: $p passed, $f failed, $sk skipped; $ran cases ran$floor_note" >&2
  n_passed=$((n_passed + p))
  n_failed=$((n_failed + f))
  n_skipped=$((n_skipped + sk))
  if [[ $rc -ne 0 || $f -gt 0 ]]; then any_failure=1; fi
}

run_stage plain "${args[@]}"

# The sanitizer stage: the tests tagged "sanitize" (fuzzers, ring and table
# stress tests, the engine's and the lifecycle tests, the chaos soak for
# RDP_SOAK_SANITIZER_SECONDS, default 30) under AddressSanitizer with
# UndefinedBehaviorSanitizer, then under ThreadSanitizer. Only when no
# targets were named; RDMAPLANE_SANITIZERS=0 leaves it out.
if [[ $have_target == false && ${RDMAPLANE_SANITIZERS:-1} != 0 ]]; then
  flags=()
  for arg in "${args[@]}"; do
    [[ $arg == "//..." ]] || flags+=("$arg")
  done
  soak="--test_env=RDP_SOAK_SECONDS=${RDP_SOAK_SANITIZER_SECONDS:-30}"
  # Tests tagged "single_threaded" have no race for ThreadSanitizer to find.
  run_stage asan --config=asan --build_tests_only \
    --test_tag_filters=sanitize "$soak" "${flags[@]}" //...
  run_stage tsan --config=tsan --build_tests_only \
    --test_tag_filters=sanitize,-single_threaded "$soak" "${flags[@]}" //...
fi

# --- fuzz stage (deploy/fuzz.sh) ---------------------------------------------
# Each libFuzzer target runs RDP_FUZZ_SECONDS (default 15) over its
# checked-in corpus, built with clang in an output base of its own; a target
# is one case, and one that crashed or did not build is a failure. Only when
# no targets were named; RDMAPLANE_FUZZ=0 leaves it out.
if [[ $have_target == false && ${RDMAPLANE_FUZZ:-1} != 0 ]]; then
  echo "test: stage fuzz: deploy/fuzz.sh all ${RDP_FUZZ_SECONDS:-15}" >&2
  fuzz_rc=0
  fuzz_out="$("$REPO_ROOT/deploy/fuzz.sh" all "${RDP_FUZZ_SECONDS:-15}")" ||
    fuzz_rc=$?
  printf '%s\n' "$fuzz_out" >&2
  if [[ $fuzz_out =~ fuzz:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    n_passed=$((n_passed + BASH_REMATCH[1]))
    n_failed=$((n_failed + BASH_REMATCH[2]))
    # A target dropped from deploy/fuzz.sh's list is a case fewer.
    if floor_short fuzz "$((BASH_REMATCH[1] + BASH_REMATCH[2]))"; then
      n_failed=$((n_failed + 1))
    fi
  else
    n_failed=$((n_failed + 1))
  fi
  if [[ $fuzz_rc -ne 0 ]]; then any_failure=1; fi
fi
# --- end of fuzz stage ---------------------------------------------------------

# Why each failed test failed, from its log, right above the closing line:
# the end of a long run's output is what its reader sees first.
digests="$(cat "$WORK_DIR"/digest.*.txt 2>/dev/null || true)"
if [[ -n $digests ]]; then
  echo "test: the failed tests, and the lines of their logs that say why:" >&2
  printf '%s\n' "$digests" >&2
fi

line="$n_passed passed, $n_failed failed"
if [[ $n_skipped -gt 0 ]]; then
  line+=", $n_skipped skipped"
fi

if [[ $n_failed -gt 0 || $any_failure -ne 0 ]]; then
  summary_and_exit "$line" 1
fi
summary_and_exit "$line" 0
