#!/usr/bin/env python3
"""Side by side, for device-run.sh's variants step: every collective's
variant-NAME-COLL.json of the named variants, per size nvls's time out of
place / in place, the faster of NCCL's columns in each variant's run, and
the ratios (that NCCL time / nvls's, out of place / in place; > 1: nvls
is faster).

    scripts/variants.py DIR NAME[,NAME...]     e.g. r off,wait,early
    scripts/variants.py DIR:NAME DIR:NAME ...  e.g. m4:main n4:chain4

The second form compares runs of one call kept in their own directories
(device-run.sh's RUN), such as two builds' A/B.
"""
import json
import os
import sys

COLLS = ["allreduce", "reducescatter", "allgather", "broadcast", "reduce"]


def best(r, place):
    ts = [r[k]["time_us"] for k in (f"nccl_{place}", f"nccl_symmetric_{place}") if r.get(k)]
    return min(ts) if ts else float("nan")


if all(":" in a for a in sys.argv[1:]) and len(sys.argv) > 1:
    where = [tuple(a.split(":", 1)) for a in sys.argv[1:]]  # (dir, name)
else:
    where = [(sys.argv[1], v) for v in sys.argv[2].split(",")]
names = [v for _, v in where]
for c in COLLS:
    runs = {}
    for d, v in where:
        p = os.path.join(d, f"variant-{v}-{c}.json")
        if os.path.exists(p):
            runs[v] = {r["size"]: r for r in json.load(open(p))["results"]}
    if len(runs) != len(names):
        continue
    print(f"== {c}: us out of place / in place; NCCL's faster column; ratios out / in")
    print(f"{'size':>8} " + " ".join(f"{v:>13}" for v in names) + "  " + " ".join(f"{'N-' + v:>7}" for v in names)
          + "  " + " ".join(f"{'r-' + v:>9}" for v in names))
    for s in sorted(runs[names[0]]):
        times, ncc, rat = [], [], []
        for v in names:
            r = runs[v].get(s)
            if r is None:
                times.append(f"{'-':>13}"), ncc.append(f"{'-':>7}"), rat.append(f"{'-':>9}")
                continue
            o, i = r["out_of_place"]["time_us"], r["in_place"]["time_us"]
            bo, bi = best(r, "out_of_place"), best(r, "in_place")
            times.append(f"{o:6.2f}/{i:6.2f}")
            ncc.append(f"{min(bo, bi):7.2f}")
            rat.append(f"{bo / o:4.2f}/{bi / i:4.2f}")
        print(f"{s:>8} " + " ".join(times) + "  " + " ".join(ncc) + "  " + " ".join(rat))
