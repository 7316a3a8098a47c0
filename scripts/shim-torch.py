#!/usr/bin/env python3
"""shim-torch.py: PyTorch's NCCL backend through libnccl-nvls, checked
against the real NCCL's results. On the GPU machine, unicast only:

  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
  NVLS_TRANSPORT=unicast python3 scripts/shim-torch.py --shim bin/libnccl-nvls.so \\
      --real /usr/lib/x86_64-linux-gnu/libnccl.so.2 --nproc 4

It runs the test twice under torchrun, once with the shim preloaded and
once without, each rank saving its results; then compares them exactly
(sum of small integers in f32 and bf16 is exact, so both must agree bit
for bit): all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
broadcast, eager and replayed from torch.cuda.graph.
"""
import argparse
import os
import subprocess
import sys
import tempfile


def worker(outdir):
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    g = torch.Generator().manual_seed(1234 + rank)
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        for n in (1, 1000, 1 << 20):
            x = torch.randint(-8, 8, (n,), generator=g).to(dtype).cuda()
            tag = f"{str(dtype).split('.')[-1]}-{n}"

            def colls():
                ar = x.clone()
                dist.all_reduce(ar)
                ag = torch.empty(n * world, dtype=dtype, device="cuda")
                dist.all_gather_into_tensor(ag, x)
                rs = torch.empty(n, dtype=dtype, device="cuda")
                dist.reduce_scatter_tensor(rs, x.repeat(world))
                bc = x.clone()
                dist.broadcast(bc, src=0)
                return ar, ag, rs, bc

            eager = colls()
            torch.cuda.synchronize()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                colls()  # warm-up outside capture, as torch.cuda.graph wants
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = colls()
            graph.replay()
            torch.cuda.synchronize()
            for name, a, b in zip(("all_reduce", "all_gather", "reduce_scatter", "broadcast"), eager, captured):
                results[f"{name}-{tag}-eager"] = a.cpu()
                results[f"{name}-{tag}-graph"] = b.cpu()
    torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--real", required=True)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker)
        return
    import torch

    dirs = {}
    for label in ("nccl", "shim"):
        dirs[label] = tempfile.mkdtemp(prefix=f"shim-torch-{label}-")
        env = dict(os.environ)
        if label == "shim":
            env["LD_PRELOAD"] = os.path.abspath(a.shim)
            env["NVLS_REAL_NCCL"] = a.real
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={a.nproc}",
               os.path.abspath(__file__), "--shim", a.shim, "--real", a.real, "--worker", dirs[label]]
        print("==", label, " ".join(cmd), flush=True)
        subprocess.run(cmd, env=env, check=True, timeout=900)
    bad = 0
    for r in range(a.nproc):
        want = torch.load(os.path.join(dirs["nccl"], f"rank{r}.pt"))
        got = torch.load(os.path.join(dirs["shim"], f"rank{r}.pt"))
        for k in sorted(want):
            if not torch.equal(want[k], got[k]):
                bad += 1
                print(f"rank {r} {k}: differs", flush=True)
    print(f"{'PASS' if bad == 0 else 'FAIL'}: {bad} difference(s) in {len(want) * a.nproc} results")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
