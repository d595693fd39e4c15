#!/usr/bin/env python3
"""Checks that a bench/compare report agrees with itself.

  report_check.py LATEST_JSON [LATEST_MD]

With LATEST_JSON alone: every `_vs_` ratio equals its figure divided by
its baseline (times converted to seconds first, the unit read from the
key: `_ns`, `_us`), as latest.json's `ratio_of` pairs them, the figure
being the key's part before `_vs_`; the flat ratio keys and `ratios` agree;
and every rdmaplane figure (write_*, read_*, reg_*) carries at least one
ratio. With LATEST_MD too: every figure, baseline value and ratio printed
in latest.md's comparison table, and every value of its baseline table,
is the JSON's (within the printed precision), every ratio of the JSON is
printed once, and every target shows its unit (`x` for ratios).

Prints what disagrees and exits 1; exits 0 when all agrees. Used by
//bench:compare_smoke_test, which also feeds it broken reports to see it
fail. The titles and names of latest.md are looked up in bench/report.py
(next to this file); the values are compared, not recomputed with it.
"""

import decimal
import importlib.util
import json
import os
import re
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


def check_json(doc, bad):
    ratio_of = doc.get("ratio_of") or {}
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
        if fkey != rkey.split("_vs_")[0]:
            bad("%s: ratio_of names the figure %r" % (rkey, fkey))
            continue
        f, b = doc.get(fkey), doc.get(bkey)
        if not (is_number(f) and is_number(b) and b > 0 and is_number(value)):
            bad("%s: figure %s=%r, baseline %s=%r, ratio %r" % (
                rkey, fkey, f, bkey, b, value))
            continue
        if (seconds_per_unit(fkey) == 1.0) != (seconds_per_unit(bkey) == 1.0):
            bad("%s: %s and %s are not both times" % (rkey, fkey, bkey))
            continue
        want = f * seconds_per_unit(fkey) / (b * seconds_per_unit(bkey))
        if abs(value - want) > 1e-9 * abs(want):
            bad("%s = %r, but %s / %s = %r / %r = %r" % (
                rkey, value, fkey, bkey, f, b, want))
    with_ratio = {r.split("_vs_")[0] for r in ratio_keys}
    for key, v in doc.items():
        if (key.startswith(("write_", "read_", "reg_")) and "_vs_" not in key
                and is_number(v) and key not in with_ratio):
            bad("the rdmaplane figure %s has no ratio to a baseline" % key)


def printed_number(text):
    """(value, half of the last printed digit) of '6.90 GB/s', '5.84x',
    '8.2e-05'; None for 'failed' or '-'."""
    m = re.match(r"^(-?[0-9.]+(?:e[-+]?[0-9]+)?)x?(?: .*)?$", text.strip())
    if not m:
        return None
    d = decimal.Decimal(m.group(1))
    return float(d), 0.5 * 10.0 ** d.as_tuple().exponent


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

    lines = md.splitlines()
    try:
        start = lines.index("| figure | rdmaplane | rounds | baseline | "
                            "baseline value | ratio | target | met |")
    except ValueError:
        bad("latest.md has no comparison table")
        return
    shown = []
    key = None
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 8:
            bad("comparison row with %d cells: %r" % (len(cells), line))
            continue
        title, value, _, base_name, base_value, ratio, target, _ = cells
        if title:
            if title not in titles:
                bad("unknown figure in latest.md: %r" % title)
                key = None
                continue
            key = titles[title]
            agree(key, value, doc.get(key))
        if key is None or base_name == "-":
            continue
        base = names.get(base_name)
        if base is None:
            bad("%s: unknown baseline %r" % (key, base_name))
            continue
        agree("%s (baseline of %s)" % (base, key), base_value, doc.get(base))
        rkeys = [r for r, p in doc.get("ratio_of", {}).items()
                 if p.get("figure") == key and p.get("baseline") == base]
        if len(rkeys) != 1:
            bad("%s against %s: ratio keys %r" % (key, base, rkeys))
            continue
        agree(rkeys[0], ratio, doc.get(rkeys[0]))
        shown.append(rkeys[0])
        for part in filter(None, (p.strip() for p in target.split(","))):
            m = re.match(r"^[≥≤] ([0-9.]+)(x| (Mops|ns|us|GB/s))$", part)
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
        seen.add(descs[desc])
    used = {p.get("baseline") for p in doc.get("ratio_of", {}).values()}
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
