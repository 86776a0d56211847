#!/usr/bin/env python3
"""Summarise scripts/gpu_profile.sh's Nsight Compute CSVs: GPU time per kernel name for one
decode step (batch 1 and 16) and for a 16x128 prefill, largest first.
   python3 scripts/ncu_summary.py DIR   (DIR holds ncu_b1_p0.csv, ncu_b1_d4.csv, ...)"""
import collections
import csv
import io
import re
import sys


def kernel_name(k):
    k = k.replace("(anonymous namespace)::", "").replace("void ", "")
    return re.sub(r"\(.*$", "", k)


def load(out, name):
    rows = []
    text = open(f"{out}/ncu_{name}.csv", errors="replace").read()
    lines = [l for l in text.splitlines() if l.startswith('"')]
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            ns = float(r["Metric Value"].replace(",", ""))
            rows.append((kernel_name(r["Kernel Name"]), ns / 1e3))
    return rows


def table(title, rows, div, top=22):
    agg = collections.defaultdict(lambda: [0, 0.0])
    for k, us in rows:
        agg[k][0] += 1
        agg[k][1] += us
    tot = sum(v[1] for v in agg.values()) / div
    print(f"\n== {title}: {len(rows) / div:.0f} kernels, {tot:.1f} us of kernel time per forward")
    for k, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {us / div:9.1f} us {100 * us / div / max(tot, 1e-9):5.1f}%  x{n / div:6.1f}  {k[:90]}")


def main():
    out = sys.argv[1]
    # decode: what the run with 4 decode steps launched beyond the run without (load + prefill)
    for b, p in (("b1", "p0"), ("b16", "p128")):
        base, dec = load(out, f"{b}_{p}"), load(out, f"{b}_d4")
        table(f"{b} decode step (4 steps averaged)", dec[len(base):], 4)
        if p == "p128":
            table(f"{b} prefill 16x128 (the whole run: load kernels included)", base, 1)


if __name__ == "__main__":
    main()
