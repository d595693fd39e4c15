#!/bin/bash
# Coverage-guided fuzzing campaigns with libFuzzer.
#
# Usage: deploy/fuzz.sh TARGET|all SECONDS
#   TARGET: roce, cm, responder, ring, setup, control, verbs_wr or
#   endpoint_send (the table below).
#   SECONDS: how long each target runs (-max_total_time); e.g. 1800 for a
#   30-minute campaign.
#
# Builds the targets with --config=fuzz (clang 14, libFuzzer, ASan and
# UBSan; .bazelrc) in a Bazel output base of its own, so the gcc build in
# the default output base is never invalidated (RDP_FUZZ_OUTPUT_BASE, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/rdmaplane-fuzz-bazel). Each target runs over
# a scratch folder that keeps what the campaign found between runs
# (RDP_FUZZ_WORK, default ${XDG_CACHE_HOME:-$HOME/.cache}/rdmaplane-fuzz/NAME)
# followed by its checked-in corpus, which is only read. New inputs land in
# the scratch folder, crash inputs in its crashes/ folder.
#
# Prints, per target, the edges covered (libFuzzer's cov:) and the crashes,
# then "fuzz: N passed, M failed" (a target that crashed, or did not build
# or run, failed). Exits 1 when any failed, 2 on a usage error.
set -uo pipefail

usage() {
  echo "usage: deploy/fuzz.sh TARGET|all SECONDS (targets: ${names[*]})" >&2
  exit 2
}

# name -> "label corpus-folder"
declare -A targets=(
  [roce]="//dataplane/wire:roce_fuzzer dataplane/wire/corpus/roce"
  [cm]="//dataplane/wire:cm_fuzzer dataplane/wire/corpus/cm"
  [responder]="//dataplane/rc:responder_fuzzer dataplane/rc/corpus/responder"
  [ring]="//api/shm:ring_fuzzer api/shm/corpus/ring"
  [setup]="//api/shm:setup_fuzzer api/shm/corpus/setup"
  [control]="//control:control_message_fuzzer control/corpus/control_message"
  [verbs_wr]="//api/verbs:work_request_fuzzer api/verbs/corpus/work_request"
  [endpoint_send]="//dataplane/engine:endpoint_send_fuzzer dataplane/engine/corpus/endpoint_send"
  [qp_state]="//dataplane/rc:qp_state_fuzzer dataplane/rc/corpus/qp_state"
)
names=(roce cm responder ring setup control verbs_wr endpoint_send qp_state)

[[ $# -eq 2 ]] || usage
[[ $2 =~ ^[1-9][0-9]*$ ]] || usage
seconds="$2"
if [[ $1 == all ]]; then
  chosen=("${names[@]}")
elif [[ -n ${targets[$1]+set} ]]; then
  chosen=("$1")
else
  usage
fi

cd "$(dirname "$0")/.." || exit 1
cache="${XDG_CACHE_HOME:-$HOME/.cache}"
output_base="${RDP_FUZZ_OUTPUT_BASE:-$cache/rdmaplane-fuzz-bazel}"
work_root="${RDP_FUZZ_WORK:-$cache/rdmaplane-fuzz}"
bazel="${BAZEL:-bazel}"
# The fuzz build's server goes away by itself once idle.
bazel_fuzz=("$bazel" "--output_base=$output_base" --max_idle_secs=300)

labels=()
for name in "${chosen[@]}"; do
  read -r label _ <<<"${targets[$name]}"
  labels+=("$label")
done

passed=0 failed=0
echo "fuzz: building ${labels[*]} with --config=fuzz in $output_base" >&2
if ! "${bazel_fuzz[@]}" build --config=fuzz "${labels[@]}" >&2; then
  echo "fuzz: the build failed" >&2
  echo "fuzz: 0 passed, ${#chosen[@]} failed"
  exit 1
fi
bin="$("${bazel_fuzz[@]}" info --config=fuzz bazel-bin 2>/dev/null)"

for name in "${chosen[@]}"; do
  read -r label corpus <<<"${targets[$name]}"
  binary="$bin/${label#//}"
  binary="${binary/://}"
  work="$work_root/$name"
  crashes="$work/crashes"
  mkdir -p "$work/corpus" "$crashes"
  log="$work/last.log"
  before=$(find "$crashes" -type f | wc -l)
  # Per input: a 60 s hang or 2 GiB is a failure too (inputs take
  # milliseconds; 60 s leaves room for a machine busy with builds). Inputs
  # up to 8 KiB hold a jumbo frame and several records.
  "$binary" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$crashes/" \
    "$work/corpus" "$corpus" >"$log" 2>&1
  rc=$?
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
    grep -o '[0-9]*$')
  new_crashes=$(($(find "$crashes" -type f | wc -l) - before))
  if [[ $rc -eq 0 ]]; then
    passed=$((passed + 1))
    echo "fuzz: $name: ${cov:-?} edges covered, ${runs:-?} runs in ${seconds} s, no crash"
  else
    failed=$((failed + 1))
    echo "fuzz: $name: FAILED (exit $rc): ${cov:-?} edges covered, $new_crashes crash inputs in $crashes; log $log"
    grep -m 20 -E 'ERROR|check failed|SUMMARY|Test unit written' "$log" |
      sed 's/^/fuzz:   /'
  fi
done
echo "fuzz: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
