#!/bin/bash
# Run 96 (2 GPUs): main 1ea3da4, run 92's PTX. The scoreboard (every collective, f32 and bf16, 16 B x 4^k to 256 MiB, -n 100; all-reduce without graphs to 64 KiB), then the kernels and collectives GPU tests with 2 GPUs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=540
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
dr od 2 $B STEPS=mpisweep MPI_ARGS="-b 16 -n 100" MPI_MAXBYTES=256M MPISWEEP_LIMIT=200
dr ng 2 $B STEPS=mpisweep COLLS=allreduce DTYPES=f32 GRAPHS=plain MPI_ARGS="-b 8 -n 100" MPI_MAXBYTES=64K MPISWEEP_LIMIT=60
python3 scripts/goals.py $OUT/od/mpisweep/*.json $OUT/ng/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-120
dr t 2 $B STEPS="kernels collectives" KERNELS_LIMIT=100 COLLECTIVES_LIMIT=220
grep -hE "^(kernels|collectives):" $OUT/t/summary.txt
batch_pack $(for d in od ng t; do [ -d $OUT/$d ] && echo $d; done)
