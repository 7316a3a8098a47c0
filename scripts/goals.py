#!/usr/bin/env python3
"""goals.py: issue 22's scoreboard from nvls-bench -json files (with
-compare nccl): for each goal, GPU count, element type, place and graph
setting, the worst ratio (NCCL's faster column, its fastest rank /
nvls, its slowest rank; > 1: nvls is faster) over the goal's sizes, where it is, and MET or NOT MET; then the
combinations the issue asks for that no file measured.

    scripts/goals.py docs/runs/2026-11-27-run23/*.json ...

A file is one process per GPU (nvls-bench-mpi: the ranks' pids differ) or
one process (nvls-bench -g N). The single-process goal pairs each
single-process file with a one-process-per-GPU file of the same
collective, type, GPU count and graph setting.
"""
import collections
import datetime
import gzip
import json
import sys

KiB, MiB = 1 << 10, 1 << 20

# (name, collective, process mode, graph, lowest size, highest size, least
# ratio): the goals, against the faster of NCCL's columns.
GOALS = [
    ("all-reduce small", "allreduce", "mpi", True, 8, 64 * KiB, 1.2),
    ("all-reduce medium", "allreduce", "mpi", True, 128 * KiB, 16 * MiB, 1.1),
    ("all-reduce large", "allreduce", "mpi", True, 64 * MiB, None, 1.05),
    ("no graphs, small", "allreduce", "mpi", False, 8, 64 * KiB, 1.3),
] + [(f"{c} every size", c, "mpi", True, 8, None, 1.1) for c in ("broadcast", "reducescatter", "allgather", "reduce")]


def best(r, place, median=False):
    """NCCL's time: of its faster column, its fastest rank's average.
    NCCL's broadcast root (and at times one reduce rank) holds a one-off
    of 1.5-1.9 ms a timed loop (docs/perf.md runs 88-89); its other ranks
    give its steady state. nvls's time stays its slowest rank's. With
    -timing median the columns' own times, medians aggregated as nvls's
    are, since the ranks' averages hold what the medians leave out."""
    cols = [k for k in (f"nccl_{place}", f"nccl_symmetric_{place}") if k in r]
    if median:
        ts = [r[k]["time_us"] for k in cols]
    else:
        ts = [min(r[k].get("rank_times_us") or [r[k]["time_us"]]) for k in cols]
    return min(ts) if ts else None


def size(b):
    for unit, n in (("G", 1 << 30), ("M", MiB), ("K", KiB)):
        if b >= n and b % n == 0:
            return f"{b // n}{unit}"
    return f"{b}B"


def load(path):
    j = json.load(gzip.open(path, "rt") if path.endswith(".gz") else open(path))
    cfg = j["config"]
    pids = {g.get("pid") for g in j["machine"]["gpus"]}
    mode = "mpi" if len(pids) > 1 else "single"
    return {"path": path, "coll": cfg["coll"], "n": cfg["ngpus"], "type": cfg["type"], "graph": cfg["graph"],
            "median": cfg.get("timing") == "median",
            "mode": mode, "results": j["results"], "gpu": j["machine"]["gpus"][0]["name"],
            "start": started(j.get("start_time", ""))}


def started(stamp):
    """The run's start as a datetime (None where the file has none);
    nanoseconds are cut to what datetime holds."""
    if not stamp:
        return None
    day, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(day + ("." + frac[:6] if frac else ""))


def in_range(b, lo, hi):
    return b >= lo and (hi is None or b <= hi)


def main(paths):
    files = [load(p) for p in paths]
    seen = set()
    rows = []
    for name, coll, mode, graph, lo, hi, want in GOALS:
        for f in files:
            if f["coll"] != coll or f["mode"] != mode or f["graph"] != graph:
                continue
            for place in ("out_of_place", "in_place"):
                worst, under = None, []
                for r in f["results"]:
                    b = best(r, place, f["median"])
                    if b is None or not in_range(r["size"], lo, hi):
                        continue
                    ratio = b / r[place]["time_us"]
                    if worst is None or ratio < worst[0]:
                        worst = (ratio, r["size"])
                    if ratio < want:
                        under.append(f"{size(r['size'])} {ratio:.2f}")
                if worst is None:
                    continue
                key = (name, f["n"], f["type"], place)
                seen.add(key)
                label = name + (" (median)" if f["median"] else "")
                rows.append((label, f["n"], f["type"], place, worst[0], size(worst[1]), want, f["path"], under))
    # Every point under the goal, not the worst alone: a second miss at
    # another size (run 67's 512 KiB reduce behind its 512 MiB) shows.
    print(f"{'goal':22} {'GPUs':>4} {'type':9} {'place':12} {'worst':>6} {'at':>6} {'want':>5}  verdict")
    for name, n, t, place, ratio, at, want, path, under in rows:
        verdict = "MET" if ratio >= want else f"NOT MET at {', '.join(under)}"
        print(f"{name:22} {n:4d} {t:9} {place:12} {ratio:6.2f} {at:>6} {want:5.2f}  {verdict}  ({path})")

    # The 8-byte all-reduce with graphs, one process per GPU, 4 GPUs.
    for f in files:
        if f["coll"] == "allreduce" and f["mode"] == "mpi" and f["graph"] and f["n"] == 4:
            r = next((r for r in f["results"] if r["size"] == 8), None)
            if r:
                t = r["out_of_place"]["time_us"]
                print(f"8-byte all-reduce, 4 GPUs, graphs, {f['type']}: {t:.2f} us (want <= 4.0): "
                      f"{'MET' if t <= 4.0 else 'NOT MET'}  ({f['path']})")
            big = next((r for r in f["results"] if r["size"] == 512 * MiB), None)
            if big:
                bw = big["out_of_place"]["busbw_gbs"]
                print(f"512 MiB all-reduce busbw, 4 GPUs, {f['type']}: {bw:.1f} GB/s (want >= 365): "
                      f"{'MET' if bw >= 365 else 'NOT MET'}  ({f['path']})")

    # Single process against one process per GPU, same collective, type,
    # GPUs and graph setting: within 1.2x at every size. Of several such
    # files the one that ran nearest in time (a device call's runs are
    # minutes apart); pairs over 15 minutes apart are said to be from
    # different calls, whose machines may differ.
    mpi = collections.defaultdict(list)
    for f in files:
        if f["mode"] == "mpi":
            mpi[(f["coll"], f["type"], f["n"], f["graph"])].append(f)
    for f in files:
        if f["mode"] != "single":
            continue
        apart = lambda m: abs((m["start"] - f["start"]).total_seconds()) if m["start"] and f["start"] else float("inf")
        m = min(mpi.get((f["coll"], f["type"], f["n"], f["graph"]), []), key=apart, default=None)
        if not m:
            print(f"single process {f['coll']} {f['type']} {f['n']} GPUs graph={f['graph']}: no one-process-per-GPU file to pair")
            continue
        times = {r["size"]: r["out_of_place"]["time_us"] for r in m["results"]}
        worst = max(((r["out_of_place"]["time_us"] / times[r["size"]], r["size"]) for r in f["results"] if r["size"] in times),
                    default=None)
        if worst:
            gap = apart(m)
            note = "" if gap <= 15 * 60 else f" (paired with a run {gap / 60:.0f} min apart: another call)"
            print(f"single process {f['coll']} {f['type']} {f['n']} GPUs graph={f['graph']}: worst {worst[0]:.2f}x "
                  f"one process per GPU at {size(worst[1])} (want <= 1.2): {'MET' if worst[0] <= 1.2 else 'NOT MET'}"
                  f"  ({f['path']} against {m['path']}){note}")

    # What the issue asks that no file measured: 2 and 4 GPUs, f32 and
    # bf16, both places.
    missing = collections.defaultdict(list)
    for name, *_ in GOALS:
        for n in (2, 4):
            for t in ("float", "bfloat16"):
                for place in ("out_of_place", "in_place"):
                    if (name, n, t, place) not in seen:
                        missing[name].append(f"{n}x{t}/{place.split('_')[0]}")
    for name, what in missing.items():
        print(f"not measured: {name}: {', '.join(what)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
