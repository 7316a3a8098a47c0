#!/bin/bash
# Run 81 (2 GPUs): run 80's outliers again (the all-reduce without graphs to 64 KiB, twice; the all-gather and the reduce at 64 KiB - 8 MiB, -n 100).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=200
source scripts/device-batch.sh
M=BINS=.devbin/bench-main.txz
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr ng 2 $M STEPS=mpisweep COLLS=allreduce GRAPHS=plain MPI_MAXBYTES=64K MPI_ARGS="-n 2000" MPISWEEP_LIMIT=45
dr mv 2 $M STEPS=variants VARIANT_COLLS="allgather reduce" VARIANT_MINBYTES=64K VARIANT_MAXBYTES=8M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="base:"
dr ngb 2 $M STEPS=mpisweep COLLS=allreduce GRAPHS=plain MPI_MAXBYTES=64K MPI_ARGS="-n 2000" MPISWEEP_LIMIT=45
batch_pack ng mv ngb
