#!/bin/bash
# Run 114 (4 GPUs), written 2026-11-28 and not run (no 4-GPU machine was lent), cut to the budget left then: main (run 113's PTX). smpattern at 4 GPUs; the ring at 31 and 127 blocks against the default (reduce f32 16-256 MiB, -n 10); the kernels GPU tests with 4 GPUs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=230
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt; nvidia-smi topo -m >> $OUT/machine.txt
nvcc -O2 -arch=sm_90 -o /tmp/smpattern scripts/smpattern.cu 2>&1 | tail -5
timeout 40 /tmp/smpattern 256 5 2>&1 | tee $OUT/smpattern.txt
B=BINS=.devbin/bins.txz
dr rv 4 $B STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=16M VARIANT_MAXBYTES=256M VARIANT_FACTOR=4 VARIANT_ARGS="-n 10" \
  VARIANTS="def: r31:NVLS_RING_MIN=1,NVLS_RING_BYTES=8M r127:NVLS_RING_MIN=1"
for v in def r31 r127; do echo "== $v $(grep -E '^ +[0-9]+ ' $OUT/rv/variant-$v-reduce.log 2>/dev/null | awk '{printf "%dM %s/%s (n %s/%s); ", $1/1048576, $6, $10, $14, $18}')"; done
dr k 4 $B STEPS=kernels KERNELS_LIMIT=100 SOAK_FOR=10s
grep -h -- "--- FAIL" $OUT/k/*.log 2>/dev/null | head
batch_pack rv k
