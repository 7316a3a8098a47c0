#!/bin/bash
# Run 110 (2 GPUs): branch exp/ring (run 109's PTX, embedded), the ring reduce from 2 ranks. The reduce f32 4-512 MiB: today's default against the ring with 16/32/64 MiB FIFOs, NCCL beside; then the collectives and kernels GPU matrices at 2 GPUs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=575
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr pr 2 BINS=.devbin/bins.txz STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=4M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" \
  VARIANTS="def: ring16:NVLS_RING_MIN=1,NVLS_RING_BYTES=16M ring32:NVLS_RING_MIN=1,NVLS_RING_BYTES=32M ring64:NVLS_RING_MIN=1,NVLS_RING_BYTES=64M"
for v in def ring16 ring32 ring64; do echo "== $v"; grep -E '^ +[0-9]+ ' $OUT/pr/variant-$v-reduce.log 2>/dev/null | awk '$1>=4194304 {print $1, $6, $10, "nccl", $14, $18}'; done
dr c 2 BINS=.devbin/bins.txz STEPS=collectives COLLECTIVES_LIMIT=170
dr k 2 BINS=.devbin/bins.txz STEPS=kernels KERNELS_LIMIT=200 SOAK_FOR=20s
grep -h -- "--- FAIL" $OUT/c/*.log $OUT/k/*.log 2>/dev/null | head
batch_pack pr c k
