#!/bin/bash
# Run 82 (2 GPUs): the 2-rank reduce and all-reduce at 512 KiB - 2 MiB with the one-shot limit at 512 KiB against the default 1 MiB, twice.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=120
source scripts/device-batch.sh
M=BINS=.devbin/bench-main.txz
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr os 2 $M STEPS=variants VARIANT_COLLS="reduce allreduce" VARIANT_MINBYTES=512K VARIANT_MAXBYTES=2M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="base: os512:NVLS_ONESHOT_MAX=512K os512b:NVLS_ONESHOT_MAX=512K baseb:"
batch_pack os
