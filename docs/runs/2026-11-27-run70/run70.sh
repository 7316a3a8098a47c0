#!/bin/bash
# Run 70 (2 GPUs): main (run 64 PTX): the eager all-reduce at -n 2000; the reduce's LL limit at 128 KiB - 2 MiB.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=.devbin/bench-main.txz
dr ng 2 BINS=$B STEPS=mpisweep COLLS=allreduce GRAPHS=plain MPI_MAXBYTES=64K MPI_ARGS="-n 2000" MPISWEEP_LIMIT=60
dr rv 2 BINS=$B STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=128K VARIANT_MAXBYTES=2M VARIANT_FACTOR=2 VARIANT_ARGS="-n 200" VARIANTS="ll512: ll256:NVLS_LL_MAX=256K ll1m:NVLS_LL_MAX=1M"
batch_pack ng rv
