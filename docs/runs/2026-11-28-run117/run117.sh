#!/bin/bash
# Run 117 (2 GPUs): main (run 113's PTX, embedded). The 2-rank reduce f32 and bf16 1-512 MiB: the default (two-shot with the root's slice) against NVLS_ONESHOT_MAX=1G (the root pulls the peer's whole send), twice each, NCCL beside.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=300
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
V="def: one:NVLS_ONESHOT_MAX=1G def2: one2:NVLS_ONESHOT_MAX=1G"
dr f 2 $B STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=1M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="$V"
dr h 2 $B STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=1M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20 -d bf16" VARIANTS="$V"
for r in f h; do for v in def one def2 one2; do echo "== $r $v $(grep -E '^ +[0-9]+ ' $OUT/$r/variant-$v-reduce.log 2>/dev/null | awk '{printf "%dM %s/%s (n %s/%s); ", $1/1048576, $6, $10, $14, $18}')"; done; done
batch_pack f h
