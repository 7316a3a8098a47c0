#!/bin/bash
# Run 68 (2 GPUs): exp/cereduce (the 2-rank reduce by copy engine): its PTX, the A/B against main at 8-512 MiB, its tests, its reduce sweep.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
P=/tmp/device-run-ptx/ptx
dr px 2 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-160
[ -d $P ] || { echo "no PTX"; batch_pack px; exit 1; }
V="VARIANT_COLLS=reduce allreduce"
dr o 2 BINS=.devbin/bench-main.txz STEPS=variants "$V" VARIANT_MINBYTES=8M VARIANT_MAXBYTES=512M VARIANT_ARGS="-n 20" VARIANTS="old:"
dr n 2 NVLS_PTX_DIR=$P STEPS=variants "$V" VARIANT_MINBYTES=8M VARIANT_MAXBYTES=512M VARIANT_ARGS="-n 20" VARIANTS="new: ce8:NVLS_CE_MIN=8M"
dr o2 2 BINS=.devbin/bench-main.txz STEPS=variants "$V" VARIANT_MINBYTES=8M VARIANT_MAXBYTES=512M VARIANT_ARGS="-n 20" VARIANTS="old2:"
dr n2 2 NVLS_PTX_DIR=$P STEPS=variants "$V" VARIANT_MINBYTES=8M VARIANT_MAXBYTES=512M VARIANT_ARGS="-n 20" VARIANTS="new2:"
dr c 2 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine|GPUAllReduceMatrix|GPUCollsMatrix|GPUTimeout|GPUArgMismatch' COLLECTIVES_LIMIT=150
dr k 2 NVLS_PTX_DIR=$P STEPS=kernels KERNELS_LIMIT=120 SOAK_FOR=20s
dr s 2 NVLS_PTX_DIR=$P STEPS=mpisweep COLLS=reduce MPISWEEP_LIMIT=60
batch_pack px o n o2 n2 c k s
