#!/usr/bin/env python3
"""Median table of scripts/bench-speed.sh's JSON lines: python3 bench-speed-summary.py FILE."""
import json
import statistics
import sys


def figure(what, r):
    """The record's headline: GFLOP/s for GEMMs, tokens/s for training."""
    if r is None:
        return None
    if "gemm" in what:
        if "gflops" in r and isinstance(r["gflops"], list):  # gemm_py.py: one figure per sample
            return statistics.median(r["gflops"])
        return r.get("gflops")
    if "results" in r:  # troupe bench train
        return r["results"][0]["tokens_per_s"]
    return r.get("tokens_s")


rows = {}
for line in open(sys.argv[1]):
    rec = json.loads(line)
    v = figure(rec["what"], rec["r"])
    if v is not None:
        rows.setdefault((rec["what"], rec["T"]), []).append((v, rec["idle_before"]))
pairs = [("gemm-fp32", "GFLOP/s"), ("gemm-bf16", "GFLOP/s"), ("gpt-fp32", "tokens/s"),
         ("gpt-bf16", "tokens/s"), ("gpt512-bf16", "tokens/s")]
print("| what | threads | troupe | PyTorch | troupe ÷ PyTorch | idle before (%) |")
print("|---|---:|---:|---:|---:|---|")


def cell(xs):
    vs = sorted(v for v, _ in xs)
    return f"{statistics.median(vs):,.0f} ({vs[0]:,.0f}–{vs[-1]:,.0f})", statistics.median(vs)


for name, unit in pairs:
    for t in (1, 2):
        a, b = rows.get(("troupe-" + name, t)), rows.get(("torch-" + name, t))
        if not a or not b:
            continue
        ca, ma = cell(a)
        cb, mb = cell(b)
        idles = [i for _, i in a + b]
        print(f"| {name} ({unit}) | {t} | {ca} | {cb} | {ma / mb:.2f} | {min(idles)}–{max(idles)} |")
        base = rows.get(("base-" + name, t))
        if base:
            cc, mc = cell(base)
            print(f"| {name}, build before ({unit}) | {t} | {cc} | | {mc / mb:.2f} | |")
a, b = rows.get(("troupe-gpt-procs2", 2)), rows.get(("torch-ddp-gpt-procs2", 2))
if a and b:
    ca, ma = cell(a)
    cb, mb = cell(b)
    print(f"| GPT procs2 default flags vs DDP 2×1 (tokens/s) | 2 | {ca} | {cb} | {ma / mb:.2f} | |")
