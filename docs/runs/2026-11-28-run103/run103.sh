#!/bin/bash
# Run 103 (2 GPUs): llprobe's bandwidth mode with the mixed-carrier rows (copy engine + SM copy on one direction at once).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
nvidia-smi topo -m >> $OUT/machine.txt
nvcc -O2 -arch=sm_90 -Ikernels -Iscripts -o /tmp/llprobe scripts/llprobe.cu -lcuda 2>&1 | tail -5
for i in 1 2; do timeout 120 /tmp/llprobe 1 - bw > $OUT/bw$i.txt 2>&1; echo "pass $i rc=$?"; done
cat $OUT/bw1.txt
grep mix $OUT/bw2.txt
