#!/bin/bash
# Run 118 (2 GPUs): main with the 2-rank reduce pulled by the root from 8 MiB (run 113's PTX). The reduce f32 1-512 MiB, the default against NVLS_REDUCE_PULL_MIN=0; the reduce scoreboard (f32, bf16, -n 100); the collectives GPU tests with 2 GPUs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=420
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
dr v 2 $B STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=1M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="def: two:NVLS_REDUCE_PULL_MIN=0"
for v in def two; do echo "== $v $(grep -E '^ +[0-9]+ ' $OUT/v/variant-$v-reduce.log 2>/dev/null | awk '{printf "%dM %s/%s (n %s/%s); ", $1/1048576, $6, $10, $14, $18}')"; grep -h "^# nvls:" $OUT/v/variant-$v-reduce.log | cut -c1-250; done
dr od 2 $B STEPS=mpisweep COLLS=reduce MPI_ARGS="-b 16 -n 100" MPI_MAXBYTES=256M MPISWEEP_LIMIT=90
python3 scripts/goals.py $OUT/od/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-150
dr c 2 $B STEPS=collectives COLLECTIVES_LIMIT=170
grep -h -- "--- FAIL" $OUT/c/*.log 2>/dev/null | head
batch_pack v od c
