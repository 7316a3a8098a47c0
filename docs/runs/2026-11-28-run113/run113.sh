#!/bin/bash
# Run 113 (2 GPUs): branch exp/ringvecs (the ring two rounds deep, DefaultRingBytes 32 MiB; the flag waits as barrier_wait; the pipelined loads dropped). ptx; the reduce f32 16-256 MiB at 2 ranks: the default routing against the ring from every size with its default FIFO (127 blocks) and 16 MiB (63 blocks), NCCL beside; the collectives and kernels GPU tests at 2 GPUs on the new PTX.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=480
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr m 2 BINS=.devbin/bins.txz STEPS="ptx"
grep -A2 "  reduce_uc" $OUT/m/ptx.log | head -3
P=/tmp/device-run-ptx/ptx
dr pr 2 BINS=.devbin/bins.txz NVLS_PTX_DIR=$P STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=16M VARIANT_MAXBYTES=256M VARIANT_FACTOR=4 VARIANT_ARGS="-n 20" \
  VARIANTS="def: r127:NVLS_RING_MIN=1 r63:NVLS_RING_MIN=1,NVLS_RING_BYTES=16M"
for v in def r127 r63; do echo "== $v $(grep -E '^ +[0-9]+ ' $OUT/pr/variant-$v-reduce.log 2>/dev/null | awk '$1>=16777216 {printf "%s %s/%s (nccl %s/%s); ", $1, $6, $10, $14, $18}')"; done
dr c 2 BINS=.devbin/bins.txz NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_LIMIT=170
dr k 2 BINS=.devbin/bins.txz NVLS_PTX_DIR=$P STEPS=kernels KERNELS_LIMIT=120 SOAK_FOR=15s
grep -h -- "--- FAIL" $OUT/c/*.log $OUT/k/*.log 2>/dev/null | head
batch_pack m pr c k
