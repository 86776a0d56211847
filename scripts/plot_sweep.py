#!/usr/bin/env python3
"""PNG plots of a scripts/sweep.sh CSV: deepinfer vs the HF transformers baseline over concurrency.

  python3 scripts/plot_sweep.py sweep-dir/results.csv --out sweep-dir

Writes, per metric, one PNG with one panel per (input_len, output_len) pair and one line per implementation:
  output_throughput.png (output tok/s), decode_throughput.png (steady-state decode tok/s), ttft.png (TTFT p50),
  tpot.png (TPOT p50), speedup.png (deepinfer / HF for output tok/s and decode tok/s, where both ran).
Also prints a speedup table (markdown) to stdout. Needs matplotlib (scripts/bench_requirements.txt).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from collections import defaultdict

METRICS = [  # (column, file, y label, log y)
    ("output_tok_s", "output_throughput.png", "output tokens / s", True),
    ("decode_tok_s", "decode_throughput.png", "decode tokens / s (batch / TPOT)", True),
    ("ttft_p50_ms", "ttft.png", "TTFT p50 (ms)", True),
    ("tpot_p50_ms", "tpot.png", "TPOT p50 (ms)", True),
]
STYLE = {"deepinfer": dict(color="tab:blue", marker="o"), "hf": dict(color="tab:orange", marker="s")}


def read_rows(path: str):
    """{(input_len, output_len): {impl: {concurrency: row}}} with numeric fields as floats (nan if empty)."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"plot_sweep: {path} has no data rows")
    need = {"impl", "concurrency", "input_len", "output_len", "output_tok_s", "decode_tok_s", "ttft_p50_ms",
            "tpot_p50_ms", "status"}
    missing = need - set(rows[0])
    if missing:
        raise SystemExit(f"plot_sweep: {path} lacks columns {sorted(missing)}")
    data = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r["status"] != "ok":
            continue
        for k in ("output_tok_s", "decode_tok_s", "ttft_p50_ms", "tpot_p50_ms"):
            r[k] = float(r[k]) if r[k] not in ("", None) else math.nan
        data[(int(r["input_len"]), int(r["output_len"]))][r["impl"]][int(r["concurrency"])] = r
    return data


def panels(n):
    cols = min(n, 3)
    return cols, (n + cols - 1) // cols


def plot_metric(plt, data, column, fname, ylabel, logy, out_dir, title):
    keys = sorted(data)
    cols, nrows = panels(len(keys))
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, 3.6 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for impl in sorted(data[key]):
            pts = sorted((c, r[column]) for c, r in data[key][impl].items() if not math.isnan(r[column]))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=impl, **STYLE.get(impl, {}))
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_title(f"input {key[0]}, output {key[1]}")
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    path = os.path.join(out_dir, fname)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def speedups(data):
    """[(input, output, concurrency, output_tok_s ratio, decode_tok_s ratio)] where both implementations ran."""
    out = []
    for key in sorted(data):
        di, hf = data[key].get("deepinfer", {}), data[key].get("hf", {})
        for c in sorted(set(di) & set(hf)):
            ratio = lambda col: di[c][col] / hf[c][col] if hf[c][col] > 0 else math.nan  # noqa: E731
            out.append((key[0], key[1], c, ratio("output_tok_s"), ratio("decode_tok_s")))
    return out


def plot_speedup(plt, table, out_dir, title):
    if not table:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for key in sorted({(t[0], t[1]) for t in table}):
        pts = [t for t in table if (t[0], t[1]) == key]
        line, = ax.plot([t[2] for t in pts], [t[3] for t in pts], marker="o", label=f"output tok/s, in {key[0]} out {key[1]}")
        ax.plot([t[2] for t in pts], [t[4] for t in pts], marker="x", linestyle="--", color=line.get_color(),
                label=f"decode tok/s, in {key[0]} out {key[1]}")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("deepinfer / HF transformers")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    path = os.path.join(out_dir, "speedup.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="results.csv written by scripts/sweep.sh")
    ap.add_argument("--out", help="folder for the PNGs (default: the CSV's folder)")
    ap.add_argument("--title", default="", help="figure title prefix (default: from hardware.txt's device line)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_sweep: matplotlib is missing: pip install -r scripts/bench_requirements.txt")
    out_dir = args.out or os.path.dirname(os.path.abspath(args.csv))
    os.makedirs(out_dir, exist_ok=True)
    title = args.title
    hw = os.path.join(os.path.dirname(os.path.abspath(args.csv)), "hardware.txt")
    if not title and os.path.exists(hw):
        for line in open(hw):
            if line.startswith("model:"):
                title = os.path.basename(line.split(":", 1)[1].strip().rstrip("/"))
    data = read_rows(args.csv)
    written = [plot_metric(plt, data, col, fname, label, logy, out_dir, f"{title} {label}".strip())
               for col, fname, label, logy in METRICS]
    table = speedups(data)
    sp = plot_speedup(plt, table, out_dir, f"{title} speedup over HF".strip())
    if sp:
        written.append(sp)
    for w in written:
        print(f"[plot] wrote {w}", file=sys.stderr)
    if table:
        print("| input | output | concurrency | output tok/s ratio | decode tok/s ratio |")
        print("|---|---|---|---|---|")
        for t in table:
            print(f"| {t[0]} | {t[1]} | {t[2]} | {t[3]:.2f}x | {t[4]:.2f}x |")


if __name__ == "__main__":
    main()
