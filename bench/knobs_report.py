#!/usr/bin/env python3
"""Turns bench/knobs' raw measurements into the knob report.

Reads what bench/knobs_run.sh leaves in --raw (rdmaplane_perf JSON per
round, knob and setting; eth_port_benchmark JSON per round), takes the
median of the rounds for every figure and setting, divides each by the same
figure at the knob's default setting, and writes into --out:

  knobs.json   every figure, setting, ratio and round
  knobs.md     one table per knob (also printed)
  knobs.png    each knob's figures relative to its default (gnuplot)

Standard library only (and report.py's helpers). Exit status 1 when a
figure is missing (a measurement failed) or gnuplot failed.
"""

import argparse
import datetime
import json
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left beside the sources
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (bench/report.py: shared helpers)

# knob -> (default setting, what it is)
KNOBS = {
    "burst": ("32", "--burst: frames or requests an engine moves per "
                    "connection and turn, and frames per port burst"),
    "mtu": ("4096", "--mtu: RoCE path MTU between two daemons over memif"),
    "hugepages": ("off", "clients' arenas (and, over memif, the daemons' DPDK "
                         "memory) on 2 MiB hugepages or regular pages"),
    "memif_zero_copy": ("copy", "the memif link in copy mode or in memif's "
                                "own zero-copy mode (the memif client, daemon "
                                "B, with zero-copy=yes), both daemons on "
                                "hugepages"),
    "zero_copy": ("copy", "a port sending WRITE payload copied into packet "
                          "buffers or in place from the client's memory "
                          "(eth_port_benchmark, net_ring, one process)"),
}

# figure -> (description, unit, (raw file suffix, mode, bytes) or bench name
# pattern)
PERF_FIGURES = {
    "local_write_gbps_64k": ("WRITE 64 KiB, one daemon", "GB/s",
                             ("local_bw", "write_bw", 65536, "gbps")),
    "local_mops_64b": ("64 B WRITEs, one daemon", "Mops",
                       ("local_mops", "write_bw", 64, "mops")),
    "memif_write_gbps_64k": ("WRITE 64 KiB, memif", "GB/s",
                             ("memif_bw", "write_bw", 65536, "gbps")),
    "memif_read_gbps_64k": ("READ 64 KiB, memif", "GB/s",
                            ("memif_bw", "read_bw", 65536, "gbps")),
    "memif_write_gbps_1m": ("WRITE 1 MiB, memif", "GB/s",
                            ("memif_bw", "write_bw", 1048576, "gbps")),
    "memif_read_gbps_1m": ("READ 1 MiB, memif", "GB/s",
                           ("memif_bw", "read_bw", 1048576, "gbps")),
    "memif_mops_64b": ("64 B WRITEs, memif", "Mops",
                       ("memif_mops", "write_bw", 64, "mops")),
}

KNOB_FIGURES = {
    "burst": ["local_mops_64b", "memif_mops_64b", "memif_write_gbps_64k"],
    "mtu": ["memif_write_gbps_64k", "memif_read_gbps_64k",
            "memif_write_gbps_1m", "memif_read_gbps_1m", "memif_mops_64b"],
    "hugepages": ["local_write_gbps_64k", "local_mops_64b",
                  "memif_write_gbps_64k", "memif_mops_64b"],
    "memifzc": ["memif_write_gbps_64k", "memif_read_gbps_64k",
                "memif_write_gbps_1m", "memif_read_gbps_1m", "memif_mops_64b"],
}

# eth_port_benchmark: figure -> (description, benchmark name without the
# zero_copy argument's value)
ZERO_COPY_FIGURES = {
    "send_gbps_1k_frames": (
        "sender alone, 64 KiB messages in frames of 1 KiB payload",
        "BM_SendOnly/bytes:65536/zero_copy:%d/payload:1024"),
    "send_gbps_4k_frames": (
        "sender alone, 64 KiB messages in frames of 4 KiB payload",
        "BM_SendOnly/bytes:65536/zero_copy:%d/payload:4096"),
    "ring_write_gbps_64k": (
        "RC WRITE of 64 KiB between two ports (MTU 4096)",
        "BM_RingWrite/bytes:65536/zero_copy:%d"),
    "ring_write_gbps_1m": (
        "RC WRITE of 1 MiB between two ports (MTU 4096)",
        "BM_RingWrite/bytes:1048576/zero_copy:%d"),
}

FILE = re.compile(r"r(\d+)_([a-z_]+?)_([0-9a-z]+)_(local|memif)_(bw|mops)\.json$")


def perf_rounds(raw, knob, settings):
    """{figure: {setting: {round: value}}} from rdmaplane_perf's JSON."""
    out = {}
    for name in sorted(os.listdir(raw)):
        m = FILE.match(name)
        if not m or m.group(2) != knob or m.group(3) not in settings:
            continue
        rnd, setting = int(m.group(1)), m.group(3)
        doc = report.load_json(os.path.join(raw, name))
        suffix = "%s_%s" % (m.group(4), m.group(5))
        for fig, (_, _, (want, mode, size, field)) in PERF_FIGURES.items():
            if want != suffix or fig not in KNOB_FIGURES[knob]:
                continue
            r = report.perf_result(doc, mode, size)
            if r is not None:
                out.setdefault(fig, {}).setdefault(setting, {})[rnd] = r[field]
    return out


def zero_copy_rounds(raw):
    """{figure: {"copy"|"in place": {round: GB/s}}} from eth_port_benchmark."""
    out = {}
    for name in sorted(os.listdir(raw)):
        m = re.match(r"r(\d+)_zero_copy\.json$", name)
        if not m:
            continue
        doc = report.load_json(os.path.join(raw, name)) or {}
        speeds = {b["name"]: b.get("bytes_per_second")
                  for b in doc.get("benchmarks", [])
                  if not b.get("error_occurred")}
        for fig, (_, pattern) in ZERO_COPY_FIGURES.items():
            for zc, setting in ((0, "copy"), (1, "in place")):
                v = speeds.get(pattern % zc)
                if v:
                    out.setdefault(fig, {}).setdefault(
                        setting, {})[int(m.group(1))] = v / 1e9
    return out


def summarize(knob, settings, rounds_by_fig, descriptions):
    default = KNOBS[knob][0]
    figures = {}
    missing = []
    for fig, (desc, unit) in descriptions.items():
        per = rounds_by_fig.get(fig, {})
        rows = {}
        base = report.median(per.get(default, {}))
        for s in settings:
            value = report.median(per.get(s, {}))
            if value is None:
                missing.append("%s %s=%s" % (fig, knob, s))
            rows[s] = {
                "value": value,
                "vs_default": (value / base) if value and base else None,
                "rounds": [per.get(s, {})[r] for r in sorted(per.get(s, {}))],
            }
        figures[fig] = {"description": desc, "unit": unit, "settings": rows}
    return {"default": default, "what": KNOBS[knob][1],
            "settings": settings, "figures": figures}, missing


def markdown(doc):
    lines = ["# rdmaplane knobs", ""]
    run = doc["run"]
    lines.append(
        "Run at %s on %d CPU(s) (%s); %d round(s), medians shown; %d s; "
        "commit %s%s. Each figure is also given relative to the knob's "
        "default (the daemon's default setting), measured in the same run."
        % (run["time"], run["cpus"], run["cpu_model"] or "unknown CPU",
           run["rounds"], run["seconds"], run["commit"],
           (" with uncommitted changes to " + run["dirty_files"])
           if run["dirty_files"] else ""))
    if run["quick"]:
        lines.append("")
        lines.append("**Quick run: very short measurements, not figures to "
                     "read.**")
    for knob in ("burst", "mtu", "hugepages", "memif_zero_copy", "zero_copy"):
        k = doc["knobs"].get(knob)
        lines += ["", "## %s" % knob, "", k["what"] + "; default: %s." %
                  k["default"], ""]
        if k.get("note"):
            lines += ["Not measured: %s." % k["note"]]
            continue
        figs = list(k["figures"])
        header = "| setting | " + " | ".join(
            "%s (%s)" % (k["figures"][f]["description"],
                         k["figures"][f]["unit"]) for f in figs) + " |"
        lines += [header, "|---" * (len(figs) + 1) + "|"]
        for s in k["settings"]:
            cells = []
            for f in figs:
                row = k["figures"][f]["settings"][s]
                cell = report.fmt(row["value"])
                if s != k["default"] and row["vs_default"] is not None:
                    cell += " (%s)" % report.fmt_ratio(row["vs_default"])
                cells.append(cell)
            name = s + (" (default)" if s == k["default"] else "")
            lines.append("| %s | %s |" % (name, " | ".join(cells)))
    if doc["failures"]:
        lines += ["", "Failed measurements:", ""]
        lines += ["- " + f for f in doc["failures"]]
    return "\n".join(lines) + "\n"


def plot(out, work, doc):
    """knobs.png: for each knob, every figure divided by its value at the
    default setting."""
    panels = []
    for knob in ("burst", "mtu", "hugepages", "memif_zero_copy", "zero_copy"):
        k = doc["knobs"][knob]
        if k.get("note"):
            continue
        figs = list(k["figures"])
        path = os.path.join(work, "%s.dat" % knob)
        with open(path, "w") as f:
            f.write("setting " + " ".join(
                '"%s"' % k["figures"][g]["description"] for g in figs) + "\n")
            for s in k["settings"]:
                vals = [k["figures"][g]["settings"][s]["vs_default"]
                        for g in figs]
                f.write('"%s" ' % s + " ".join(
                    "%.4f" % v if v is not None else "NaN" for v in vals)
                    + "\n")
        panels.append(
            "set title '%s (relative to %s)'\n"
            "plot for [i=2:%d] '%s' using i:xtic(1) with linespoints "
            "pointtype 7 title columnheader(i)\n"
            % (knob, k["default"], len(figs) + 1, path))
    rows = (len(panels) + 1) // 2
    script = (
        "set terminal pngcairo noenhanced size 1400,%d font ',10'\n"
        "set output '%s'\n"
        "set key outside bottom center horizontal maxrows 3 font ',9'\n"
        "set grid ytics\n"
        "set yrange [0:*]\n"
        "set ylabel 'x default'\n"
        "set multiplot layout %d,2\n%s"
        "unset multiplot\n"
        % (420 * rows, os.path.join(out, "knobs.png"), rows, "".join(panels)))
    return report.gnuplot(script, work)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--load", default="")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--quick", type=int, default=0)
    p.add_argument("--seconds", type=int, default=0)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--dirty_files", default="")
    p.add_argument("--cpus", type=int, default=0)
    p.add_argument("--cpu_model", default="")
    p.add_argument("--bursts", default="")
    p.add_argument("--mtus", default="")
    p.add_argument("--hugepages", type=int, default=0)
    p.add_argument("--hugepages_note", default="")
    p.add_argument("--failures", default="")
    a = p.parse_args()

    descriptions = {f: (d, u) for f, (d, u, _) in PERF_FIGURES.items()}
    knobs = {}
    missing = []
    for knob, settings in (("burst", a.bursts.split()),
                           ("mtu", a.mtus.split())):
        per = perf_rounds(a.raw, knob, settings)
        knobs[knob], miss = summarize(
            knob, settings, per,
            {f: descriptions[f] for f in KNOB_FIGURES[knob]})
        missing += miss
    if a.hugepages:
        per = perf_rounds(a.raw, "hugepages", ["off", "on"])
        knobs["hugepages"], miss = summarize(
            "hugepages", ["off", "on"], per,
            {f: descriptions[f] for f in KNOB_FIGURES["hugepages"]})
        missing += miss
        per = perf_rounds(a.raw, "memifzc", ["copy", "zerocopy"])
        # Settings named as the report shows them.
        per = {f: {("memif zero-copy" if s == "zerocopy" else s): v
                   for s, v in by.items()} for f, by in per.items()}
        knobs["memif_zero_copy"], miss = summarize(
            "memif_zero_copy", ["copy", "memif zero-copy"], per,
            {f: descriptions[f] for f in KNOB_FIGURES["memifzc"]})
        missing += miss
    else:
        for name in ("hugepages", "memif_zero_copy"):
            default = KNOBS[name][0]
            knobs[name] = {"default": default, "what": KNOBS[name][1],
                           "settings": [default], "figures": {},
                           "note": a.hugepages_note or "not measured"}
    knobs["zero_copy"], miss = summarize(
        "zero_copy", ["copy", "in place"], zero_copy_rounds(a.raw),
        {f: (d, "GB/s") for f, (d, _) in ZERO_COPY_FIGURES.items()})
    missing += miss

    doc = {
        "run": {
            "time": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"),
            "rounds": a.rounds, "quick": bool(a.quick), "seconds": a.seconds,
            "commit": a.commit, "dirty_files": a.dirty_files,
            "cpus": a.cpus, "cpu_model": a.cpu_model,
        },
        "knobs": knobs,
        "failures": [f for f in a.failures.splitlines() if f.strip()],
        "missing": missing,
    }
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        plot_error = plot(a.out, work, doc)
    if plot_error:
        doc["plot_error"] = plot_error
    text = markdown(doc)
    report.write_atomically(os.path.join(a.out, "knobs.json"),
                            json.dumps(doc, indent=1, sort_keys=True) + "\n")
    report.write_atomically(os.path.join(a.out, "knobs.md"), text)
    sys.stdout.write(text)
    for m in missing:
        print("knobs: no figure for %s" % m, file=sys.stderr)
    if plot_error:
        print("knobs: %s" % plot_error, file=sys.stderr)
    return 1 if missing or plot_error else 0


if __name__ == "__main__":
    sys.exit(main())
