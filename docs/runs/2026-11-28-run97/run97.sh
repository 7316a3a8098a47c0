#!/bin/bash
# Run 97 (2 GPUs): the kernels GPU tests run 96 did not reach, on run 92's PTX.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=200
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr t 2 BINS=.devbin/bins.txz STEPS=kernels KERNELS_RUN='TestGPUBroadcast|TestGPUBarrierWrap|TestGPUTimeout|TestGPUSoak' SOAK_FOR=20s KERNELS_LIMIT=150
grep -hE "^--- (PASS|FAIL)" $OUT/t/kernels.log
batch_pack t
