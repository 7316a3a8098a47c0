#!/bin/bash
# Run 125 (1 GPU): after the hot-call change (cuEventRecord, cuStreamWaitEvent, cuGraphLaunch through the pooled block): the cuda GPU tests, and the collectives GPU tests with 2 ranks sharing the GPU.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=300
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
mkdir -p /tmp/b && tar xJf .devbin/bins.txz -C /tmp/b
(cd /tmp/b && timeout 120 ./cuda.test -test.run GPU -test.v 2>&1 > $OUT/cuda.log; echo "cuda: rc $? PASS $(grep -c -- '--- PASS' $OUT/cuda.log) FAIL $(grep -c -- '--- FAIL' $OUT/cuda.log)")
dr c 1 BINS=.devbin/bins.txz VRANKS=2 STEPS=collectives COLLECTIVES_LIMIT=200
grep -h -- "--- FAIL" $OUT/c/*.log 2>/dev/null | head
batch_pack c
