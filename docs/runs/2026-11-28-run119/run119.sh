#!/bin/bash
# Run 119 (2 GPUs): scripts/smpattern.cu built and run (S = 256 MiB): the SMs' rate under the reduce's and reduce-scatter's link patterns.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
nvcc -O2 -arch=sm_90 -o /tmp/smpattern scripts/smpattern.cu 2>&1 | tail -5
timeout 120 /tmp/smpattern 256 7 2>&1 | tee $OUT/smpattern.txt
