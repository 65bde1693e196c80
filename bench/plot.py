#!/usr/bin/env python3
"""Plots the JSON lines of one or more `weft-bench collectives --json` runs.

Two panels: time per iteration against size (log-log) and bus bandwidth against size (log x), one line per
(library, collective, algorithm, placement, type, op, ranks) -- only the parts of that key that differ between
the lines appear in the legend. Needs only the standard library and matplotlib (Debian: python3-matplotlib).

    python3 bench/plot.py run1.jsonl run2.jsonl --out collectives.png
"""

import argparse
import json
import sys
from collections import defaultdict

KEY_FIELDS = ("library", "collective", "algorithm", "inplace", "type", "op", "ranks")


def human_bytes(n):
    """1024-based size text as weft-bench prints it: 8B, 64K, 1M, 1.5G."""
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return ("%d%s" % (value, unit)) if value == int(value) else ("%.1f%s" % (value, unit))
        value /= 1024.0
    return "%dB" % n


def read_rows(paths):
    """Rows of every file; lines that are not collectives rows (other benchmarks, blanks) are skipped."""
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit("%s:%d: not JSON: %s" % (path, number, e))
                if not isinstance(row, dict) or "collective" not in row or "time_us" not in row:
                    continue
                rows.append(row)
    return rows


def series_of(rows):
    """Groups rows into lines keyed by KEY_FIELDS, each sorted by size (the last value of a repeated size wins)."""
    lines = defaultdict(dict)
    for row in rows:
        key = tuple(row.get(k) for k in KEY_FIELDS)
        lines[key][int(row["bytes"])] = row
    return {key: [points[b] for b in sorted(points)] for key, points in lines.items()}


def label_of(key, varying):
    parts = []
    for field, value in zip(KEY_FIELDS, key):
        if field not in varying:
            continue
        if field == "inplace":
            parts.append("in-place" if value else "out-of-place")
        elif field == "ranks":
            parts.append("%s ranks" % value)
        else:
            parts.append(str(value))
    return " ".join(parts) if parts else "weft"


def main(argv=None):
    parser = argparse.ArgumentParser(description="Plot weft-bench collectives JSON lines (time and busbw vs size).")
    parser.add_argument("inputs", nargs="+", help="JSON-lines files written by weft-bench collectives --json")
    parser.add_argument("--out", required=True, help="output image: .png or .svg")
    parser.add_argument("--title", default="", help="figure title (default: what all lines share)")
    parser.add_argument("--floor", action="store_true", help="also draw the copy floor (floor_us) of each line")
    args = parser.parse_args(argv)
    if not args.out.endswith((".png", ".svg")):
        parser.error("--out must end in .png or .svg")

    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    rows = read_rows(args.inputs)
    if not rows:
        raise SystemExit("no weft-bench collectives rows in %s" % ", ".join(args.inputs))
    lines = series_of(rows)
    keys = sorted(lines, key=lambda k: tuple(str(v) for v in k))
    varying = {f for i, f in enumerate(KEY_FIELDS) if len({k[i] for k in keys}) > 1}
    shared = [label_of(keys[0], {f}) for f in KEY_FIELDS if f not in varying]

    fig, (ax_time, ax_bw) = plt.subplots(1, 2, figsize=(13, 5))
    for key in keys:
        points = lines[key]
        sizes = [int(p["bytes"]) for p in points]
        label = label_of(key, varying)
        (line,) = ax_time.plot(sizes, [p["time_us"] for p in points], marker="o", markersize=3, label=label)
        ax_bw.plot(sizes, [p["busbw"] for p in points], marker="o", markersize=3, label=label, color=line.get_color())
        if args.floor and all("floor_us" in p for p in points):
            ax_time.plot(sizes, [p["floor_us"] for p in points], linestyle=":", color=line.get_color(),
                         label=label + " floor")

    size_ticks = FuncFormatter(lambda v, _pos: human_bytes(v) if v >= 1 else "")
    for ax in (ax_time, ax_bw):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(size_ticks)
        ax.set_xlabel("size")
        ax.grid(True, which="both", alpha=0.3)
    ax_time.set_yscale("log")
    ax_time.set_ylabel("time per iteration (us)")
    ax_time.set_title("time")
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    ax_bw.set_title("bus bandwidth")
    ax_bw.legend(fontsize="small")
    if args.floor:
        ax_time.legend(fontsize="x-small")  # tells the dotted floor lines apart
    fig.suptitle(args.title or ", ".join(shared) or "weft-bench collectives")
    fig.tight_layout()
    fig.savefig(args.out)
    print("wrote %s (%d lines, %d points)" % (args.out, len(keys), len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
