#!/bin/bash
# Run 122 (2 GPUs): main with the 2-rank reduce pulled by the root (run 113's PTX). The 2-GPU scoreboard with today's defaults (every collective, f32 and bf16, 16 B x 4^k to 256 MiB, -n 100; all-reduce without graphs to 64 KiB).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=330
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
dr od 2 $B STEPS=mpisweep MPI_ARGS="-b 16 -n 100" MPI_MAXBYTES=256M MPISWEEP_LIMIT=220
dr ng 2 $B STEPS=mpisweep COLLS=allreduce DTYPES=f32 GRAPHS=plain MPI_ARGS="-b 8 -n 100" MPI_MAXBYTES=64K MPISWEEP_LIMIT=60
python3 scripts/goals.py $OUT/od/mpisweep/*.json $OUT/ng/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-120
grep -h "^# nvls:" $OUT/od/mpisweep/*.txt | sort | uniq -c | cut -c1-250
batch_pack od ng
