#!/bin/bash
# Run 94 (4 GPUs): main 1ea3da4, run 92's PTX. The scoreboard (every collective, f32 and bf16, 16 B x 4^k to 256 MiB, -n 100; all-reduce without graphs to 64 KiB), then the collectives GPU tests run 93 did not run.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=570
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
dr od 4 $B STEPS=mpisweep MPI_ARGS="-b 16 -n 100" MPI_MAXBYTES=256M MPISWEEP_LIMIT=260
dr ng 4 $B STEPS=mpisweep COLLS=allreduce DTYPES=f32 GRAPHS=plain MPI_ARGS="-b 8 -n 100" MPI_MAXBYTES=64K MPISWEEP_LIMIT=60
python3 scripts/goals.py $OUT/od/mpisweep/*.json $OUT/ng/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-120
dr t 4 $B STEPS=collectives COLLECTIVES_SKIP='GPUSoak|TestGPUBroadcast|TestGPUCollsMatrix|TestGPUReadme|TestGPULaunchFromCaller' COLLECTIVES_LIMIT=300
grep -E "^\s*--- FAIL|^FAIL|^ok|^PASS" $OUT/t.log | head -20
batch_pack $(for d in od ng t; do [ -d $OUT/$d ] && echo $d; done)
