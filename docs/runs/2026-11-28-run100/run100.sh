#!/bin/bash
# Run 100 (2 GPUs): branch exp/pushreduce. ptx; the kernels and collectives GPU tests on it (the push reduce needs 3 ranks: not run here).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=330
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr t 2 BINS=.devbin/bins.txz STEPS="ptx kernels collectives" SOAK_FOR=10s KERNELS_LIMIT=110 COLLECTIVES_LIMIT=150
cat $OUT/t/summary.txt
grep -iE "spill|error" $OUT/t/ptx.log | head -20
grep -A3 "nvls_reduce_twoshot_f32_sum" $OUT/t/ptx.log | head -12
batch_pack t
