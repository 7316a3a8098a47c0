#!/bin/bash
# Run 79 (4 GPUs), run 78 again with main's benchmarks under the branch's PTX too (run 78's branch variants had no nvls-bench-mpi: the slim bins held only the tests): exp/unroll (spans take 4 vectors a thread at once) against main: the 4-rank reduce-scatter and all-gather at 512 KiB - 8 MiB (min grid 32, 8, 0) and 32-512 MiB with the reduce; the branch's matrices and kernels GPU tests at 4 GPUs if it wins.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
P=/tmp/device-run-ptx/ptx
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-130 | head -12
[ -d $P ] || { echo "no PTX"; batch_pack px; exit 1; }
med() { dr $1 4 "${@:3}" STEPS=variants VARIANT_COLLS="reducescatter allgather" VARIANT_MINBYTES=512K VARIANT_MAXBYTES=$2 VARIANT_FACTOR=2 VARIANT_ARGS="-n 100"; }
big() { dr $1 4 "${@:2}" STEPS=variants VARIANT_COLLS="reducescatter allgather reduce" VARIANT_MINBYTES=32M VARIANT_MAXBYTES=512M VARIANT_FACTOR=4 VARIANT_ARGS="-n 20"; }
med ma 8M $M VARIANTS="base: b0:NVLS_MIN_GRID=0"
med mu4 8M $M NVLS_PTX_DIR=$P VARIANTS="u4: u4g0:NVLS_MIN_GRID=0 u4g8:NVLS_MIN_GRID=8"
big la $M VARIANTS="bL:"
big lu4 $M NVLS_PTX_DIR=$P VARIANTS="u4L:"
med mu4b 4M $M NVLS_PTX_DIR=$P VARIANTS="u4g0b:NVLS_MIN_GRID=0 u4b:"
med mab 4M $M VARIANTS="b0b:NVLS_MIN_GRID=0 baseb:"
python3 - "$OUT" > $OUT/decide.txt <<'PY'
import sys
out = sys.argv[1]
def t(run, name, coll, size, col):
    try:
        for line in open(f"{out}/{run}/variant-{name}-{coll}.log"):
            f = line.split()
            if f and f[0] == str(size):
                return float(f[col - 1])
    except OSError:
        pass
    return None
win = True
for (ra, b, ru, us) in [("ma", "base", "mu4", ["u4", "u4g0", "u4g8"]), ("mab", "baseb", "mu4b", ["u4b", "u4g0b"])]:
    gains = []
    for coll, size, col in [("reducescatter", 1 << 20, 6), ("allgather", 1 << 20, 10), ("allgather", 2 << 20, 10)]:
        base = t(ra, b, coll, size, col)
        best = min((x for x in (t(ru, u, coll, size, col) for u in us) if x), default=None)
        print(f"{ra}: {coll} {size >> 20} MiB col {col}: main {base}, branch best {best}")
        if base and best:
            gains.append(best < 0.97 * base)
    win = win and any(gains)
for coll in ("reducescatter", "allgather", "reduce"):
    for size in (32 << 20, 128 << 20, 512 << 20):
        a, u = t("la", "bL", coll, size, 6), t("lu4", "u4L", coll, size, 6)
        print(f"large {coll} {size >> 20} MiB: main {a}, branch {u}")
        if a and u and u > 1.02 * a:
            win = False
print("WIN" if win else "NO WIN")
PY
cat $OUT/decide.txt
if grep -q '^WIN' $OUT/decide.txt; then
  [ "$(batch_left)" -gt 230 ] && dr c4 4 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine|GPUAllReduceMatrix|GPUCollsMatrix|GPUTimeout' COLLECTIVES_LIMIT=200
  [ "$(batch_left)" -gt 150 ] && dr k4 4 NVLS_PTX_DIR=$P STEPS=kernels KERNELS_LIMIT=$(( $(batch_left) - 15 )) SOAK_FOR=10s
fi
batch_pack px ma mu4 la lu4 mu4b mab $([ -d $OUT/c4 ] && echo c4) $([ -d $OUT/k4 ] && echo k4)
