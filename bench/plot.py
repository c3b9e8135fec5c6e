#!/usr/bin/env python3
"""plot.py — draws gccl-bench's JSON results (gccl-bench -J FILE).

Two PNGs:
  PREFIX-busbw.png    bus bandwidth (on uncompressed bytes) against message size,
                      one line per codec (and algorithm, for dense rows), per link rate;
  PREFIX-speedup.png  speed-up against the fastest dense algorithm versus the link
                      rate, one line per codec, at one message size (runs of
                      gccl-bench --dense-best at several --link-gbps, one JSON each
                      or concatenated).
It also prints each codec's break-even link rate (where its speed-up crosses 1,
interpolated on log scales) when the runs bracket it.

  gccl-bench allreduce -r 8 --ranks-per-node 1 --link-gbps 1 --dense-best \\
      --codec "fp16 sign topk:ratio=0.01" -b 1M -e 100M -f 10 -J g1.json
  PYENV_VERSION=system python3 bench/plot.py g1.json g10.json -o results/allreduce

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import math
import sys
from collections import defaultdict


def load(paths):
    records = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, list):
            sys.exit(f"plot.py: {path}: expected a JSON list of records (gccl-bench -J)")
        records.extend(data)
    return records


def label(r):
    """A codec's rows share a line; dense rows are told apart by algorithm."""
    codec, algo = r.get("codec", "none"), r.get("algo", "auto")
    return f"dense ({algo})" if codec == "none" else (codec if algo == "auto" else f"{codec} ({algo})")


def size_text(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b} B"


def setting(records):
    r = records[0]
    return f"{r.get('collective', '?')}, {r.get('type', '?')}, p = {r.get('p', '?')}, L = {r.get('L', '?')}"


def plot_busbw(plt, records, out):
    """One colour per codec (or dense algorithm), one line style per link rate."""
    lines = defaultdict(list)
    for r in records:
        if r.get("busbw") is not None:
            lines[(label(r), r.get("link_gbps"))].append((r["size"], r["busbw"]))
    if not lines:
        print("plot.py: no busbw values to draw")
        return
    labels = sorted({k[0] for k in lines})
    rates = sorted({k[1] for k in lines}, key=lambda g: -1 if g is None else g)
    colours = plt.get_cmap("tab20")
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(11, 6))
    for (name, rate), pts in sorted(lines.items(), key=lambda kv: (labels.index(kv[0][0]), rates.index(kv[0][1]))):
        pts.sort()
        text = name if len(rates) == 1 else f"{name}, " + ("no link model" if rate is None else f"{rate:g} Gbit/s")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=text,
                color=colours(labels.index(name) % 20), linestyle=styles[rates.index(rate) % len(styles)])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw on uncompressed bytes (GB/s)")
    time_kind = records[0].get("time", "wall")
    ax.set_title(f"gccl-bench: busbw against size ({setting(records)}; {time_kind} time)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"plot.py: wrote {out}")


def break_even(pts):
    """The link rate where the speed-up crosses 1, log-interpolated; None if not bracketed."""
    for (g0, s0), (g1, s1) in zip(pts, pts[1:]):
        if s0 > 0 and s1 > 0 and (s0 - 1) * (s1 - 1) <= 0 and s0 != s1:
            t = (0 - math.log(s0)) / (math.log(s1) - math.log(s0))
            return math.exp(math.log(g0) + t * (math.log(g1) - math.log(g0)))
    return None


def plot_speedup(plt, records, size, out):
    sized = [r for r in records if r.get("speedup") is not None and r.get("link_gbps") is not None]
    if not sized:
        print("plot.py: no speed-ups with a link rate (run gccl-bench --dense-best with --link-gbps)")
        return
    sizes = sorted({r["size"] for r in sized})
    if size is None:
        size = sizes[-1]
    sized = [r for r in sized if r["size"] == size and r.get("codec", "none") != "none"]
    if not sized:
        print(f"plot.py: no compressed rows of size {size} (sizes: {sizes}): no speed-up plot")
        return
    lines = defaultdict(dict)
    for r in sized:
        lines[label(r)][r["link_gbps"]] = r["speedup"]  # the last run of a rate wins
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for key in sorted(lines):
        pts = sorted(lines[key].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key)
        be = break_even(pts)
        if be is not None:
            print(f"plot.py: {key}: break-even at {be:.3g} Gbit/s")
        elif len(pts) > 1:
            side = "faster" if pts[0][1] > 1 else "slower"
            print(f"plot.py: {key}: {side} than dense at every measured rate")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link rate (Gbit/s)")
    ax.set_ylabel("speed-up against the best dense algorithm")
    ax.set_title(f"gccl-bench: speed-up at {size_text(size)} ({setting(sized)})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if len({r["link_gbps"] for r in sized}) == 1:
        print("plot.py: only one link rate in the input: the speed-up plot has one point per codec")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"plot.py: wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="gccl-bench -J output files")
    ap.add_argument("-o", "--out", default="gccl-bench", help="prefix of the PNGs (default: gccl-bench)")
    ap.add_argument("--size", type=int, help="message size in bytes of the speed-up plot (default: the largest)")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py: needs matplotlib (Debian: apt-get install python3-matplotlib)")
    records = load(args.json)
    if not records:
        sys.exit("plot.py: no records in the input")
    plot_busbw(plt, records, f"{args.out}-busbw.png")
    plot_speedup(plt, records, args.size, f"{args.out}-speedup.png")


if __name__ == "__main__":
    main()
