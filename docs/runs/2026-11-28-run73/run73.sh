#!/bin/bash
# Run 73 (4 GPUs; GPUs 0-1 for 2 ranks): exp/cepipe's 2-rank reduce against main; main's medium reduce-scatter and all-gather grids at 4 GPUs; the branch's matrices at 2 GPUs if it wins.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
P=/tmp/device-run-ptx/ptx
G2=CUDA_VISIBLE_DEVICES=0,1
R="STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=8M VARIANT_MAXBYTES=512M VARIANT_FACTOR=4"
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-120 | head -4
[ -d $P ] || { echo "no PTX"; batch_pack px; exit 1; }
dr ro2 2 $G2 $M $R VARIANT_ARGS="-n 20" VARIANTS="old:"
dr rn2 2 $G2 NVLS_PTX_DIR=$P $R VARIANT_ARGS="-n 20" VARIANTS="new: ce8:NVLS_CE_MIN=8M"
dr ro2b 2 $G2 $M $R VARIANT_ARGS="-n 20" VARIANTS="old2:"
dr rn2b 2 $G2 NVLS_PTX_DIR=$P $R VARIANT_ARGS="-n 20" VARIANTS="new2:"
dr kn4 4 $M STEPS=variants VARIANT_COLLS="reducescatter allgather" VARIANT_MINBYTES=1M VARIANT_MAXBYTES=32M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="base: mg64:NVLS_MIN_GRID=64 mg132:NVLS_MIN_GRID=132"
t() { grep -E '^ +536870912 ' $OUT/$1/variant-$2-reduce.log | awk '{print $6}'; }
o=$(t ro2 old); n=$(t rn2 new); echo "reduce 512M: main $o, cepipe $n"
if awk -v o="$o" -v n="$n" 'BEGIN{exit !(n+0 > 0 && n < 0.98*o)}'; then
  dr c2 2 $G2 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine|GPUAllReduceMatrix|GPUCollsMatrix|GPUTimeout' COLLECTIVES_LIMIT=130
fi
batch_pack px ro2 rn2 ro2b rn2b kn4 $([ -d $OUT/c2 ] && echo c2)
