#!/usr/bin/env bash
# rdmaplane_perf against one live rdmaplaned (adaptive engine), in short
# runs:
#   1. all four modes at two sizes with --iterations, --connections=2 and
#      --depth=4: one table row per mode and size under the expected header,
#      exactly iterations x connections requests (or samples) in each, the
#      --json file valid and agreeing with the table, --samples holding
#      every latency sample; progress on stderr, only the table on stdout;
#      every result carries its CPU cost (cpu_s, cpu_s_by_process with the
#      client and the daemon, engine_busy_s, cpu_us_per_op and, for
#      bandwidth, cpu_s_per_gb), positive and adding up, and the daemon's
#      pid is the one started here;
#   2. --duration_s (no --iterations): each bandwidth window lasts at least
#      that long, and the whole run at least that long per mode; --noverify
#      is recorded;
#   3. 4 MiB WRITEs and READs with --verify over a 16 MiB region (every
#      slot used and checked);
#   4. usage errors (unknown mode, a size that is not one, sizes out of
#      range) exit 2 with a message naming the bad value, write no JSON and
#      print nothing on stdout;
#   5. a daemon that is not there: exit 1 and a message naming its socket,
#      in the JSON too (ok false).
# The daemon then stops cleanly (SIGTERM, status 0, socket removed).
#
#   rdmaplane_perf_test.sh RDMAPLANED RDMAPLANE_PERF
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 RDMAPLANED RDMAPLANE_PERF" >&2
  exit 2
fi
daemon_bin="$1"
perf_bin="$2"
for bin in "$daemon_bin" "$perf_bin"; do
  [[ -x $bin ]] || { echo "FAIL: no executable at $bin" >&2; exit 1; }
done

# A private folder, short enough for a Unix socket path (108 bytes).
base="${TEST_TMPDIR:-/tmp}"
if ((${#base} > 60)); then base=/tmp; fi
tmp="$(mktemp -d "$base/rdp-perf.XXXXXX")"
sock="$tmp/d.sock"
daemon_log="$tmp/daemon.log"
daemon_pid=""

log() { echo "rdmaplane_perf_test: $*"; }

fail() {
  echo "FAIL: rdmaplane_perf_test: $*" >&2
  echo "----- daemon log -----" >&2
  cat "$daemon_log" >&2 2>/dev/null || true
  exit 1
}

# SIGTERM to the daemon, at most 5 s, then SIGKILL; sets stop_status.
stop_status=0
stop_daemon() {
  local pid="$daemon_pid" i
  daemon_pid=""
  stop_status=0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "rdmaplane_perf_test: the daemon still runs 5 s after SIGTERM; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" || true
    return 1
  fi
  wait "$pid" || stop_status=$?
}

# shellcheck disable=SC2317  # the EXIT trap
cleanup() {
  local status=$?
  set +e
  if [[ -n $daemon_pid ]]; then stop_daemon; fi
  if [[ -n ${TEST_UNDECLARED_OUTPUTS_DIR:-} ]]; then
    cp -- "$tmp"/*.log "$tmp"/*.out "$tmp"/*.err "$tmp"/*.json \
      "$TEST_UNDECLARED_OUTPUTS_DIR"/ 2>/dev/null
  fi
  rm -rf -- "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'echo "rdmaplane_perf_test: interrupted" >&2; exit 143' TERM INT HUP

log "working in $tmp; starting rdmaplaned --poll_mode=adaptive"
"$daemon_bin" --socket="$sock" --poll_mode=adaptive --log_level=warning \
  >"$daemon_log" 2>&1 &
daemon_pid=$!
for ((i = 0; i < 150; i++)); do
  [[ -S $sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || fail "the daemon exited during start-up"
  sleep 0.1
done
[[ -S $sock ]] || fail "the daemon did not create $sock within 15 s"

# run_perf NAME EXPECTED_STATUS ARGS...: runs rdmaplane_perf (at most 60 s)
# with stdout in $tmp/NAME.out and stderr in $tmp/NAME.err, and fails the
# test unless it exits with EXPECTED_STATUS. Sets PERF_SECONDS to its wall
# time.
PERF_SECONDS=0
run_perf() {
  local name="$1" expected="$2"
  shift 2
  local status=0 start
  log "$name: rdmaplane_perf $*"
  start="$(date +%s.%N)"
  timeout --kill-after=5 60 "$perf_bin" "$@" >"$tmp/$name.out" \
    2>"$tmp/$name.err" || status=$?
  PERF_SECONDS="$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')"
  sed 's/^/    stdout: /' "$tmp/$name.out"
  sed 's/^/    stderr: /' "$tmp/$name.err"
  if ((status != expected)); then
    fail "$name: exit status $status ($expected expected)"
  fi
}

# check NAME KEY=VALUE...: checks run NAME's stdout table, stderr, --json
# ($tmp/NAME.json) and, when there, --samples ($tmp/NAME.samples)
# against what was asked: modes, sizes, depth, connections, iterations (0:
# a duration run of duration_s) and verified.
check() {
  local name="$1"
  shift
  python3 - "$tmp/$name" "daemon_pid=$daemon_pid" "$@" <<'EOF' || fail "$name: see above"
import json
import os
import sys

sys.dont_write_bytecode = True
base = sys.argv[1]
want = dict(a.split("=", 1) for a in sys.argv[2:])
modes = want["modes"].split(",")
sizes = [int(s) for s in want["sizes"].split(",")]
depth = int(want["depth"])
conns = int(want["connections"])
iterations = int(want["iterations"])
duration = float(want.get("duration_s", "0"))
verified = want["verified"] == "true"
problems = []


def bad(msg):
    problems.append(msg)


def close(a, b, decimals):
    return abs(a - b) <= 0.5 * 10 ** -decimals + 1e-9


out = open(base + ".out").read().splitlines()
err = open(base + ".err").read()
header = ("mode         bytes depth conns   requests      GB/s      Mops   "
          "p50_us   p90_us   p99_us    max_us  cpu_us/op")
if not out or out[0] != header:
    bad("stdout does not start with the table header: %r" % out[:1])
rows = [line.split() for line in out[1:]]
expected_keys = [(m, s) for m in modes for s in sizes]
if [(r[0], int(r[1])) for r in rows if len(r) == 12] != expected_keys or \
        any(len(r) != 12 for r in rows):
    bad("table rows %r, expected one per mode and size %r" %
        ([r[:2] for r in rows], expected_keys))
if any(line.startswith("rdmaplane_perf:") for line in out):
    bad("progress on stdout")
for m, s in expected_keys:
    if "rdmaplane_perf: %s %d B: " % (m, s) not in err:
        bad("no progress line for %s %d B on stderr" % (m, s))

doc = json.load(open(base + ".json"))
if doc.get("tool") != "rdmaplane_perf" or doc.get("ok") is not True or \
        doc.get("error") != "":
    bad("json: tool/ok/error: %r %r %r" % (doc.get("tool"), doc.get("ok"),
                                           doc.get("error")))
cfg = doc.get("config", {})
for k, v in (("depth", depth), ("connections", conns),
             ("iterations", iterations), ("verified", verified)):
    if cfg.get(k) != v:
        bad("json config %s = %r, expected %r" % (k, cfg.get(k), v))
if iterations == 0 and cfg.get("duration_s") != duration:
    bad("json config duration_s = %r" % cfg.get("duration_s"))
for k in ("listen_socket", "connect_socket", "peer", "warmup",
          "region_bytes", "hugepages", "yield_after"):
    if k not in cfg:
        bad("json config has no " + k)
results = doc.get("results", [])
if [(r.get("mode"), r.get("bytes")) for r in results] != expected_keys:
    bad("json results %r" % [(r.get("mode"), r.get("bytes"))
                             for r in results])
for res, row in zip(results, rows):
    what = "%s %d B" % (res.get("mode"), res.get("bytes"))
    if len(row) != 12:
        continue
    latency = res["mode"].endswith("_lat")
    count = res["samples"] if latency else res["requests"]
    if int(row[4]) != count:
        bad("%s: table says %s requests, json %d" % (what, row[4], count))
    if iterations:
        if count != iterations * conns:
            bad("%s: %d requests, expected %d x %d" % (what, count,
                                                       iterations, conns))
    elif count <= 0:
        bad("%s: no requests in %g s" % (what, duration))
    if latency:
        if row[2:4] != ["1", str(conns)] or row[5:7] != ["-", "-"]:
            bad("%s: row %r" % (what, row))
        ps = [res[k] for k in ("min_us", "p50_us", "p90_us", "p99_us",
                                "max_us")]
        if not 0 < ps[0] <= ps[1] <= ps[2] <= ps[3] <= ps[4]:
            bad("%s: percentiles out of order: %r" % (what, ps))
        for col, k in zip(row[7:11], ("p50_us", "p90_us", "p99_us",
                                      "max_us")):
            if not close(float(col), res[k], 2):
                bad("%s: table %s %s, json %r" % (what, k, col, res[k]))
    else:
        if row[2:4] != [str(depth), str(conns)] or row[7:11] != ["-"] * 4:
            bad("%s: row %r" % (what, row))
        if res.get("depth") != depth or res.get("connections") != conns:
            bad("%s: json depth/connections %r/%r" % (
                what, res.get("depth"), res.get("connections")))
        if not (res["gbps"] > 0 and res["mops"] > 0 and res["seconds"] > 0):
            bad("%s: not positive: %r" % (what, res))
        # The JSON has seconds to 1e-6, so a short window's rate is known
        # only that closely.
        slack = 0.5e-6 / res["seconds"]
        for k, v in (("gbps", res["requests"] * res["bytes"] /
                      res["seconds"] / 1e9),
                     ("mops", res["requests"] / res["seconds"] / 1e6)):
            if abs(res[k] - v) > v * slack * 1.01 + 1e-6:
                bad("%s: %s %r is not requests (x bytes) / seconds (%r)" % (
                    what, k, res[k], v))
        for col, k in ((row[5], "gbps"), (row[6], "mops")):
            if not close(float(col), res[k], 3):
                bad("%s: table %s %s, json %r" % (what, k, col, res[k]))
        if iterations == 0 and res["seconds"] < duration:
            bad("%s: measured %g s, less than --duration_s=%g" % (
                what, res["seconds"], duration))
    # CPU cost of the window: present, positive, adding up.
    by = res.get("cpu_s_by_process")
    cpu = res.get("cpu_s")
    if not isinstance(by, dict) or set(by) != {"client", "daemon"}:
        bad("%s: cpu_s_by_process %r" % (what, by))
        continue
    if not (isinstance(cpu, float) and cpu > 0 and by["client"] > 0 and
            by["daemon"] >= 0 and res.get("engine_busy_s", 0) > 0 and
            res.get("cpu_us_per_op", 0) > 0):
        bad("%s: CPU figures not positive: cpu_s %r, by process %r, "
            "engine_busy_s %r, cpu_us_per_op %r" % (
                what, cpu, by, res.get("engine_busy_s"),
                res.get("cpu_us_per_op")))
        continue
    # The daemon's CPU time has the resolution of a clock tick: only a
    # timed window is long enough to be sure to see some.
    if iterations == 0 and not by["daemon"] > 0:
        bad("%s: the daemon used no CPU in %g s" % (what, res["seconds"]))
    if abs(cpu - by["client"] - by["daemon"]) > 2e-9:
        bad("%s: cpu_s %r is not the sum of %r" % (what, cpu, by))
    if res.get("engine_busy_s_by_process") != {"daemon":
                                                res["engine_busy_s"]}:
        bad("%s: engine_busy_s_by_process %r" % (
            what, res.get("engine_busy_s_by_process")))
    # cpu_s is printed to 1e-9 s, the derived figures to 9 digits.
    per_op = cpu * 1e6 / count
    if abs(res["cpu_us_per_op"] - per_op) > 1e-5 * per_op + 1e-3 / count:
        bad("%s: cpu_us_per_op %r, cpu_s x 1e6 / requests %r" % (
            what, res["cpu_us_per_op"], per_op))
    if not close(float(row[11]), res["cpu_us_per_op"], 3):
        bad("%s: table cpu_us/op %s, json %r" % (what, row[11],
                                                 res["cpu_us_per_op"]))
    if latency:
        if "cpu_s_per_gb" in res:
            bad("%s: cpu_s_per_gb in a latency result" % what)
    else:
        per_gb = cpu / (res["requests"] * res["bytes"] / 1e9)
        if not abs(res.get("cpu_s_per_gb", 0) - per_gb) <= 1e-5 * per_gb + \
                1e-9 / (res["requests"] * res["bytes"] / 1e9):
            bad("%s: cpu_s_per_gb %r, cpu_s per 1e9 bytes %r" % (
                what, res.get("cpu_s_per_gb"), per_gb))
daemons = doc.get("daemons")
if daemons != [{"label": "daemon", "socket": cfg.get("listen_socket"),
                "pid": int(want["daemon_pid"]), "mtu": 4096}]:
    bad("json daemons %r, expected the daemon started here (pid %s)" % (
        daemons, want["daemon_pid"]))

if os.path.exists(base + ".samples"):
    got = {}
    for line in open(base + ".samples"):
        m, s, us = line.split()
        if float(us) <= 0:
            bad("sample %r" % line)
        got[(m, int(s))] = got.get((m, int(s)), 0) + 1
    expected = {(r["mode"], r["bytes"]): r["samples"] for r in results
                if r["mode"].endswith("_lat")}
    if got != expected:
        bad("samples file holds %r, the json %r" % (got, expected))

if problems:
    print("\n".join("    " + p for p in problems))
    sys.exit(1)
print("    %d rows, json and%s table agree" % (
    len(rows), " samples," if os.path.exists(base + ".samples") else ""))
EOF
}

# 1. Every mode, two sizes, counted requests, two connections.
run_perf all 0 --listen_socket="$sock" --mode=write_bw,read_bw,write_lat,read_lat \
  --sizes=8,4096 --iterations=50 --warmup=4 --connections=2 --depth=4 \
  --json="$tmp/all.json" --samples="$tmp/all.samples"
check all modes=write_bw,read_bw,write_lat,read_lat sizes=8,4096 depth=4 \
  connections=2 iterations=50 verified=true

# 2. Timed runs.
run_perf timed 0 --listen_socket="$sock" --mode=write_bw,read_lat --sizes=64 \
  --duration_s=0.3 --depth=8 --noverify --json="$tmp/timed.json"
check timed modes=write_bw,read_lat sizes=64 depth=8 connections=1 \
  iterations=0 duration_s=0.3 verified=false
awk -v s="$PERF_SECONDS" 'BEGIN { exit !(s >= 0.6) }' ||
  fail "timed: two modes of --duration_s=0.3 took only $PERF_SECONDS s"

# 3. The largest size, every byte checked, requests rotating over 4 slots.
run_perf big 0 --listen_socket="$sock" --mode=write_bw,read_bw --sizes=4194304 \
  --iterations=8 --warmup=2 --depth=2 --region_mib=16 --verify \
  --json="$tmp/big.json"
check big modes=write_bw,read_bw sizes=4194304 depth=2 connections=1 \
  iterations=8 verified=true
python3 -c 'import json, sys
sys.exit(json.load(open(sys.argv[1]))["config"]["region_bytes"] != 16 << 20)' \
  "$tmp/big.json" || fail "big: the region is not 16 MiB"

# 4. Usage errors.
usage_error() {  # usage_error NAME TEXT ARGS...
  local name="$1" text="$2"
  shift 2
  run_perf "$name" 2 --listen_socket="$sock" --json="$tmp/$name.json" "$@"
  grep -qF -- "$text" "$tmp/$name.err" ||
    fail "$name: the message does not say '$text'"
  [[ ! -s $tmp/$name.out ]] || fail "$name: output on stdout"
  [[ ! -e $tmp/$name.json ]] || fail "$name: wrote JSON"
}
usage_error unknown_mode "unknown mode 'write_lag'" --mode=write_bw,write_lag
usage_error bad_size "'12k' is neither a size nor a range" --sizes=8,12k
usage_error bad_range "'64:8' is neither a size nor a range" --sizes=64:8
usage_error too_big "'8:8388608' is out of range: sizes are 1..4194304" \
  --sizes=8:8388608
usage_error zero_size "'0' is out of range" --sizes=0
usage_error no_size "--sizes: no size given" --sizes=,

# 5. No daemon at the socket.
run_perf absent 1 --listen_socket="$tmp/absent.sock" --iterations=10 \
  --json="$tmp/absent.json"
grep -qF "FAILED: open $tmp/absent.sock: " "$tmp/absent.err" ||
  fail "absent: the error does not name the socket"
[[ ! -s $tmp/absent.out ]] || fail "absent: output on stdout"
python3 - "$tmp/absent.json" "$tmp/absent.sock" <<'EOF' ||
import json
import sys

doc = json.load(open(sys.argv[1]))
if doc["ok"] is not False or sys.argv[2] not in doc["error"] or \
        doc["results"]:
    sys.exit("absent.json: ok %r, error %r, results %r" % (
        doc["ok"], doc["error"], doc["results"]))
EOF
  fail "absent: the JSON does not report the failure"

log "SIGTERM to the daemon: status 0 within 5 s, socket removed"
stop_daemon || fail "the daemon did not stop within 5 s of SIGTERM"
((stop_status == 0)) || fail "the daemon exited with status $stop_status"
[[ ! -e $sock ]] || fail "the daemon left $sock behind"
echo "PASS"
