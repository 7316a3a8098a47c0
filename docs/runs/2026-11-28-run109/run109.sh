#!/bin/bash
# Run 109 (1 GPU, shared ranks): branch exp/ring, the ring reduce from 2 ranks. ptx; the collectives GPU matrix with 2 ranks on GPU 0; its push (ring) cases with 4 ranks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=330
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr m2 1 VRANKS=2 BINS=.devbin/bins.txz STEPS="ptx collectives" COLLECTIVES_RUN='GPUCollsMatrix' COLLECTIVES_LIMIT=150
grep -A3 "  reduce_uc" $OUT/m2/ptx.log | head -4
dr m4 1 VRANKS=4 BINS=.devbin/bins.txz NVLS_PTX_DIR=/tmp/device-run-ptx/ptx STEPS=collectives COLLECTIVES_RUN='GPUCollsMatrix/reduce_.*_push_' COLLECTIVES_LIMIT=100
grep -h -- "--- FAIL" $OUT/m2/*.log $OUT/m4/*.log 2>/dev/null | head
batch_pack m2 m4
