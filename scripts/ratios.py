#!/usr/bin/env python3
"""Prints, for nvls-bench -json files, nvls's time and the ratio against the
faster of NCCL's two columns (default, symmetric) for every size, out of
place and in place: the yardstick of issue 22 (> 1: nvls is faster).

    scripts/ratios.py FILE.json...
"""
import gzip
import json
import sys


def best(r, place):
    ts = [r[k]["time_us"] for k in (f"nccl_{place}", f"nccl_symmetric_{place}") if k in r]
    return min(ts) if ts else None


def size(b):
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n}{unit}"
    return f"{b}B"


for path in sys.argv[1:]:
    j = json.load(gzip.open(path, "rt") if path.endswith(".gz") else open(path))
    print(f"== {path}")
    print(f"{'size':>6} {'oop us':>8} {'best':>8} {'ratio':>6} {'ip us':>8} {'best':>8} {'ratio':>6}")
    for r in j["results"]:
        cells = []
        for place in ("out_of_place", "in_place"):
            t = r[place]["time_us"]
            b = best(r, place)
            cells += [f"{t:8.2f}", f"{b:8.2f}" if b else "       -", f"{b / t:6.2f}" if b else "     -"]
        print(f"{size(r['size']):>6} " + " ".join(cells))
