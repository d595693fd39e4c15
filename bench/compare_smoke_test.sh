#!/usr/bin/env bash
# bench/compare's pipeline end to end in quick mode: every tool runs (very
# briefly), UCX's ucx_perftest and the Open MPI ping-pong (mpi_pingpong.c,
# built with mpicc) among them, over rdmaplane and over TCP, and the report
# must hold every figure behind the project's performance targets and every
# other figure, each ratio, positive numbers, the markdown table with the
# UCX and Open MPI rows and three real PNG files. The figures themselves are
# not judged here (quick runs are too short), only that each was measured,
# and that the report agrees with itself: bench/report_check.py recomputes
# every ratio of latest.json, the median of its rounds' pairs, from the
# figure's and the baseline's rounds and matches every value latest.md
# prints to latest.json; fed a report with one ratio off, one baseline
# window off, one figure without a ratio, one printed value off, a best
# that is not the highest, or a bandwidth divided by TCP at another size,
# it must fail. The run is made with --check: it exits 0, or 3 naming on
# stderr each target latest.json shows missed. report.py --check on the
# run's raw measurements doctored so that every target is met exits 0, and
# with one figure then made far too slow exits 3 naming the targets it
# misses, with value and bound; with UCX's and Open MPI's figures over
# rdmaplane made far slower, it names exactly their five targets (against
# the native API, TCP and perftest's SEND); with TCP's larger sends made
# far faster,
# the equal-size targets hold and exactly the best-against-best ones are
# missed; with rdmaplane's larger sizes made far slower, each of its bests
# falls back to 64 KiB.
#
#   compare_smoke_test.sh COMPARE_RUN REPORT_PY REPORT_CHECK RDMAPLANED \
#       CONTROL_BENCHMARK RDMAPLANE_PERF MEMCPY_BW TCP_BENCH PIN_COST \
#       MEMIF_RATE LIBRDMAPLANE_VERBS_SO
set -euo pipefail

if [[ $# -ne 11 ]]; then
  echo "usage: compare_smoke_test.sh COMPARE_RUN REPORT_PY REPORT_CHECK RDMAPLANED CONTROL_BENCHMARK RDMAPLANE_PERF MEMCPY_BW TCP_BENCH PIN_COST MEMIF_RATE LIBRDMAPLANE_VERBS_SO" >&2
  exit 2
fi
compare_run="$1"
report_py="$2"
report_check="$3"
shift 3
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
kept=""
# shellcheck disable=SC2317  # the EXIT trap
cleanup() { if [[ -n $kept ]]; then rm -rf -- "$kept"; fi; }
trap cleanup EXIT
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
"$compare_run" --quick --check --keep --bin_dir="$bin" --out="$out" \
  >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
cat "$tmp/stdout"
cat "$tmp/stderr" >&2
kept="$(sed -n 's/^compare: raw results kept in //p' "$tmp/stderr")"
[[ -n $kept && -d $kept/raw ]] || fail "--keep did not keep the raw results"
((status == 0 || status == 3)) ||
  fail "compare_run.sh --quick --check exited with $status"
# --check: exit 3 exactly when latest.json shows a missed target, each
# named on stderr.
python3 - "$out/latest.json" "$tmp/stderr" "$status" <<'EOF' ||
import json
import sys

doc = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
missed = [t["key"] for t in doc["targets"] if t["met"] is False]
if (int(sys.argv[3]) == 3) != bool(missed):
    sys.exit("exit status %s with missed targets %r" % (sys.argv[3], missed))
for key in missed:
    if "report: target missed: %s = " % key not in err:
        sys.exit("--check did not name the missed target " + key)
print("--check: exit %s, %d missed target(s) named" % (sys.argv[3],
                                                       len(missed)))
EOF
  fail "--check and the targets of latest.json disagree"

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
        "write_lat_p50_us_8b_vs_tcp", "memif_payload_gbps_4096",
        "write_gbps_64k_memif_vs_memif", "write_gbps_64k_memif_vs_tcp",
        "read_gbps_64k_memif_vs_tcp", "write_cpu_s_per_gb_64k_memif_vs_tcp",
        "write_lat_p50_us_8b_memif_vs_tcp_busy",
        "write_lat_p99_us_8b_memif_vs_tcp_busy",
        "write_mops_64b_memif_vs_memif", "tcp_cpu_s_per_gb",
        "tcp_pingpong_cpu_us_per_op", "write_cpu_us_per_op_64b_vs_tcp",
        "tcp_gbps_256k", "tcp_gbps_1m", "tcp_gbps_4m", "tcp_best_gbps",
        "write_gbps_1m_vs_tcp", "read_gbps_4m_memif_vs_tcp",
        "write_gbps_best_vs_tcp_best", "write_gbps_best_memif_vs_tcp_best",
        "read_gbps_best_memif_vs_tcp_best",
        "ucx_put_gbps_64k_memif", "ucx_tag_lat_us_8b_memif",
        "mpi_gbps_1m_memif", "mpi_lat_us_8b_memif", "ucx_tcp_put_gbps_64k",
        "ucx_tcp_tag_lat_us_8b", "mpi_tcp_gbps_1m", "mpi_tcp_lat_us_8b",
        "perftest_send_lat_us_8b", "ucx_put_gbps_64k_memif_vs_native",
        "ucx_put_gbps_64k_memif_vs_tcp", "ucx_tag_lat_us_8b_memif_vs_tcp",
        "mpi_gbps_1m_memif_vs_native", "mpi_gbps_1m_memif_vs_tcp",
        "mpi_lat_us_8b_memif_vs_tcp", "mpi_lat_us_8b_memif_vs_perftest"]
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
if [t["key"] for t in doc["targets"]] != [t[0] for t in report.TARGETS] or \
        any(t["met"] is None for t in doc["targets"]):
    sys.exit("targets not all evaluated: %r" % doc["targets"])
for t in doc["targets"]:
    if "_vs_" in t["key"] and t.get("pairs") != 1:
        sys.exit("target %s: %r pairs in one round" % (t["key"],
                                                        t.get("pairs")))
if doc["ratio_of"]["write_gbps_64k_vs_memcpy"]["baseline"] != "memcpy_64k_gbps":
    sys.exit("64 KiB bandwidth is not compared with 64 KiB memcpy copies")
if doc["ratio_of"]["write_gbps_64k_memif_vs_memif"] != {
        "figure": "write_gbps_64k_memif",
        "baseline": "memif_payload_gbps_4096",
        "baseline_windows": "memif_payload_gbps_4096@memif"}:
    sys.exit("memif 64 KiB WRITEs are not paired with raw memif at path MTU "
             "4096: %r" % doc["ratio_of"]["write_gbps_64k_memif_vs_memif"])
if doc["ratio_of"]["write_gbps_1m_memif_vs_tcp"]["baseline"] != "tcp_gbps_1m":
    sys.exit("1 MiB WRITEs are not compared with TCP's 1 MiB sends")
# UCX and Open MPI against the native API: its figure of the same rounds.
mode = doc["run"]["poll_mode_used"]["memif"]
for rkey, base in (("ucx_put_gbps_64k_memif_vs_native",
                    "write_gbps_64k_hot_memif"),
                   ("mpi_gbps_1m_memif_vs_native", "write_gbps_1m_memif")):
    want = {"figure": rkey.split("_vs_")[0], "baseline": base,
            "baseline_windows": "%s@%s" % (base, mode)}
    if doc["ratio_of"][rkey] != want:
        sys.exit("%s: %r, not %r" % (rkey, doc["ratio_of"][rkey], want))
cost = doc.get("mpi_lat_cost_us_8b_memif")
if not isinstance(cost, (int, float)) or isinstance(cost, bool):
    sys.exit("no Open MPI latency cost: %r" % cost)
sizes = [65536, 262144, 1048576, 4194304]
for key, b in doc["best"].items():
    if b["bytes"] not in sizes or doc[key] != doc[b["figure"]]:
        sys.exit("best %s: %r" % (key, b))
if set(doc["best"]) != {"tcp_best_gbps", "write_gbps_best", "read_gbps_best",
                        "write_gbps_best_memif", "read_gbps_best_memif"}:
    sys.exit("bests: %r" % sorted(doc["best"]))
if doc["run"]["mtu"] != 4096:
    sys.exit("the memif daemons ran path MTU %r, not their default 4096" %
             doc["run"]["mtu"])
if doc["profile"] or "--quick" not in doc.get("profile_note", ""):
    sys.exit("quick mode: no profile expected, and a note saying why: %r" %
             doc.get("profile_note"))
if not doc["machine"]["load_start"]:
    sys.exit("no load average")
for setup in ("local", "memif"):
    for mode in ("write_bw", "read_bw"):
        pts = doc["curves"].get(setup, {}).get(mode, [])
        if len(pts) < 3 or any(p["gbps"] <= 0 or p["cpu_s_per_gb"] <= 0
                               for p in pts):
            sys.exit("curve %s %s: %r" % (setup, mode, pts))
print("latest.json: %d keys checked" % len(set(keys + report.REQUIRED)))
EOF

grep -q '^| figure | rdmaplane | rounds | baseline | baseline value | ratio | pairs | target | met |$' \
  "$out/latest.md" || fail "latest.md has no comparison table"
grep -q 'WRITE 64 KiB bandwidth, one daemon' "$out/latest.md" ||
  fail "latest.md lacks the WRITE bandwidth row"
grep -q '^| size | TCP loopback | WRITE, one daemon |' "$out/latest.md" ||
  fail "latest.md lacks the table of bandwidth against TCP by size"
grep -q '^| WRITE bandwidth at its best size, memif | [0-9.]* GB/s at [0-9]* [KM]iB |' \
  "$out/latest.md" || fail "latest.md does not name rdmaplane's best size"
grep -qx 'No profile of the engine: --quick skips it.' "$out/latest.md" ||
  fail "latest.md does not say why there is no profile"
# The UCX and Open MPI rows, each with its figure and its ratios.
for row in \
  "UCX ucp_put_bw 64 KiB over rdmaplane, memif | [0-9.e+-]* GB/s |.*| native WRITE 64 KiB, cache-hot, same round | [0-9.e+-]* GB/s | [0-9.e+-]*x |" \
  " |  |  | UCX ucp_put_bw 64 KiB over TCP loopback | [0-9.e+-]* GB/s | [0-9.e+-]*x |" \
  "UCX tag_lat 8 B over rdmaplane, half a round trip, memif | [0-9.e+-]* us |.*| UCX tag_lat 8 B over TCP loopback | [0-9.e+-]* us | [0-9.e+-]*x |" \
  "Open MPI ping-pong 1 MiB bandwidth over rdmaplane, memif | [0-9.e+-]* GB/s |.*| native WRITE 1 MiB, same round | [0-9.e+-]* GB/s | [0-9.e+-]*x |" \
  " |  |  | Open MPI 1 MiB over TCP loopback (ob1) | [0-9.e+-]* GB/s | [0-9.e+-]*x |" \
  "Open MPI ping-pong 8 B over rdmaplane, half a round trip, memif | [0-9.e+-]* us |.*| Open MPI 8 B over TCP loopback (ob1) | [0-9.e+-]* us | [0-9.e+-]*x |" \
  " |  |  | perftest ib_send_lat (RC) typical, verbs | [0-9.e+-]* us | [0-9.e+-]*x |" \
  "Open MPI's cost over perftest's SEND in 8 B ping-pong latency, memif | [0-9.e+-]* us |"; do
  grep -q "^| $row" "$out/latest.md" ||
    fail "latest.md lacks the row '$row'"
done

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
# One baseline window twice what was measured: the ratios paired with it
# no longer follow.
win = dict(doc, rounds=dict(doc["rounds"]))
win["rounds"]["tcp_gbps@memif"] = [2 * v for v in
                                   win["rounds"]["tcp_gbps@memif"]]
json.dump(win, open(sys.argv[3] + "/window_off.json", "w"))
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
# TCP's best naming its slowest size instead.
tcp = ["tcp_gbps", "tcp_gbps_256k", "tcp_gbps_1m", "tcp_gbps_4m"]
slow = min(tcp, key=lambda k: doc[k])
if doc[slow] == max(doc[k] for k in tcp):
    sys.exit("every TCP size measured the same")
nb = dict(doc, best=dict(doc["best"]))
nb["best"]["tcp_best_gbps"] = {
    "figure": slow, "bytes": [65536, 262144, 1048576, 4194304][
        tcp.index(slow)]}
json.dump(nb, open(sys.argv[3] + "/not_best.json", "w"))
# 1 MiB READs over memif divided by TCP's 4 MiB sends.
other = dict(doc, ratio_of=dict(doc["ratio_of"]))
other["ratio_of"]["read_gbps_1m_memif_vs_tcp"] = dict(
    other["ratio_of"]["read_gbps_1m_memif_vs_tcp"], baseline="tcp_gbps_4m",
    baseline_windows="tcp_gbps_4m@memif")
json.dump(other, open(sys.argv[3] + "/other_size.json", "w"))
# Open MPI's latency cost 1 us off.
cost = dict(doc)
cost["mpi_lat_cost_us_8b_memif"] += 1.0
json.dump(cost, open(sys.argv[3] + "/cost_off.json", "w"))
# UCX's puts divided by the native WRITEs of the other poll mode.
mode = doc["run"]["poll_mode_used"]["memif"]
nat = dict(doc, ratio_of=dict(doc["ratio_of"]))
nat["ratio_of"]["ucx_put_gbps_64k_memif_vs_native"] = dict(
    nat["ratio_of"]["ucx_put_gbps_64k_memif_vs_native"],
    baseline_windows="write_gbps_64k_hot_memif@" + (
        "busy" if mode == "adaptive" else "adaptive"))
json.dump(nat, open(sys.argv[3] + "/native_windows.json", "w"))
EOF
  fail "could not write the broken reports"
must_fail ratio_off "write_gbps_64k_vs_tcp = " "$broken/ratio_off.json"
must_fail window_off "write_gbps_64k_memif_vs_tcp = " "$broken/window_off.json"
must_fail no_ratio "reg_dereg_pair_us has no ratio" "$broken/no_ratio.json"
must_fail value_off "read_gbps_64k_vs_tcp: latest.md shows" \
  "$out/latest.json" "$broken/value_off.md"
must_fail not_best "tcp_best_gbps: best names" "$broken/not_best.json"
must_fail cost_off "mpi_lat_cost_us_8b_memif = " "$broken/cost_off.json"
must_fail native_windows \
  "ucx_put_gbps_64k_memif_vs_native: paired with the windows" \
  "$broken/native_windows.json"
must_fail other_size \
  "read_gbps_1m_memif_vs_tcp divides read_gbps_1m_memif by tcp_gbps_4m: not the same size" \
  "$broken/other_size.json"
cmp -s "$out/latest.md" <(tail -c "$(wc -c <"$out/latest.md")" "$tmp/stdout") ||
  fail "the printed table is not latest.md"
for png in bw_vs_size.png cpu_vs_size.png latency_cdf.png; do
  [[ -s $out/$png ]] || fail "$png is missing"
  [[ "$(head -c 8 "$out/$png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
    fail "$png is not a PNG file"
done
if ls "$out"/*.tmp >/dev/null 2>&1; then fail "temporary files left in $out"; fi

# report.py --check on doctored measurements: every rdmaplane figure made
# far better than any target asks, then one made far worse, then perftest's
# over the verbs front end.
doctor() {  # doctor DIR FACTOR FILE_GLOB: rdmaplane's figures FACTOR x better
  python3 - "$@" <<'EOF'
import glob
import json
import os
import sys

raw, factor, pattern = sys.argv[1], float(sys.argv[2]), sys.argv[3]
faster = ("gbps", "mops")
slower = ("p50_us", "p90_us", "p99_us", "max_us", "min_us", "mean_us",
          "cpu_s_per_gb", "cpu_us_per_op")
for path in glob.glob(os.path.join(raw, pattern)):
    if path.endswith(".txt"):
        lines = open(path).read().split("\n")
        for i, line in enumerate(lines):
            f = line.split()
            if f[:1] == ["Final:"] and len(f) == 9:
                # ucx_perftest's row: iterations, three latencies, two
                # bandwidths and two message rates.
                lines[i] = " ".join(
                    f[:2] + ["%.6f" % (float(x) / factor) for x in f[2:5]] +
                    ["%.6f" % (float(x) * factor) for x in f[5:]])
            elif f[:1] == ["mpi_pingpong:"]:
                # mpi_pingpong's line: times (_us) and bandwidth (_gbps).
                for j, kv in enumerate(f[1:], 1):
                    k, _, v = kv.partition("=")
                    if k.endswith("_us"):
                        f[j] = "%s=%.6f" % (k, float(v) / factor)
                    elif k.endswith("_gbps"):
                        f[j] = "%s=%.6f" % (k, float(v) * factor)
                lines[i] = " ".join(f)
        # perftest's client output over the verbs front end: the row under
        # its #bytes header, bandwidths (from the third column on) or times
        # (every column after the size and the iterations).
        head = [i for i, l in enumerate(lines)
                if l.strip().startswith("#bytes")]
        if head:
            row = lines[head[0] + 1].split()
            bw = "_bw" in os.path.basename(path)
            for i in range(2, len(row)):
                row[i] = "%.6f" % (float(row[i]) * factor if bw
                                   else float(row[i]) / factor)
            lines[head[0] + 1] = " ".join(row)
        open(path, "w").write("\n".join(lines))
        continue
    doc = json.load(open(path))
    if doc.get("tool") == "rdmaplane_perf":
        for r in doc["results"]:
            for k in faster:
                if k in r:
                    r[k] *= factor
            for k in slower:
                if k in r:
                    r[k] /= factor
    elif "benchmarks" in doc:
        for b in doc["benchmarks"]:
            b["real_time"] /= factor
    else:
        continue
    json.dump(doc, open(path, "w"))
EOF
}
check_report() {  # check_report NAME: report.py --check on $tmp/NAME/raw
  python3 "$report_py" --raw="$tmp/$1/raw" --out="$tmp/$1/out" \
    --load="$tmp/empty/load.txt" --rounds=1 --check=1 \
    >"$tmp/$1/stdout" 2>"$tmp/$1/stderr"
}
mkdir -p "$tmp/met" "$tmp/missed"
cp -r "$kept/raw" "$tmp/met/raw"
# perftest's figures a thousand times further than the native ones (a
# quick run's pair can be 2x apart either way): the verbs front end then
# costs nothing. UCX's and Open MPI's over rdmaplane as far, so that they
# pass the native figures, TCP and perftest's SEND.
doctor "$tmp/met/raw" 1000 'r1_*.json' &&
  doctor "$tmp/met/raw" 1e6 'r1_*perftest_write_*.txt' &&
  doctor "$tmp/met/raw" 1e6 'r1_memif_*_rdmaplane*.txt' ||
  fail "could not doctor the raw files"
check_report met || fail "report.py --check with every target met exited \
non-zero: $(cat "$tmp/met/stderr")"
if grep -q "target missed" "$tmp/met/stderr"; then
  fail "report.py --check named a missed target with all met"
fi
echo "report.py --check: 0 with every target met"
cp -r "$tmp/met/raw" "$tmp/missed/raw"
doctor "$tmp/missed/raw" 1e-6 'r1_memif_adaptive_bw.json' ||
  fail "could not doctor the raw files"
status=0
check_report missed || status=$?
((status == 3)) || fail "report.py --check with missed targets exited \
$status: $(cat "$tmp/missed/stderr")"
for key in write_gbps_64k_memif_vs_tcp write_gbps_64k_memif_vs_memif \
  read_gbps_64k_memif_vs_tcp read_gbps_64k_memif_vs_memif \
  write_cpu_s_per_gb_64k_memif_vs_tcp; do
  grep -q "^report: target missed: $key = .*, bound [<>]= [0-9.]*x$" \
    "$tmp/missed/stderr" ||
    fail "report.py --check did not name $key: $(cat "$tmp/missed/stderr")"
done
if (($(grep -c "target missed" "$tmp/missed/stderr") != 5)); then
  fail "report.py --check named other targets: $(cat "$tmp/missed/stderr")"
fi
python3 "$report_check" "$tmp/missed/out/latest.json" \
  "$tmp/missed/out/latest.md" || fail "the doctored report disagrees"
# perftest far slower than the native API (a thousand times slower than
# measured): the verbs front end misses both of its targets, and only
# those.
mkdir -p "$tmp/verbs_slow"
cp -r "$tmp/met/raw" "$tmp/verbs_slow/raw"
doctor "$tmp/verbs_slow/raw" 1e-9 'r1_*perftest_write_*.txt' ||
  fail "could not doctor the raw files"
status=0
check_report verbs_slow || status=$?
((status == 3)) || fail "report.py --check with a slow verbs front end \
exited $status: $(cat "$tmp/verbs_slow/stderr")"
grep -q "^report: target missed: write_gbps_64k_hot_memif_vs_perftest = .*, bound <= 1.111x$" \
  "$tmp/verbs_slow/stderr" && grep -q \
  "^report: target missed: verbs_write_lat_cost_us_8b_memif = .* us (median of the rounds), bound <= 0.5 us$" \
  "$tmp/verbs_slow/stderr" && (($(grep -c "target missed" "$tmp/verbs_slow/stderr") == 2)) ||
  fail "report.py --check did not name exactly the verbs targets: $(cat "$tmp/verbs_slow/stderr")"
python3 "$report_check" "$tmp/verbs_slow/out/latest.json" \
  "$tmp/verbs_slow/out/latest.md" || fail "the doctored report disagrees"
# UCX and Open MPI over rdmaplane far slower (a thousand times slower than
# measured): exactly their five targets are missed.
mkdir -p "$tmp/apps_slow"
cp -r "$tmp/met/raw" "$tmp/apps_slow/raw"
doctor "$tmp/apps_slow/raw" 1e-9 'r1_memif_*_rdmaplane*.txt' ||
  fail "could not doctor the raw files"
status=0
check_report apps_slow || status=$?
((status == 3)) || fail "report.py --check with slow UCX and Open MPI \
exited $status: $(cat "$tmp/apps_slow/stderr")"
for key in ucx_put_gbps_64k_memif_vs_native ucx_put_gbps_64k_memif_vs_tcp \
  mpi_gbps_1m_memif_vs_native mpi_lat_us_8b_memif_vs_tcp; do
  grep -q "^report: target missed: $key = .*, bound [<>]= [0-9.]*x$" \
    "$tmp/apps_slow/stderr" ||
    fail "report.py --check did not name $key: $(cat "$tmp/apps_slow/stderr")"
done
grep -q "^report: target missed: mpi_lat_cost_us_8b_memif = .* us (median of the rounds), bound <= 1 us$" \
  "$tmp/apps_slow/stderr" ||
  fail "report.py --check did not name mpi_lat_cost_us_8b_memif: $(cat "$tmp/apps_slow/stderr")"
if (($(grep -c "target missed" "$tmp/apps_slow/stderr") != 5)); then
  fail "report.py --check named other targets: $(cat "$tmp/apps_slow/stderr")"
fi
python3 "$report_check" "$tmp/apps_slow/out/latest.json" \
  "$tmp/apps_slow/out/latest.md" || fail "the doctored report disagrees"
echo "report.py --check: 3 naming the UCX and Open MPI targets alone"
# TCP's larger sends a million times faster than measured, rdmaplane still
# a thousand times: TCP's best is then one of them, and exactly the
# best-against-best targets are missed, the equal-size ones met.
mkdir -p "$tmp/tcp_best"
cp -r "$tmp/met/raw" "$tmp/tcp_best/raw"
python3 - "$tmp/tcp_best/raw" <<'EOF' || fail "could not doctor the raw files"
import glob
import json
import os
import sys

paths = glob.glob(os.path.join(sys.argv[1], "r1_*_tcp_sizes.json"))
if len(paths) != 2:
    sys.exit("TCP's larger sends: %r" % paths)
for path in paths:
    doc = json.load(open(path))
    for stream in doc["streams"]:
        stream["gbps"] *= 1e6
    json.dump(doc, open(path, "w"))
EOF
status=0
check_report tcp_best || status=$?
((status == 3)) || fail "report.py --check with TCP far faster at larger \
sends exited $status: $(cat "$tmp/tcp_best/stderr")"
for key in write_gbps_best_vs_tcp_best write_gbps_best_memif_vs_tcp_best \
  read_gbps_best_memif_vs_tcp_best; do
  grep -q "^report: target missed: $key = .*, bound >= [0-9.]*x$" \
    "$tmp/tcp_best/stderr" ||
    fail "report.py --check did not name $key: $(cat "$tmp/tcp_best/stderr")"
done
if (($(grep -c "target missed" "$tmp/tcp_best/stderr") != 3)); then
  fail "report.py --check named other targets: $(cat "$tmp/tcp_best/stderr")"
fi
python3 "$report_check" "$tmp/tcp_best/out/latest.json" \
  "$tmp/tcp_best/out/latest.md" || fail "the doctored report disagrees"
python3 - "$tmp/tcp_best/out/latest.json" <<'EOF' ||
import json
import sys

doc = json.load(open(sys.argv[1]))
if doc["best"]["tcp_best_gbps"]["bytes"] == 65536:
    sys.exit("TCP's best is still its 64 KiB sends: %r" % doc["best"])
EOF
  fail "TCP's best did not move to a larger send size"
echo "report.py --check: 3 naming the best-against-best targets alone"
# rdmaplane's larger sizes a million times slower (so a thousand times
# slower than measured, its 64 KiB a thousand times faster): each best is
# its 64 KiB figure.
mkdir -p "$tmp/small_best"
cp -r "$tmp/met/raw" "$tmp/small_best/raw"
doctor "$tmp/small_best/raw" 1e-6 'r1_*_bw_sizes.json' ||
  fail "could not doctor the raw files"
check_report small_best || fail "report.py --check with rdmaplane's best at \
64 KiB exited non-zero: $(cat "$tmp/small_best/stderr")"
python3 - "$tmp/small_best/out/latest.json" <<'EOF' ||
import json
import sys

doc = json.load(open(sys.argv[1]))
for key in ("write_gbps_best", "read_gbps_best", "write_gbps_best_memif",
            "read_gbps_best_memif"):
    b = doc["best"][key]
    want = key.replace("best", "64k")
    if b != {"figure": want, "bytes": 65536} or doc[key] != doc[want]:
        sys.exit("%s: %r, not %s" % (key, b, want))
EOF
  fail "rdmaplane's best did not fall back to 64 KiB"
python3 "$report_check" "$tmp/small_best/out/latest.json" \
  "$tmp/small_best/out/latest.md" || fail "the doctored report disagrees"
echo "report.py: each best follows the measurements"
# Without --check a missed target leaves the exit status alone.
python3 "$report_py" --raw="$tmp/missed/raw" --out="$tmp/missed/out2" \
  --load="$tmp/empty/load.txt" --rounds=1 >/dev/null 2>&1 ||
  fail "report.py without --check failed on missed targets"
echo "report.py --check: 3 naming each missed target"
echo "PASS"
