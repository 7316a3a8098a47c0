#!/bin/bash
# Run 86 (2 GPUs): branch exp/lltwo with run 85's PTX embedded: the kernels and collectives GPU tests.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=300
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr tc 2 STEPS="kernels collectives" SOAK_FOR=15s KERNELS_LIMIT=100 COLLECTIVES_LIMIT=170
batch_pack tc
