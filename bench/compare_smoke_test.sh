#!/usr/bin/env bash
# bench/compare's pipeline end to end in quick mode: every tool runs (very
# briefly), and the report must hold every figure behind the project's
# performance targets and every other figure, each ratio, positive numbers,
# the markdown table and two real PNG files. The figures themselves are not
# judged here (quick runs are too short), only that each was measured, and
# that the report agrees with itself: bench/report_check.py recomputes every
# ratio of latest.json from its figure and baseline and matches every value
# latest.md prints to latest.json; fed a report with one ratio off, one
# figure without a ratio, or one printed value off, it must fail.
#
#   compare_smoke_test.sh COMPARE_RUN REPORT_PY REPORT_CHECK RDMAPLANED \
#       CONTROL_BENCHMARK RDMAPLANE_PERF MEMCPY_BW TCP_BENCH PIN_COST \
#       MEMIF_RATE
set -euo pipefail

if [[ $# -ne 10 ]]; then
  echo "usage: compare_smoke_test.sh COMPARE_RUN REPORT_PY REPORT_CHECK RDMAPLANED CONTROL_BENCHMARK RDMAPLANE_PERF MEMCPY_BW TCP_BENCH PIN_COST MEMIF_RATE" >&2
  exit 2
fi
compare_run="$1"
report_py="$2"
report_check="$3"
shift 3
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
keys = ["memcpy_gbps", "memcpy_64k_gbps", "tcp_gbps", "tcp_pingpong_p50_us", "write_gbps_64k",
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
if doc["ratio_of"]["write_gbps_64k_vs_memcpy"]["baseline"] != "memcpy_64k_gbps":
    sys.exit("64 KiB bandwidth is not compared with 64 KiB memcpy copies")
if doc["profile"] or "--quick" not in doc.get("profile_note", ""):
    sys.exit("quick mode: no profile expected, and a note saying why: %r" %
             doc.get("profile_note"))
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
grep -qx 'No profile of the engine: --quick skips it.' "$out/latest.md" ||
  fail "latest.md does not say why there is no profile"

# The report agrees with itself...
python3 "$report_check" "$out/latest.json" "$out/latest.md" ||
  fail "latest.json and latest.md do not agree (see above)"
# ...and the check sees a report that does not: broken copies must fail it,
# each for the reason broken in.
broken="$tmp/broken"
mkdir -p "$broken"
must_fail() {  # must_fail NAME TEXT ARGS...: report_check ARGS fails naming TEXT
  local name="$1" text="$2"
  shift 2
  if python3 "$report_check" "$@" >"$broken/$name.txt" 2>&1; then
    fail "report_check accepted $name"
  fi
  grep -qF -- "$text" "$broken/$name.txt" ||
    fail "report_check rejected $name without naming '$text': $(cat "$broken/$name.txt")"
  echo "report_check rejects $name"
}
python3 - "$out/latest.json" "$out/latest.md" "$broken" <<'EOF' ||
import json
import sys

doc = json.load(open(sys.argv[1]))
# One ratio 10 % off, in both places it is kept.
off = dict(doc, ratios=dict(doc["ratios"]))
off["write_gbps_64k_vs_tcp"] *= 1.1
off["ratios"]["write_gbps_64k_vs_tcp"] = off["write_gbps_64k_vs_tcp"]
json.dump(off, open(sys.argv[3] + "/ratio_off.json", "w"))
# A figure whose only ratio is gone.
gone = dict(doc, ratios=dict(doc["ratios"]), ratio_of=dict(doc["ratio_of"]))
for d in (gone, gone["ratios"], gone["ratio_of"]):
    del d["reg_dereg_pair_us_vs_pin"]
json.dump(gone, open(sys.argv[3] + "/no_ratio.json", "w"))
# latest.md with one ratio printed twice its value.
lines = open(sys.argv[2]).read().split("\n")
for i, line in enumerate(lines):
    if line.startswith("| READ 64 KiB bandwidth, one daemon |"):
        cells = line.split("|")
        cells[6] = " %.3gx " % (2 * doc["read_gbps_64k_vs_tcp"])
        lines[i] = "|".join(cells)
        break
else:
    sys.exit("no READ 64 KiB row to break")
open(sys.argv[3] + "/value_off.md", "w").write("\n".join(lines))
EOF
  fail "could not write the broken reports"
must_fail ratio_off "write_gbps_64k_vs_tcp = " "$broken/ratio_off.json"
must_fail no_ratio "reg_dereg_pair_us has no ratio" "$broken/no_ratio.json"
must_fail value_off "read_gbps_64k_vs_tcp: latest.md shows" \
  "$out/latest.json" "$broken/value_off.md"
cmp -s "$out/latest.md" <(tail -c "$(wc -c <"$out/latest.md")" "$tmp/stdout") ||
  fail "the printed table is not latest.md"
for png in bw_vs_size.png latency_cdf.png; do
  [[ -s $out/$png ]] || fail "$png is missing"
  [[ "$(head -c 8 "$out/$png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
    fail "$png is not a PNG file"
done
if ls "$out"/*.tmp >/dev/null 2>&1; then fail "temporary files left in $out"; fi
echo "PASS"
