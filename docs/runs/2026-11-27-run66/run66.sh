#!/bin/bash
# Run 66 (4 GPUs, then GPUs 0-1): exp/cers on its own PTX: the A/B against main at 128-512 MiB, then its tests.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
P=/tmp/device-run-ptx/ptx
V="STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2"
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-160
[ -d $P ] || { echo "no PTX"; batch_pack px; exit 1; }
dr o4 4 BINS=.devbin/bench-main.txz $V VARIANT_ARGS="-n 20" VARIANTS="old:"
dr n4 4 NVLS_PTX_DIR=$P $V VARIANT_ARGS="-n 20" VARIANTS="new: ce32:NVLS_CE_MIN=32M"
dr o4b 4 BINS=.devbin/bench-main.txz $V VARIANT_ARGS="-n 20" VARIANTS="old2:"
dr n4b 4 NVLS_PTX_DIR=$P $V VARIANT_ARGS="-n 20" VARIANTS="new2:"
dr c4 4 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine|GPUAllReduceMatrix|GPUCollsMatrix|GPUTimeout|GPUArgMismatch' COLLECTIVES_LIMIT=200
dr o2 2 CUDA_VISIBLE_DEVICES=0,1 BINS=.devbin/bench-main.txz $V VARIANT_ARGS="-n 20" VARIANTS="old:"
dr n2 2 CUDA_VISIBLE_DEVICES=0,1 NVLS_PTX_DIR=$P $V VARIANT_ARGS="-n 20" VARIANTS="new:"
dr c2 2 CUDA_VISIBLE_DEVICES=0,1 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine|GPUAllReduceMatrix|GPUCollsMatrix' COLLECTIVES_LIMIT=110
batch_pack px o4 n4 o4b n4b c4 o2 n2 c2
