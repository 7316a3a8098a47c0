#!/usr/bin/env python3
"""llbisect.py: PTX variants of the LL all-reduce for scripts/llprobe.cu,
each with one piece of the kernel's work around the exchange taken out,
to see what each costs (issue 22: the 8-byte all-reduce's time). Timing
only: a variant is not a correct kernel for every case (no failure
checks, no deadline, no barrier arrival), and none is ever committed.

    scripts/llbisect.py OUTDIR     (on the GPU machine: needs nvcc)

writes OUTDIR/NAME/allreduce_uc.ptx for NAME in base, noarrive (no
start-barrier arrival words nor its sequence load), nodeadline (no
%globaltimer deadline), noenter (no team-failed load at entry), nosync
(no __syncthreads before a one-block kernel publishes its epoch), none
(all four out), and smallpoll (ll_poll cut to its bare loop: less code,
the same hot path).
"""
import os
import shutil
import subprocess
import sys

EDITS = {
    "noarrive": [
        ("const u32 seq = arrive ? next_seq(ld_own_b32(own + NVLS_EPOCH_OFFSET)) : 0;", "const u32 seq = 0;"),
        ("if (arrive && !failed) {", "if (false) {"),
    ],
    "nodeadline": [("const u64 deadline = deadline_of(p);\n  for (u64 i = first", "const u64 deadline = ~0ull;\n  for (u64 i = first")],
    "noenter": [("bool failed = !nvls_enter(p);", "bool failed = false;")],
    "nosync": [("  if (gridDim.x == 1) {\n    __syncthreads();\n    if (threadIdx.x == 0) st_b32(own + NVLS_LL_OFFSET, e);",
                "  if (gridDim.x == 1) {\n    if (threadIdx.x == 0) st_b32(own + NVLS_LL_OFFSET, e);")],
}
EDITS["none"] = [e for k in ("noarrive", "nodeadline", "noenter", "nosync") for e in EDITS[k]]

# smallpoll: ll_poll cut to its loop (no mismatch, deadline or team
# checks): the same hot path in far less code, to see whether the kernel's
# size (its instruction fetch at every launch) costs time.
POLL_START = "NVLS_DEV bool ll_poll(const nvls_params& p, u64 a, u32 s, u32 e, u64 deadline, u64& data) {"
POLL_END = "  data = (u64)d0 | ((u64)d1 << 32);\n  return true;\n}"
SMALL_POLL = POLL_START + """
  u32 d0, f0, d1, f1;
  do {
    ld_volatile_line(a, d0, f0, d1, f1);
  } while (f0 != e || f1 != (e ^ ll_check(p)));
""" + POLL_END


def small_poll(h):
    i = h.index(POLL_START)
    j = h.index(POLL_END, i) + len(POLL_END)
    return h[:i] + SMALL_POLL + h[j:]

out = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
for name in ["base"] + list(EDITS) + ["smallpoll"]:
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for f in ("nvls.h", "allreduce.cu"):
        shutil.copy(os.path.join(root, "kernels", f), d)
    h = open(os.path.join(d, "nvls.h")).read()
    for old, new in EDITS.get(name, []):
        if old not in h:
            sys.exit(f"llbisect: {name}: the source no longer has {old!r}")
        h = h.replace(old, new, 1)
    if name == "smallpoll":
        h = small_poll(h)
    open(os.path.join(d, "nvls.h"), "w").write(h)
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-DNVLS_MULTICAST=0", "-o", os.path.join(d, "allreduce_uc.ptx"),
                    os.path.join(d, "allreduce.cu")], check=True)
    print(f"llbisect: {d}/allreduce_uc.ptx")
