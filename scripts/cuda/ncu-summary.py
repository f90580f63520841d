#!/usr/bin/env python3
"""Sums an Nsight Compute raw CSV (`ncu --metrics gpu__time_duration.sum --csv --page raw
--print-units base`) by kernel and launch shape: the kernels that take a step's GPU time,
as a markdown table. A kernel launched as one block (grid 1) over a large input is what
to look for first: candle's reductions to one value run so.

    python3 ncu-summary.py ncu.log [--top 30] [--steps 2]

With `--steps N` (the profiled run's steps, all alike) every figure is per step.
"""
import argparse
import collections
import csv
import sys


def rows_of(path):
    """The CSV lines of an ncu log (it interleaves the program's own output)."""
    with open(path, errors="replace") as f:
        return [line for line in f if line.startswith('"')]


UNIT_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}


def duration_ns(r):
    """A row's kernel time in ns: a `gpu__time_duration.sum` column (`--page raw`), or a
    Metric Name / Metric Value / Metric Unit row (`--page details`); None otherwise."""
    if "gpu__time_duration.sum" in r:
        value, unit = r["gpu__time_duration.sum"], "ns"
    elif r.get("Metric Name") == "gpu__time_duration.sum":
        value, unit = r.get("Metric Value", ""), r.get("Metric Unit", "ns")
    else:
        return None
    try:
        return float(value.replace(",", "")) * UNIT_NS.get(unit.strip() or "ns", 1.0)
    except ValueError:
        return None  # the units row of --page raw


def summarize(lines, top, steps=1):
    by = collections.defaultdict(lambda: [0.0, 0])
    for r in csv.DictReader(lines):
        ns = duration_ns(r)
        if ns is None:
            continue
        key = (r["Kernel Name"][:70], r.get("Grid Size", ""), r.get("Block Size", ""))
        by[key][0] += ns / 1e6 / steps
        by[key][1] += 1 / steps
    total = sum(v[0] for v in by.values())
    n = sum(v[1] for v in by.values())
    each = " a step" if steps > 1 else ""
    out = [f"- {n:.0f} kernel launch{'es' if n != 1 else ''}{each}, {total:.1f} ms of GPU time{each or ' in all'}", ""]
    out += ["| kernel | grid | block | calls | ms | share |", "|---|---|---|---|---|---|"]
    for (name, grid, block), (ms, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
        out.append(f"| `{name}` | {grid} | {block} | {n:g} | {ms:.2f} | {ms / max(total, 1e-9):.1%} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--steps", type=int, default=1, help="steps profiled: figures per step")
    a = ap.parse_args()
    lines = rows_of(a.log)
    if not lines:
        sys.exit(f"ncu-summary: no CSV rows in {a.log}: did ncu run? (see the log's end)")
    print(summarize(lines, a.top, max(a.steps, 1)))


if __name__ == "__main__":
    main()
