#!/usr/bin/env python3
"""shim-torch.py: PyTorch's NCCL backend through libnccl-nvls, on a GPU
machine, unicast only (it refuses unless NVLS_TRANSPORT=unicast and
NCCL_NVLS_ENABLE=0 are exported):

  python3 scripts/shim-torch.py --shim .devbin/bins/libnccl-nvls.so --nproc 4 --out OUT

It starts the same worker twice under torchrun (torch.distributed.run, on
127.0.0.1: no network), once on the real NCCL and once with the shim
preloaded (LD_PRELOAD, NVLS_REAL_NCCL naming the real NCCL, NVLS_DEBUG=INFO).
Each rank checks every result against a reference it computes itself from
every rank's inputs (seeded by rank), in f32 and bf16: all_reduce (sum,
max), broadcast, reduce, all_gather_into_tensor, reduce_scatter_tensor;
an all_reduce, an all_gather, a reduce_scatter and a broadcast captured
in a CUDA graph and replayed on new inputs; and calls nvls forwards to the real NCCL: all_to_all_single
(ncclSend/ncclRecv), an f64 all_reduce and an AVG all_reduce. Then the two
runs' results are compared bit for bit (the inputs are small integers, so
every sum is exact). The shim's INFO log gives the per-call counts (run
here, forwarded, by call) and the counts at destroy. Prints PASS or FAIL.
"""
import argparse
import collections
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

SIZES = (1, 1000, 4097, 1 << 20)


def inputs(torch, rank, n, dtype, salt):
    """Rank's input: small integers, exact in bf16 and in any sum of 8."""
    g = torch.Generator().manual_seed(1000003 * salt + 7919 * rank + n)
    return torch.randint(-8, 8, (n,), generator=g).to(dtype)


def worker(outdir):
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)
    results, bad = {}, []

    def check(key, got, want):
        got = got.cpu()
        results[key] = got
        if not torch.equal(got, want.to(got.dtype)):
            diff = (got.double() - want.double()).abs()
            bad.append(f"{key}: {int((diff != 0).sum())} of {got.numel()} differ, max {float(diff.max())}")

    for dtype in (torch.float32, torch.bfloat16):
        dn = str(dtype).split(".")[-1]
        for n in SIZES:
            tag = f"{dn}-{n}"
            xs = [inputs(torch, r, n, dtype, 1) for r in range(world)]
            big = [inputs(torch, r, n * world, dtype, 2) for r in range(world)]
            x = xs[rank].to(dev)
            ref_sum = torch.stack([v.double() for v in xs]).sum(0)
            ref_max = torch.stack([v.double() for v in xs]).max(0).values

            y = x.clone()
            dist.all_reduce(y)
            check(f"all_reduce-sum-{tag}", y, ref_sum)
            y = x.clone()
            dist.all_reduce(y, op=dist.ReduceOp.MAX)
            check(f"all_reduce-max-{tag}", y, ref_max)
            root = n % world
            y = x.clone()
            dist.broadcast(y, src=root)
            check(f"broadcast-{tag}", y, xs[root])
            dst = (n + 1) % world
            y = x.clone()
            dist.reduce(y, dst=dst)
            if rank == dst:
                check(f"reduce-{tag}", y, ref_sum)
            ag = torch.empty(n * world, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(ag, x)
            check(f"all_gather-{tag}", ag, torch.cat(xs))
            rs = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(rs, big[rank].to(dev))
            check(f"reduce_scatter-{tag}", rs, torch.stack([v.double() for v in big]).sum(0)[rank * n:(rank + 1) * n])

            # Forwarded to the real NCCL.
            a2a = torch.empty(n * world, dtype=dtype, device=dev)
            dist.all_to_all_single(a2a, big[rank].to(dev))
            check(f"all_to_all-{tag}", a2a, torch.cat([v[rank * n:(rank + 1) * n] for v in big]))
            if n <= 4097:
                y = x.clone()
                dist.all_reduce(y, op=dist.ReduceOp.AVG)
                # Not compared exactly: NCCL's AVG divides in the type.
                results[f"all_reduce-avg-{tag}"] = y.cpu()
                if not torch.allclose(y.double().cpu(), ref_sum / world, atol=0.07 if dtype == torch.bfloat16 else 1e-6):
                    bad.append(f"all_reduce-avg-{tag}: far from the reference")
        # f64 (forwarded) once per dtype pass.
        x64 = inputs(torch, rank, 1000, torch.float64, 3).to(dev)
        dist.all_reduce(x64)
        check(f"all_reduce-f64-{dn}", x64, torch.stack([inputs(torch, r, 1000, torch.float64, 3) for r in range(world)]).sum(0))

        # A CUDA graph: capture once, replay on new inputs twice.
        for n in (1000, 1 << 20):
            xin = torch.zeros(n, dtype=dtype, device=dev)
            yout = torch.zeros(n, dtype=dtype, device=dev)
            gout = torch.zeros(n * world, dtype=dtype, device=dev)
            rsin = torch.zeros(n * world, dtype=dtype, device=dev)
            rsout = torch.zeros(n, dtype=dtype, device=dev)
            bout = torch.zeros(n, dtype=dtype, device=dev)
            root = 1 % world

            def body():
                yout.copy_(xin)
                dist.all_reduce(yout)
                dist.all_gather_into_tensor(gout, xin)
                dist.reduce_scatter_tensor(rsout, rsin)
                bout.copy_(xin)
                dist.broadcast(bout, src=root)

            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # warm-up outside capture, as torch.cuda.graph wants
                body()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, capture_error_mode=os.environ.get("SHIM_TORCH_CAPTURE", "global")):
                    body()
            except Exception as e:  # noqa: BLE001: reported, the rest goes on
                bad.append(f"graph-{dn}-{n}: capture failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            for it in (1, 2):
                xs = [inputs(torch, r, n, dtype, 10 + it) for r in range(world)]
                bigs = [inputs(torch, r, n * world, dtype, 20 + it) for r in range(world)]
                xin.copy_(xs[rank].to(dev))
                rsin.copy_(bigs[rank].to(dev))
                graph.replay()
                torch.cuda.synchronize()
                check(f"graph-all_reduce-{dn}-{n}-replay{it}", yout, torch.stack([v.double() for v in xs]).sum(0))
                check(f"graph-all_gather-{dn}-{n}-replay{it}", gout, torch.cat(xs))
                check(f"graph-reduce_scatter-{dn}-{n}-replay{it}", rsout,
                      torch.stack([v.double() for v in bigs]).sum(0)[rank * n:(rank + 1) * n])
                check(f"graph-broadcast-{dn}-{n}-replay{it}", bout, xs[root])
    torch.cuda.synchronize()
    torch.save({"results": results, "bad": bad}, os.path.join(outdir, f"rank{rank}.pt"))
    print(f"rank {rank}: {len(results)} results, {len(bad)} wrong" + "".join("\n  " + b for b in bad[:10]), flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def real_nccl(torch):
    """The libnccl.so.2 PyTorch loads: its wheel's, else the loader's."""
    base = os.path.dirname(os.path.dirname(torch.__file__))
    p = os.path.join(base, "nvidia", "nccl", "lib", "libnccl.so.2")
    if os.path.exists(p):
        return p
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    m = re.search(r"libnccl\.so\.2 .*=> (\S+)", out)
    return m.group(1) if m else ""


def missing_symbols(torch, shim):
    """NCCL symbols libtorch_cuda imports that the shim does not export:
    calls to them would reach the real NCCL with the shim's comm."""
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
    if not shutil.which("nm") or not os.path.exists(lib):
        return "unknown (no nm or no libtorch_cuda.so)"

    def syms(args, path):
        out = subprocess.run(["nm", "-D"] + args + [path], capture_output=True, text=True).stdout
        return {ln.split()[-1] for ln in out.splitlines() if ln.split() and ln.split()[-1].startswith("nccl")}

    miss = sorted(syms(["--undefined-only"], lib) - syms(["--defined-only"], shim))
    return " ".join(miss) if miss else "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--real", default="", help="the real libnccl.so.2 (default: PyTorch's)")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--out", default="", help="folder for the logs (default: a temporary one)")
    ap.add_argument("--timeout", type=int, default=150, help="seconds per torchrun")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker)
        return
    if os.environ.get("NVLS_TRANSPORT") != "unicast" or os.environ.get("NCCL_NVLS_ENABLE") != "0":
        print("shim-torch: refused: export NVLS_TRANSPORT=unicast NCCL_NVLS_ENABLE=0 (multicast never runs here)")
        sys.exit(2)
    import torch

    shim = os.path.abspath(a.shim)
    real = a.real or real_nccl(torch)
    out = a.out or tempfile.mkdtemp(prefix="shim-torch-")
    os.makedirs(out, exist_ok=True)
    print(f"shim-torch: torch {torch.__version__} (NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}), "
          f"{a.nproc} ranks, real NCCL {real}, shim {shim}", flush=True)
    print(f"shim-torch: NCCL symbols torch uses that the shim does not export: {missing_symbols(torch, shim)}", flush=True)
    dirs, rcs, here, fwd = {}, {}, collections.Counter(), collections.Counter()
    for label in ("nccl", "shim"):
        dirs[label] = os.path.join(out, "torch-" + label)
        os.makedirs(dirs[label], exist_ok=True)
        env = dict(os.environ)
        env.update(TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
        if label == "shim":
            env.update(LD_PRELOAD=shim, NVLS_REAL_NCCL=real, NVLS_DEBUG="INFO")
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={a.nproc}", "--master-addr=127.0.0.1",
               f"--master-port={free_port()}", os.path.abspath(__file__), "--shim", shim, "--worker", dirs[label]]
        log = os.path.join(out, f"torch-{label}.log")
        with open(log, "w") as f:
            # torchrun in a session of its own: on a timeout its workers die
            # with it (killing torchrun alone left them holding the GPUs and
            # the caller's stdout, run 28).
            p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rcs[label] = p.wait(timeout=a.timeout)
            except subprocess.TimeoutExpired:
                rcs[label] = "timeout"
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        text = open(log, errors="replace").read()
        print(f"shim-torch: {label}: rc {rcs[label]}; " + " | ".join(re.findall(r"rank \d+: \d+ results, \d+ wrong", text)), flush=True)
        for ln in re.findall(r"^  .*$", text, re.M)[:8]:
            print("   - " + ln.strip())
        if rcs[label] != 0:
            for ln in text.splitlines()[-12:]:
                print("   - | " + ln[:300])
        if label == "shim":
            here = collections.Counter(re.findall(r'msg="libnccl-nvls: (nccl\w+): run here"', text))
            fwd = collections.Counter(re.findall(r'msg="libnccl-nvls: (nccl\w+): forwarded"', text))
            why = collections.Counter(re.findall(r'msg="libnccl-nvls: nccl\w+: forwarded" rank=\d+ why="([^"]*)"', text))
            dest = re.findall(r'msg="libnccl-nvls: (ncclComm\w+)" rank=(-?\d+) ran_here=(\d+) forwarded=(\d+)', text)
            print(f"shim-torch: shim INFO lines: run here {dict(here)}; forwarded {dict(fwd)}")
            for w, k in why.most_common(6):
                print(f"   - forwarded {k}x: {w}")
            print("shim-torch: at destroy: " + (", ".join(f"{f} rank {r}: ran {h} fwd {fw}" for f, r, h, fw in dest) or "no counts (no ncclCommDestroy/Abort logged)"))
            for ln in re.findall(r"^.*level=(?:WARN|ERROR).*$", text, re.M)[:6]:
                print("   - warn: " + ln[:300])
    bad, total = [], 0
    if sum(here.values()) == 0:
        bad.append("nothing ran in nvls (was the shim preloaded? no 'run here' line)")
    if sum(fwd.values()) == 0:
        bad.append("nothing was forwarded to the real NCCL")
    for label, rc in rcs.items():
        saved = all(os.path.exists(os.path.join(dirs[label], f"rank{r}.pt")) for r in range(a.nproc))
        if rc != 0 and label == "nccl" and saved:
            # The reference's own exit (run 25: the real NCCL's torchrun
            # hung after every rank saved its results): its results still
            # serve; the shim's run gets no such pass.
            print(f"shim-torch: note: the real NCCL's torchrun rc {rc} after every rank saved its results")
        elif rc != 0:
            bad.append(f"{label}: torchrun rc {rc}")
    for r in range(a.nproc):
        got = {}
        for label in ("nccl", "shim"):
            p = os.path.join(dirs[label], f"rank{r}.pt")
            if os.path.exists(p):
                got[label] = torch.load(p)
                bad += [f"{label} rank {r}: {b}" for b in got[label]["bad"]]
            else:
                bad.append(f"{label} rank {r}: no results")
        if len(got) == 2:
            want, have = got["nccl"]["results"], got["shim"]["results"]
            for k in sorted(want):
                total += 1
                if k not in have:
                    bad.append(f"rank {r} {k}: missing through the shim")
                elif not torch.equal(want[k], have[k]):
                    bad.append(f"rank {r} {k}: the shim's result differs from NCCL's")
    for b in bad[:20]:
        print("   - " + b)
    print(f"shim-torch: {'PASS' if not bad else 'FAIL'}: {len(bad)} problem(s); {total} results compared with NCCL's bit for bit")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
