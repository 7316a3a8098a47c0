#!/bin/bash
# Run 78 (4 GPUs): exp/unroll (spans take 4 vectors a thread at once) against main: the 4-rank reduce-scatter and all-gather at 512 KiB - 8 MiB (min grid 32, 8, 0) and 32-512 MiB with the reduce; the branch's matrices and kernels GPU tests at 4 GPUs if it wins.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
# The experiment's 2-vector PTX beside the ptx step (CPU only).
( OUT=/tmp/pu2 NVCC_FLAGS=-DNVLS_SPAN_UNROLL=2 scripts/ptx-device.sh ) > $OUT/pu2.log 2>&1 &
bp=$!
M=BINS=.devbin/bench-main.txz
P=/tmp/device-run-ptx/ptx
P2=/tmp/pu2/ptx
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-130 | head -12
wait $bp; echo "== pu2 rc=$? at $(( $(date +%s) - batch_t0 )) s"; grep -h "reducescatter\|allgather\|error" $OUT/pu2.log | cut -c1-130 | head -6
[ -d $P ] && [ -d $P2 ] || { echo "no PTX"; batch_pack px; exit 1; }
# The f32 sum reduce-scatter's SASS, main's PTX and the branch's: are a thread's loads issued together?
for d in u1:ptx u4:$P; do n=${d%%:*}; ( PATH=/usr/local/cuda/bin:$PATH; ptxas -arch=sm_90 -o /tmp/rs-$n.cubin ${d#*:}/reducescatter_uc.ptx && cuobjdump -sass /tmp/rs-$n.cubin | awk '/Function : nvls_reducescatter_oneshot_f32_sum$/{f=1;print;next} /Function :/{f=0} f' ) > $OUT/sass-rs-$n.txt 2>&1; echo "sass $n: $(grep -c 'LDG' $OUT/sass-rs-$n.txt) LDG, $(grep -c 'FADD' $OUT/sass-rs-$n.txt) FADD"; done
med() { dr $1 4 "${@:3}" STEPS=variants VARIANT_COLLS="reducescatter allgather" VARIANT_MINBYTES=512K VARIANT_MAXBYTES=$2 VARIANT_FACTOR=2 VARIANT_ARGS="-n 100"; }
big() { dr $1 4 "${@:2}" STEPS=variants VARIANT_COLLS="reducescatter allgather reduce" VARIANT_MINBYTES=32M VARIANT_MAXBYTES=512M VARIANT_FACTOR=4 VARIANT_ARGS="-n 20"; }
med ma 8M $M VARIANTS="base: b0:NVLS_MIN_GRID=0"
med mu4 8M NVLS_PTX_DIR=$P VARIANTS="u4: u4g0:NVLS_MIN_GRID=0 u4g8:NVLS_MIN_GRID=8"
med mu2 8M NVLS_PTX_DIR=$P2 VARIANTS="u2: u2g0:NVLS_MIN_GRID=0"
big la $M VARIANTS="bL:"
big lu4 NVLS_PTX_DIR=$P VARIANTS="u4L:"
med mu4b 4M NVLS_PTX_DIR=$P VARIANTS="u4g8b:NVLS_MIN_GRID=8 u4g0b:NVLS_MIN_GRID=0 u4b:"
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
for (ra, b, ru, us) in [("ma", "base", "mu4", ["u4", "u4g0", "u4g8"]), ("mab", "baseb", "mu4b", ["u4b", "u4g0b", "u4g8b"])]:
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
batch_pack px ma mu4 mu2 la lu4 mu4b mab $([ -d $OUT/c4 ] && echo c4) $([ -d $OUT/k4 ] && echo k4)
