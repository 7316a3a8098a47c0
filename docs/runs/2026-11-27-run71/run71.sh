#!/bin/bash
# Run 71 (2 GPUs): exp/llshape (LL blocks up to 512 threads where the grid cap would make threads loop) against main, 128 KiB - 1 MiB; the collectives matrices.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
V="VARIANT_COLLS=reduce allreduce reducescatter allgather"
dr o 2 BINS=.devbin/bench-main.txz STEPS=variants "$V" VARIANT_MINBYTES=128K VARIANT_MAXBYTES=1M VARIANT_FACTOR=2 VARIANT_ARGS="-n 200" VARIANTS="old:"
dr n 2 STEPS=variants "$V" VARIANT_MINBYTES=128K VARIANT_MAXBYTES=1M VARIANT_FACTOR=2 VARIANT_ARGS="-n 200" VARIANTS="new:"
dr c 2 STEPS=collectives COLLECTIVES_RUN='GPUAllReduceMatrix|GPUCollsMatrix' COLLECTIVES_LIMIT=110
batch_pack o n c
