#!/usr/bin/env python3
"""Checks that a bench/compare report agrees with itself.

  report_check.py LATEST_JSON [LATEST_MD]

With LATEST_JSON alone: every `_vs_` ratio is recomputed from the rounds
the report lists (`rounds`): for each round, the figure's value (its
headline poll mode's, `FIGURE@MODE`, or `FIGURE` for the registration
figures and UCX's and Open MPI's) over the baseline window of the same
round that `ratio_of` names (`BASELINE@SETUP`, which must be the figure's
own setup: `memif` for `*_memif` figures, else `local`; or, for a native
figure serving as a baseline, write_* or read_* of the figure's own setup,
its headline poll mode's rounds, `BASELINE@MODE`), times converted to
seconds first (the unit read from the key: `_ns`, `_us`); the ratio is the
median of those pairs, and `pairs` must hold the same per-round ratios,
median, lowest, highest, count and baseline median. The flat ratio keys
and `ratios` agree; each rdmaplane figure is the median of its rounds and
each baseline the median of all its windows; and every rdmaplane figure
(write_*, read_*, reg_*, and ucx_* and mpi_* over memif) carries at least
one ratio; each latency cost is the median of its rounds' differences: the
verbs front end's, perftest's WRITE ping-pong minus the native one's, and
Open MPI's, its ping-pong minus perftest's SEND ping-pong. Bandwidth
against TCP: every rdmaplane bandwidth figure of a size (64 KiB to 4 MiB)
is divided by TCP's stream at that same size, and
each setup's WRITE and READ at their best by TCP at its best; each best
(`best`) names the candidate with the highest figure, and its figure and
rounds are that candidate's. With LATEST_MD too: every figure,
baseline value (the median of the windows paired), ratio and spread of
pairs printed in latest.md's comparison table, and every value of its
baseline table, is the JSON's (within the printed precision), every ratio
of the JSON is printed once, every target shows its unit (`x` for
ratios), every best figure shows the size it was taken at, every baseline
a ratio divides by is in the baseline table (but the native figures, which
have rows of their own), and the table of sizes shows each side's
figures, ratios and best.

Prints what disagrees and exits 1; exits 0 when all agrees. Used by
//bench:compare_smoke_test, which also feeds it broken reports to see it
fail. The titles and names of latest.md are looked up in bench/report.py
(next to this file); the values are recomputed here, not with it.
"""

import decimal
import importlib.util
import json
import os
import re
import statistics
import sys

sys.dont_write_bytecode = True


def load_report_module():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "report.py")
    spec = importlib.util.spec_from_file_location("report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seconds_per_unit(key):
    """1e-9 for a key in nanoseconds, 1e-6 in microseconds, else 1."""
    if re.search(r"_ns(_|$)", key):
        return 1e-9
    if re.search(r"_us(_|$)", key):
        return 1e-6
    return 1.0


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def median(values):
    return statistics.median(values) if values else None


def close_to(a, b):
    return is_number(a) and is_number(b) and abs(a - b) <= 1e-9 * max(
        abs(a), abs(b)) + 1e-15


def same_rounds(listed, want):
    """Whether `listed` (from the report) holds, round by round, the values
    recomputed in `want`, None where a round has none."""
    return isinstance(listed, list) and len(listed) == len(want) and all(
        (x is None) == (y is None) and (x is None or close_to(x, y))
        for x, y in zip(listed, want))


# The bandwidth sizes compared with TCP, by key suffix.
SIZES = {"64k": 65536, "256k": 262144, "1m": 1048576, "4m": 4194304}
BANDWIDTH = re.compile(r"^(write|read)_gbps_(64k|256k|1m|4m|best)(_memif)?$")
TCP_STREAM = re.compile(r"^tcp_(?:gbps(?:_(256k|1m|4m))?|(best)_gbps)$")


def best_candidates(key):
    """The keys a best figure chooses among, or None for another key."""
    if key == "tcp_best_gbps":
        return ["tcp_gbps"] + ["tcp_gbps_" + n for n in SIZES if n != "64k"]
    m = BANDWIDTH.match(key)
    if not m or m.group(2) != "best":
        return None
    return ["%s_gbps_%s%s" % (m.group(1), n, m.group(3) or "")
            for n in SIZES]


def check_best(doc, bad):
    """Each best names its highest candidate, with that one's figure and
    rounds; each bandwidth figure is divided by TCP's at the same size, or
    at its best when the figure is a best."""
    rounds = doc.get("rounds") or {}
    used = (doc.get("run") or {}).get("poll_mode_used") or {}
    best = doc.get("best") or {}
    for key in [k for k in doc if best_candidates(k)]:
        candidates = best_candidates(key)
        b = best.get(key) or {}
        chosen = b.get("figure")
        values = [doc.get(c) for c in candidates if is_number(doc.get(c))]
        if chosen not in candidates:
            bad("%s: best names %r, not one of %s" % (key, chosen,
                                                      candidates))
            continue
        if not values or doc.get(chosen) != max(values):
            bad("%s: best names %s (%r), but the highest of %s is %r" % (
                key, chosen, doc.get(chosen), candidates,
                max(values) if values else None))
        size = list(SIZES.values())[candidates.index(chosen)]
        if b.get("bytes") != size:
            bad("%s: best names %r bytes for %s" % (key, b.get("bytes"),
                                                    chosen))
        if doc.get(key) != doc.get(chosen):
            bad("%s = %r, but %s = %r" % (key, doc.get(key), chosen,
                                          doc.get(chosen)))
        if key == "tcp_best_gbps":
            where = ["local", "memif"]
        else:
            where = [used.get("memif" if key.endswith("_memif")
                              else "local")]
        for w in where:
            mine = rounds.get("%s@%s" % (key, w))
            theirs = rounds.get("%s@%s" % (chosen, w))
            if not isinstance(theirs, list) or not same_rounds(mine, theirs):
                bad("%s@%s: rounds %r, but %s's are %r" % (key, w, mine,
                                                          chosen, theirs))
    for key in doc:
        m = BANDWIDTH.match(key)
        if not m:
            continue
        want = ("tcp_best_gbps" if m.group(2) == "best" else
                "tcp_gbps" + ("" if m.group(2) == "64k" else
                              "_" + m.group(2)))
        if not any(p.get("figure") == key and p.get("baseline") == want
                   for p in (doc.get("ratio_of") or {}).values()):
            bad("%s is not compared with %s" % (key, want))
    for rkey, p in (doc.get("ratio_of") or {}).items():
        m = TCP_STREAM.match(p.get("baseline") or "")
        if not m:
            continue
        tsize = m.group(2) or m.group(1) or "64k"
        f = BANDWIDTH.match(p.get("figure") or "")
        if not f or f.group(2) != tsize:
            bad("%s divides %s by %s: not the same size" % (
                rkey, p.get("figure"), p.get("baseline")))


def is_native(key):
    """Whether a key is one of rdmaplane_perf's (the native API's)
    figures."""
    return key.startswith(("write_", "read_"))


def is_app(key):
    """Whether a key is a figure of UCX or Open MPI over rdmaplane (over
    TCP they are baselines, `ucx_tcp_*` and `mpi_tcp_*`; a cost is a
    difference)."""
    return (key.startswith(("ucx_", "mpi_")) and key.endswith("_memif") and
            "_cost_" not in key)


# Latency costs: key -> (figure, figure subtracted), keys of the rounds;
# MODE stands for the memif setup's headline poll mode.
DIFFERENCES = {
    "verbs_write_lat_cost_us_8b_memif": ("perftest_write_lat_us_8b@memif",
                                         "write_pingpong_p50_us_8b_memif@MODE"),
    "mpi_lat_cost_us_8b_memif": ("mpi_lat_us_8b_memif",
                                 "perftest_send_lat_us_8b@memif"),
}


def check_json(doc, bad):
    ratio_of = doc.get("ratio_of") or {}
    pairs = doc.get("pairs") or {}
    rounds = doc.get("rounds") or {}
    used = (doc.get("run") or {}).get("poll_mode_used") or {}
    ratio_keys = sorted(k for k in doc if "_vs_" in k)
    if not ratio_keys:
        bad("latest.json has no ratio")
    if set(ratio_keys) != set(doc.get("ratios", {})):
        bad("flat ratio keys and 'ratios' differ: %s" % sorted(
            set(ratio_keys) ^ set(doc.get("ratios", {}))))
    for rkey in ratio_keys:
        value = doc[rkey]
        if doc.get("ratios", {}).get(rkey) != value:
            bad("%s: %r flat, %r in 'ratios'" % (
                rkey, value, doc.get("ratios", {}).get(rkey)))
        pair = ratio_of.get(rkey)
        if not pair:
            bad("%s: no ratio_of entry" % rkey)
            continue
        fkey, bkey = pair.get("figure"), pair.get("baseline")
        windows = pair.get("baseline_windows")
        if fkey != rkey.split("_vs_")[0]:
            bad("%s: ratio_of names the figure %r" % (rkey, fkey))
            continue
        setup = "memif" if fkey.endswith("_memif") else "local"
        if is_native(bkey) and bkey.endswith("_memif") != (setup == "memif"):
            bad("%s: the native %s is not of %s's setup" % (rkey, bkey, fkey))
            continue
        want = "%s@%s" % (bkey, used.get(setup) if is_native(bkey) else setup)
        if windows != want:
            bad("%s: paired with the windows %r, not %s" % (
                rkey, windows, want))
            continue
        if (seconds_per_unit(fkey) == 1.0) != (seconds_per_unit(bkey) == 1.0):
            bad("%s: %s and %s are not both times" % (rkey, fkey, bkey))
            continue
        frounds = rounds.get("%s@%s" % (fkey, used.get(setup)),
                             rounds.get(fkey))
        brounds = rounds.get(windows)
        if not isinstance(frounds, list) or not isinstance(brounds, list) \
                or len(frounds) != len(brounds):
            bad("%s: rounds of %s (%r) and %s (%r)" % (
                rkey, fkey, frounds, windows, brounds))
            continue
        # The figure is the median of its rounds.
        fvals = [v for v in frounds if is_number(v)]
        if not close_to(doc.get(fkey), median(fvals)):
            bad("%s = %r, but the median of its rounds %r is %r" % (
                fkey, doc.get(fkey), frounds, median(fvals)))
        want = [f * seconds_per_unit(fkey) / (b * seconds_per_unit(bkey))
                if is_number(f) and is_number(b) and b > 0 else None
                for f, b in zip(frounds, brounds)]
        got = [x for x in want if x is not None]
        if not got:
            bad("%s: no round has both %s and %s" % (rkey, fkey, windows))
            continue
        if not close_to(value, median(got)):
            bad("%s = %r, but the median of its %d pairs %s / %s is %r" % (
                rkey, value, len(got), fkey, windows, median(got)))
        p = pairs.get(rkey) or {}
        listed = p.get("ratios")
        if not same_rounds(listed, want):
            bad("%s: pairs %r, recomputed %r" % (rkey, listed, want))
        bvals = [v for v in brounds if is_number(v)]
        for k, v in (("median", median(got)), ("min", min(got)),
                     ("max", max(got)), ("baseline_median", median(bvals))):
            if not close_to(p.get(k), v):
                bad("%s: pairs %s %r, recomputed %r" % (rkey, k, p.get(k), v))
        if p.get("count") != len(got):
            bad("%s: pairs count %r, recomputed %d" % (
                rkey, p.get("count"), len(got)))
    # Each baseline is the median of all its windows, every setup's.
    windows = {}
    for key, vals in rounds.items():
        name, _, where = key.partition("@")
        if where in ("local", "memif"):
            windows.setdefault(name, []).extend(
                v for v in vals if is_number(v))
    for name, vals in windows.items():
        if vals and not close_to(doc.get(name), median(vals)):
            bad("%s = %r, but the median of its %d windows is %r" % (
                name, doc.get(name), len(vals), median(vals)))
    # The latency costs: one figure minus another, round by round, and the
    # median of those.
    for cost, (more, less) in DIFFERENCES.items():
        if cost not in doc:
            continue
        more_rounds = rounds.get(more.replace("MODE", str(used.get(
            "memif")))) or []
        less_rounds = rounds.get(less.replace("MODE", str(used.get(
            "memif")))) or []
        want = [m - s if is_number(m) and is_number(s) else None
                for m, s in zip(more_rounds, less_rounds)]
        listed = rounds.get(cost)
        if not same_rounds(listed, want):
            bad("%s: rounds %r, recomputed %r" % (cost, listed, want))
        got = [x for x in want if x is not None]
        if not (doc[cost] is None and not got) and not close_to(
                doc[cost], median(got)):
            bad("%s = %r, but the median of its rounds' differences is %r" %
                (cost, doc[cost], median(got)))
    check_best(doc, bad)
    with_ratio = {r.split("_vs_")[0] for r in ratio_keys}
    for key, v in doc.items():
        if ((key.startswith(("write_", "read_", "reg_")) or is_app(key))
                and "_vs_" not in key and is_number(v)
                and key not in with_ratio):
            bad("the rdmaplane figure %s has no ratio to a baseline" % key)


def printed_number(text):
    """(value, half of the last printed digit) of '6.90 GB/s', '5.84x',
    '8.2e-05'; None for 'failed' or '-'."""
    m = re.match(r"^(-?[0-9.]+(?:e[-+]?[0-9]+)?)x?(?: .*)?$", text.strip())
    if not m:
        return None
    d = decimal.Decimal(m.group(1))
    return float(d), 0.5 * 10.0 ** d.as_tuple().exponent


def check_size_table(doc, lines, report, agree, bad):
    """latest.md's table of sizes: TCP's figure and rdmaplane's with their
    ratios to TCP at the same size, at every size, and a * on exactly the
    candidates each best names."""
    try:
        start = lines.index(report.SIZE_TABLE_HEAD)
    except ValueError:
        bad("latest.md has no table of bandwidth against TCP by size")
        return
    chosen = {b.get("figure") for b in (doc.get("best") or {}).values()}
    names = {report.size_name(b): n for n, b in SIZES.items()}
    seen = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 6 or cells[0] not in names:
            bad("size table row %r" % line)
            continue
        n = names[cells[0]]
        seen.append(n)
        keys = ["tcp_gbps" + ("" if n == "64k" else "_" + n)] + [
            "%s_gbps_%s%s" % (op, n, setup) for setup in ("", "_memif")
            for op in ("write", "read")]
        for key, cell in zip(keys, cells[1:]):
            starred = cell.endswith(" *")
            if starred != (key in chosen):
                bad("size table: %s shown %s a best" % (
                    key, "as" if starred else "not as"))
            cell = cell[:-2] if starred else cell
            m = re.match(r"^(\S+)(?: \((\S+)\))?$", cell)
            if not m:
                bad("size table: %s shown as %r" % (key, cell))
                continue
            agree(key + " (size table)", m.group(1), doc.get(key))
            if key.startswith("tcp_"):
                continue
            if m.group(2) is None:
                bad("size table: %s without its ratio" % key)
            else:
                agree(key + "_vs_tcp (size table)", m.group(2),
                      doc.get(key + "_vs_tcp"))
    if seen != list(SIZES):
        bad("size table rows %s, not %s" % (seen, list(SIZES)))


def check_md(doc, md, report, bad):
    titles = dict(report.TABLE_ROWS)
    names = {v: k for k, v in report.BASELINE_NAMES.items()}
    descs = {v[0]: k for k, v in report.FIGURES.items()}
    targets = {t["key"]: t for t in doc.get("targets", [])}

    def agree(what, cell, value):
        got = printed_number(cell)
        if got is None or not is_number(value):
            bad("%s: latest.md shows %r, latest.json has %r" % (
                what, cell, value))
        elif abs(got[0] - value) > got[1] * 1.0001 + 1e-12:
            bad("%s: latest.md shows %r, latest.json has %r" % (
                what, cell, value))

    best = doc.get("best") or {}

    def names_best(key, cell):
        """A best figure's cell must end with the size it was taken at."""
        if key not in best:
            return
        b = best[key].get("bytes")
        if not b or not cell.endswith(" at " + report.size_name(b)):
            bad("%s: latest.md shows %r, not at %r bytes (its best)" % (
                key, cell, b))

    lines = md.splitlines()
    check_size_table(doc, lines, report, agree, bad)
    try:
        start = lines.index("| figure | rdmaplane | rounds | baseline | "
                            "baseline value | ratio | pairs | target | met |")
    except ValueError:
        bad("latest.md has no comparison table")
        return
    shown = []
    key = None
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 9:
            bad("comparison row with %d cells: %r" % (len(cells), line))
            continue
        (title, value, _, base_name, base_value, ratio, spread, target,
         _) = cells
        if title:
            if title not in titles:
                bad("unknown figure in latest.md: %r" % title)
                key = None
                continue
            key = titles[title]
            agree(key, value, doc.get(key))
            names_best(key, value)
        if key is None or base_name == "-":
            continue
        base = names.get(base_name)
        if base is None:
            bad("%s: unknown baseline %r" % (key, base_name))
            continue
        rkeys = [r for r, p in doc.get("ratio_of", {}).items()
                 if p.get("figure") == key and p.get("baseline") == base]
        if len(rkeys) != 1:
            bad("%s against %s: ratio keys %r" % (key, base, rkeys))
            continue
        p = doc.get("pairs", {}).get(rkeys[0], {})
        agree("%s (baseline of %s)" % (base, key), base_value,
              p.get("baseline_median"))
        names_best(base, base_value)
        agree(rkeys[0], ratio, doc.get(rkeys[0]))
        m = re.match(r"^(\S+) - (\S+) \((\d+)\)$|^\((\d+)\)$", spread)
        if not m:
            bad("%s: pairs shown as %r" % (rkeys[0], spread))
        elif m.group(4) is not None:
            if p.get("count") != 1:
                bad("%s: latest.md shows 1 pair, latest.json %r" % (
                    rkeys[0], p.get("count")))
        else:
            agree(rkeys[0] + " (lowest pair)", m.group(1), p.get("min"))
            agree(rkeys[0] + " (highest pair)", m.group(2), p.get("max"))
            if int(m.group(3)) != p.get("count"):
                bad("%s: latest.md shows %s pairs, latest.json %r" % (
                    rkeys[0], m.group(3), p.get("count")))
        shown.append(rkeys[0])
        for part in filter(None, (p.strip() for p in target.split(","))):
            m = re.match(r"^[≥≤] ([0-9.]+)(x| (Mops|ns|us|GB/s|s/GB|us/op))$",
                         part)
            if not m:
                bad("%s: target %r shows no unit" % (key, part))
                continue
            tkey = rkeys[0] if m.group(2) == "x" else key
            t = targets.get(tkey)
            if not t or float(m.group(1)) != t["bound"] or (
                    m.group(2) != "x" and m.group(3) != t.get("unit")):
                bad("%s: target %r is not latest.json's %r" % (tkey, part, t))
    ratio_keys = {k for k in doc if "_vs_" in k}
    if sorted(shown) != sorted(ratio_keys):
        bad("ratios shown more than once or not at all: %s" % sorted(
            set(shown) ^ ratio_keys | {k for k in shown if shown.count(k) > 1}))
    try:
        start = lines.index("| baseline | value |")
    except ValueError:
        bad("latest.md has no baseline table")
        return
    seen = set()
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        desc, value = [c.strip() for c in line.strip("|").split("|")]
        if desc not in descs:
            bad("unknown baseline in latest.md: %r" % desc)
            continue
        agree(descs[desc], value, doc.get(descs[desc]))
        names_best(descs[desc], value)
        seen.add(descs[desc])
    # Native figures serving as baselines have rows of their own instead.
    used = {p.get("baseline") for p in doc.get("ratio_of", {}).values()
            if not is_native(p.get("baseline") or "")}
    if used - seen:
        bad("baselines missing from the baseline table: %s" % sorted(
            used - seen))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: report_check.py LATEST_JSON [LATEST_MD]")
    problems = []
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    check_json(doc, problems.append)
    if len(sys.argv) == 3:
        with open(sys.argv[2]) as f:
            check_md(doc, f.read(), load_report_module(), problems.append)
    for p in problems:
        print("report_check: " + p)
    if problems:
        return 1
    print("report_check: %d ratios recomputed%s" % (
        sum(1 for k in doc if "_vs_" in k),
        ", latest.md agrees with latest.json" if len(sys.argv) == 3 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
