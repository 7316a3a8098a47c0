#!/usr/bin/env python3
"""shim-summary.py DIR NGPUS MAXBYTES: the summary of scripts/shim-device.sh's
nccl-tests runs in DIR (runs.tsv and one NAME.txt per run): per collective,
mode (g: one process driving NGPUS GPUs, np: mpirun, a process per GPU) and
graph setting (-G), the shim's and NCCL's #wrong (out-of-place and in-place
summed over every size), time at the smallest size (us, out-of-place), bus
bandwidth at the largest (GB/s, out-of-place) and nccl-tests' average bus
bandwidth; then the coverage runs (-d all -o all through the shim under
NVLS_DEBUG=INFO): calls run here and forwarded, and why. The last line is
PASS or FAIL: every shim run ended with rc 0, checked data (#wrong numbers)
and no wrong values; a coverage run ran something here."""
import collections
import os
import re
import sys


def table(path):
    """The numbers of one nccl-tests log."""
    r = {"wrong": 0, "checked": 0, "rows": [], "oob": None, "avg": None}
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return None
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 13 and f[0].isdigit() and f[1].isdigit():
            r["rows"].append(f)
            for w in (f[8], f[12]):
                try:
                    r["wrong"] += int(float(w))
                    r["checked"] += 1
                except ValueError:
                    pass
        m = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)", line)
        if m:
            r["oob"] = int(m.group(1))
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", line)
        if m:
            r["avg"] = float(m.group(1))
    r["info_here"] = collections.Counter(re.findall(r'msg="libnccl-nvls: (nccl\w+): run here"', text))
    r["info_fwd"] = collections.Counter(re.findall(r'msg="libnccl-nvls: (nccl\w+): forwarded"', text))
    r["why"] = collections.Counter(re.findall(r'msg="libnccl-nvls: nccl\w+: forwarded" rank=\d+ why="([^"]*)"', text))
    r["destroy"] = [(int(a), int(b)) for a, b in re.findall(r"ran_here=(\d+) forwarded=(\d+)", text)]
    r["shimwarn"] = len(re.findall(r"level=(?:WARN|ERROR) msg=\"?libnccl-nvls", text))
    return r


def main():
    d, ngpus, maxb = sys.argv[1], sys.argv[2], sys.argv[3]
    runs = {}
    with open(os.path.join(d, "runs.tsv")) as f:
        next(f)
        for line in f:
            name, rc, secs = line.rstrip("\n").split("\t")
            runs[name] = (rc, int(secs))
    bad = []
    print(f"shim nccl-tests, {ngpus} GPUs, 8 B to {maxb}: #wrong (shim/nccl), time at 8 B (us), busbw at {maxb} and average (GB/s)")
    hdr = f"{'collective':15} {'mode':5} {'G':2} {'rc':>7} {'#wrong':>9} {'8B us shim':>10} {'nccl':>7} {'busbw shim':>10} {'nccl':>7} {'avg shim':>8} {'nccl':>7}"
    print(hdr)
    keys = []
    for name in runs:
        m = re.match(r"(\w+)-(g|np)\d+-G(\d)-(shim|nccl)$", name)
        if m and (m.group(1), m.group(2), m.group(3)) not in keys:
            keys.append((m.group(1), m.group(2), m.group(3)))
    for c, mode, g in keys:
        res, rcs = {}, []
        for lib in ("shim", "nccl"):
            name = f"{c}-{mode}{ngpus}-G{g}-{lib}"
            rc = runs.get(name, ("absent", 0))[0]
            rcs.append(rc)
            res[lib] = table(os.path.join(d, name + ".txt")) if rc != "skipped" else None
        s, n = res["shim"], res["nccl"]

        def col(r, what):
            if not r or not r["rows"]:
                return "-"
            if what == "lat":
                return r["rows"][0][5]
            if what == "bw":
                return r["rows"][-1][7]
            return "-" if r["avg"] is None else f"{r['avg']:.1f}"

        def wrong(r):
            return "-" if not r or not r["checked"] else str(r["wrong"])

        print(f"{c:15} {mode:5} {g:2} {'/'.join(rcs):>7} {wrong(s) + '/' + wrong(n):>9} {col(s, 'lat'):>10} {col(n, 'lat'):>7} "
              f"{col(s, 'bw'):>10} {col(n, 'bw'):>7} {col(s, 'avg'):>8} {col(n, 'avg'):>7}")
        if rcs[0] == "skipped":
            pass
        elif rcs[0] != "0":
            bad.append(f"{c} {mode} G{g} shim rc {rcs[0]}")
        elif not s or not s["checked"]:
            bad.append(f"{c} {mode} G{g} shim: no checked rows")
        elif s["wrong"] or (s["oob"] or 0):
            bad.append(f"{c} {mode} G{g} shim: #wrong {s['wrong']}, out of bounds {s['oob']}")
        if n and n["checked"] and n["wrong"]:
            bad.append(f"{c} {mode} G{g} nccl: #wrong {n['wrong']} (the real NCCL)")
    print("coverage through the shim (-d all -o all, NVLS_DEBUG=INFO): calls run here / forwarded; destroy counts")
    for name, (rc, secs) in runs.items():
        if not name.endswith("-all-shim"):
            continue
        r = table(os.path.join(d, name + ".txt")) if rc != "skipped" else None
        if r is None:
            print(f"  {name}: {rc}")
            continue
        here, fwd = sum(r["info_here"].values()), sum(r["info_fwd"].values())
        dh = sum(a for a, _ in r["destroy"])
        df = sum(b for _, b in r["destroy"])
        print(f"  {name}: rc {rc}, {secs} s, #wrong {r['wrong']} in {r['checked']} checks, run here {here}, forwarded {fwd}; "
              f"at destroy ran_here {dh} forwarded {df} ({len(r['destroy'])} comms)")
        for why, k in r["why"].most_common(6):
            print(f"      forwarded {k}x: {why}")
        if rc != "0" or r["wrong"] or not r["checked"]:
            bad.append(f"{name}: rc {rc}, #wrong {r['wrong']}, {r['checked']} checks")
        if here == 0:
            bad.append(f"{name}: nothing ran in nvls (was the shim preloaded?)")
    skipped = [n for n, (rc, _) in runs.items() if rc == "skipped"]
    if skipped:
        print(f"skipped by the time limit (SHIM_LIMIT): {len(skipped)} runs: {' '.join(skipped[:8])}{' ...' if len(skipped) > 8 else ''}")
    if bad:
        print("shim nccl-tests: FAIL: " + "; ".join(bad[:12]))
        sys.exit(1)
    elif skipped:
        print(f"shim nccl-tests: INCOMPLETE: {len(runs) - len(skipped)} runs passed, {len(skipped)} skipped by the time limit")
    else:
        print(f"shim nccl-tests: PASS ({len(runs)} runs)")


if __name__ == "__main__":
    main()
