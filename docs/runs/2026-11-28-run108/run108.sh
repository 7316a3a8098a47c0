#!/bin/bash
# Run 108 (4 GPUs): branch exp/ring, 128 KiB pieces. ptx; the GPU matrix's push (ring) reduce cases on that PTX; the reduce f32 16-256 MiB: two-shot against the ring with 16 and 32 MiB stages, NCCL beside.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=420
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr m 4 BINS=.devbin/bins.txz STEPS="ptx collectives" COLLECTIVES_RUN='GPUCollsMatrix/reduce_.*_push_' COLLECTIVES_LIMIT=90
grep -A3 "  reduce_uc" $OUT/m/ptx.log | head -4
dr pr 4 BINS=.devbin/bins.txz NVLS_PTX_DIR=/tmp/device-run-ptx/ptx STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=16M VARIANT_MAXBYTES=256M VARIANT_FACTOR=4 VARIANT_ARGS="-n 20" \
  VARIANTS="two:NVLS_REDUCE_PUSH_MIN=0 ring16:NVLS_REDUCE_PUSH_MIN=16M,NVLS_STAGE_BYTES=16M ring32:NVLS_REDUCE_PUSH_MIN=16M,NVLS_STAGE_BYTES=32M"
for v in two ring16 ring32; do echo "== $v"; grep -E '^ +(16777216|67108864|268435456) ' $OUT/pr/variant-$v-reduce.log 2>/dev/null | awk '{print $1, $6, $10, "nccl", $14, $18}'; done
batch_pack m pr
