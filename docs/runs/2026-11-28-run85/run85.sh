#!/bin/bash
# Run 85 (4 GPUs): branch exp/lltwo. The ptx step; the reduce 128 KiB - 2 MiB on the new PTX with the two LL steps (default), NVLS_LL_TWO_MAX=0 (main's path) and NVLS_LL_MAX=256K (one LL step); if two steps win, the kernels and collectives GPU tests at 4 GPUs on the new PTX; the reduce at 16 B x 4^k if time is left.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=570
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
P=/tmp/device-run-ptx/ptx
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-160 | head -5
[ -d $P ] || { echo "no PTX"; batch_pack px; exit 1; }
rd() { dr $1 4 NVLS_PTX_DIR=$P STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=128K VARIANT_MAXBYTES=2M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="$2"; }
rd rd "two: off:NVLS_LL_TWO_MAX=0 ll256:NVLS_LL_MAX=256K"
t() { grep -E '^ +262144 ' $OUT/$1/variant-$2-reduce.log 2>/dev/null | awk '{print $6}'; }
a=$(t rd two); b=$(t rd off); echo "reduce 256K: two steps $a, off $b"
if awk -v a="$a" -v b="$b" 'BEGIN{exit !(a+0>0 && b+0>0 && a < 0.95*b)}'; then
  dr tc 4 NVLS_PTX_DIR=$P STEPS="kernels collectives" SOAK_FOR=15s KERNELS_LIMIT=150 COLLECTIVES_LIMIT=$(( $(batch_left) - 120 ))
fi
rd rdb "offb:NVLS_LL_TWO_MAX=0 ll256b:NVLS_LL_MAX=256K twob:"
[ $(batch_left) -gt 60 ] && dr od 4 NVLS_PTX_DIR=$P STEPS=mpisweep COLLS=reduce MPI_ARGS="-b 16" MPI_MAXBYTES=256M MPISWEEP_LIMIT=$(( $(batch_left) - 15 ))
batch_pack $(for d in px rd tc rdb od; do [ -d $OUT/$d ] && echo $d; done)
