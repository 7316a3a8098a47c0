#!/bin/bash
# Run 88 (2 GPUs): main. Broadcast and reduce 8 B - 1 MiB, -n 200, average against -timing median.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=200
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
dr avg 2 $M STEPS=variants VARIANT_COLLS="broadcast reduce allreduce" VARIANT_MINBYTES=8 VARIANT_MAXBYTES=1M VARIANT_FACTOR=4 VARIANT_ARGS="-n 200" VARIANTS="avg:"
dr med 2 $M STEPS=variants VARIANT_COLLS="broadcast reduce allreduce" VARIANT_MINBYTES=8 VARIANT_MAXBYTES=1M VARIANT_FACTOR=4 VARIANT_ARGS="-n 200 -timing median" VARIANTS="med:"
python3 scripts/ratios.py $OUT/avg/variant-*.json $OUT/med/variant-*.json
batch_pack $(for d in avg med; do [ -d $OUT/$d ] && echo $d; done)
