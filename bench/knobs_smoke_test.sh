#!/usr/bin/env bash
# bench/knobs' pipeline end to end in quick mode: every setting of every
# knob is measured (very briefly) and the report holds each figure, each
# ratio to the knob's default (1 at the default itself, the figure divided
# by the default's elsewhere), the tables and a real PNG. Hugepages are
# skipped here (the run would change the machine's reservation), and the
# report must say so. The figures themselves are not judged. The report
# must also fail when there are no measurements.
#
#   knobs_smoke_test.sh KNOBS_RUN KNOBS_REPORT RDMAPLANED RDMAPLANE_PERF \
#       ETH_PORT_BENCHMARK
set -euo pipefail

if [[ $# -ne 5 ]]; then
  echo "usage: knobs_smoke_test.sh KNOBS_RUN KNOBS_REPORT RDMAPLANED RDMAPLANE_PERF ETH_PORT_BENCHMARK" >&2
  exit 2
fi
knobs_run="$1"
knobs_report="$2"
shift 2
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
bin="$tmp/bin"
out="$tmp/out"
mkdir -p "$bin"
for path in "$@"; do
  ln -sf "$PWD/$path" "$bin/$(basename "$path")"
done

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

mkdir -p "$tmp/empty/raw"
if python3 "$knobs_report" --raw="$tmp/empty/raw" --out="$tmp/empty/out" \
  --bursts="1 32" --mtus="1024 4096" >"$tmp/empty/stdout" 2>"$tmp/empty/stderr"; then
  fail "knobs_report.py accepted a run without measurements"
fi
grep -q "no figure for" "$tmp/empty/stderr" ||
  fail "knobs_report.py did not name the missing figures"

status=0
"$knobs_run" --quick --hugepages=skip --bin_dir="$bin" --out="$out" \
  >"$tmp/stdout" || status=$?
cat "$tmp/stdout"
((status == 0)) || fail "knobs_run.sh --quick exited with $status"

python3 - "$out/knobs.json" <<'PY' || fail "knobs.json"
import json
import math
import sys

doc = json.load(open(sys.argv[1]))
knobs = doc["knobs"]
errors = []
for name in ("burst", "mtu", "zero_copy"):
    k = knobs[name]
    if not k["figures"]:
        errors.append(f"{name}: no figures")
    if k["default"] not in k["settings"]:
        errors.append(f"{name}: default {k['default']} not among {k['settings']}")
    for fig, f in k["figures"].items():
        base = f["settings"][k["default"]]["value"]
        for s in k["settings"]:
            row = f["settings"][s]
            v, r = row["value"], row["vs_default"]
            if not (isinstance(v, (int, float)) and v > 0):
                errors.append(f"{name} {fig} {s}: value {v}")
                continue
            if not row["rounds"] or min(row["rounds"]) > v or max(row["rounds"]) < v:
                errors.append(f"{name} {fig} {s}: median {v} outside rounds {row['rounds']}")
            if r is None or not math.isclose(r, v / base, rel_tol=1e-9):
                errors.append(f"{name} {fig} {s}: ratio {r}, not {v} / {base}")
            if s == k["default"] and not math.isclose(r or 0, 1.0):
                errors.append(f"{name} {fig}: ratio {r} at the default")
if "skipped" not in knobs["hugepages"].get("note", ""):
    errors.append(f"hugepages: no note saying they were skipped: {knobs['hugepages']}")
if doc["failures"] or doc["missing"]:
    errors.append(f"failures {doc['failures']}, missing {doc['missing']}")
for e in errors:
    print("knobs.json: " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY

for section in "## burst" "## mtu" "## hugepages" "## zero_copy" "(default)"; do
  grep -qF -- "$section" "$out/knobs.md" || fail "knobs.md has no '$section'"
done
cmp -s "$tmp/stdout" "$out/knobs.md" || fail "the printed tables differ from knobs.md"
[[ "$(head -c 8 "$out/knobs.png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
  fail "knobs.png is not a PNG"
echo "knobs_smoke_test: ok"
