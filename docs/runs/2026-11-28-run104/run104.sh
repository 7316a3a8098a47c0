#!/bin/bash
# Run 104 (4 GPUs): branch exp/push2 (run 102's PTX, embedded). The GPU matrix's push reduce cases on 4 GPUs; the reduce 16-256 MiB: two-shot against push with 2, 8 and 16 MiB stages, NCCL beside; the all-gather at 3 ranks: copy-engine limit default against 64M and 32M.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=450
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr m 4 BINS=.devbin/bins.txz STEPS=collectives COLLECTIVES_RUN='GPUCollsMatrix/reduce_.*_push_' COLLECTIVES_LIMIT=90
dr pr 4 BINS=.devbin/bins.txz STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=16M VARIANT_MAXBYTES=256M VARIANT_FACTOR=4 VARIANT_ARGS="-n 20" \
  VARIANTS="two:NVLS_REDUCE_PUSH_MIN=0 push2:NVLS_REDUCE_PUSH_MIN=16M push8:NVLS_REDUCE_PUSH_MIN=16M,NVLS_STAGE_BYTES=8M push16:NVLS_REDUCE_PUSH_MIN=16M,NVLS_STAGE_BYTES=16M"
for v in two push2 push8 push16; do echo "== $v"; grep -E '^ +(16777216|67108864|268435456) ' $OUT/pr/variant-$v-reduce.log 2>/dev/null | cut -c1-220; done
dr ce3 3 BINS=.devbin/bins.txz CUDA_VISIBLE_DEVICES=0,1,2 STEPS=variants VARIANT_COLLS=allgather VARIANT_MINBYTES=96M VARIANT_MAXBYTES=384M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" \
  VARIANTS="base: ce64:NVLS_CE_MIN=64M ce32:NVLS_CE_MIN=32M"
for v in base ce64 ce32; do echo "== $v"; grep -E '^ +(100663296|201326592|402653184) ' $OUT/ce3/variant-$v-allgather.log 2>/dev/null | cut -c1-220; done
batch_pack m pr ce3
