#!/bin/bash
# Run 87 (4 GPUs): main after exp/lltwo. The reduce at 256 KiB - 1 MiB with NVLS_LL_MAX=256K (two LL steps to 512 KiB) against the default; the all-reduce, broadcast, reduce-scatter and all-gather at 16 B x 4^k to 256 MiB.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=270
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
dr rd 4 $M STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=256K VARIANT_MAXBYTES=1M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="base: l256:NVLS_LL_MAX=256K"
dr od 4 $M STEPS=mpisweep COLLS="allreduce broadcast reducescatter allgather" MPI_ARGS="-b 16" MPI_MAXBYTES=256M MPISWEEP_LIMIT=$(( $(batch_left) - 15 ))
python3 scripts/goals.py $OUT/od/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-150
batch_pack $(for d in rd od; do [ -d $OUT/$d ] && echo $d; done)
