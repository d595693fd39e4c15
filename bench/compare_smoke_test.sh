#!/usr/bin/env bash
# bench/compare's pipeline end to end in quick mode: every tool runs (very
# briefly), and the report must hold every figure the issue names, each
# ratio, positive numbers, the markdown table and two real PNG files. The
# figures themselves are not judged here (quick runs are too short), only
# that each was measured.
#
#   compare_smoke_test.sh COMPARE_RUN REPORT_PY RDMAPLANED CONTROL_BENCHMARK \
#       RDMAPLANE_PERF MEMCPY_BW TCP_BENCH PIN_COST MEMIF_RATE
set -euo pipefail

if [[ $# -ne 9 ]]; then
  echo "usage: compare_smoke_test.sh COMPARE_RUN REPORT_PY RDMAPLANED CONTROL_BENCHMARK RDMAPLANE_PERF MEMCPY_BW TCP_BENCH PIN_COST MEMIF_RATE" >&2
  exit 2
fi
compare_run="$1"
report_py="$2"
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

# The report must be able to fail: with no measurements at all it reports
# every figure missing and exits non-zero.
mkdir -p "$tmp/empty/raw"
printf 'start 0 0 0\nend 0 0 0\n' >"$tmp/empty/load.txt"
if python3 "$report_py" --raw="$tmp/empty/raw" --out="$tmp/empty/out" \
  --load="$tmp/empty/load.txt" --rounds=1 >"$tmp/empty/stdout" 2>&1; then
  fail "report.py accepted a run without measurements"
fi
grep -q "missing figures" "$tmp/empty/stdout" ||
  fail "report.py did not name the missing figures"

status=0
"$compare_run" --quick --bin_dir="$bin" --out="$out" >"$tmp/stdout" ||
  status=$?
cat "$tmp/stdout"
((status == 0)) || fail "compare_run.sh --quick exited with $status"

python3 - "$out/latest.json" "$report_py" <<'EOF' || fail "latest.json"
import importlib.util
import json
import sys

sys.dont_write_bytecode = True
spec = importlib.util.spec_from_file_location("report", sys.argv[2])
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)
doc = json.load(open(sys.argv[1]))
keys = ["memcpy_gbps", "tcp_gbps", "tcp_pingpong_p50_us", "write_gbps_64k",
        "read_gbps_64k", "write_lat_p50_us_8b", "read_lat_p50_us_8b",
        "write_mops_64b", "reg_hit_ns", "reg_roundtrip_us",
        "write_gbps_64k_vs_tcp", "write_gbps_64k_vs_memcpy",
        "write_lat_p50_us_8b_vs_tcp"]
bad = []
for k in keys + report.REQUIRED:
    v = doc.get(k)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
        bad.append("%s=%r" % (k, v))
if bad:
    sys.exit("missing or not positive: " + ", ".join(bad))
if doc.get("missing") or doc.get("failures"):
    sys.exit("the report lists problems: %r %r" % (doc.get("missing"),
                                                   doc.get("failures")))
for k in ("units", "machine", "run", "targets", "curves", "latency"):
    if not doc.get(k):
        sys.exit("no " + k)
if len(doc["targets"]) != 6 or any(t["met"] is None for t in doc["targets"]):
    sys.exit("targets not all evaluated: %r" % doc["targets"])
if not doc["machine"]["load_start"]:
    sys.exit("no load average")
for setup in ("local", "memif"):
    for mode in ("write_bw", "read_bw"):
        pts = doc["curves"].get(setup, {}).get(mode, [])
        if len(pts) < 3 or any(p["gbps"] <= 0 for p in pts):
            sys.exit("curve %s %s: %r" % (setup, mode, pts))
print("latest.json: %d keys checked" % len(set(keys + report.REQUIRED)))
EOF

grep -q '^| figure | rdmaplane | rounds | baseline | baseline value | ratio | target | met |$' \
  "$out/latest.md" || fail "latest.md has no comparison table"
grep -q 'WRITE 64 KiB bandwidth, one daemon' "$out/latest.md" ||
  fail "latest.md lacks the WRITE bandwidth row"
cmp -s "$out/latest.md" <(tail -c "$(wc -c <"$out/latest.md")" "$tmp/stdout") ||
  fail "the printed table is not latest.md"
for png in bw_vs_size.png latency_cdf.png; do
  [[ -s $out/$png ]] || fail "$png is missing"
  [[ "$(head -c 8 "$out/$png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
    fail "$png is not a PNG file"
done
if ls "$out"/*.tmp >/dev/null 2>&1; then fail "temporary files left in $out"; fi
echo "PASS"
