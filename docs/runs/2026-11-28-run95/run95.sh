#!/bin/bash
# Run 95 (4 GPUs): run 94's scoreboard again (nvls-bench carried this time).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=570
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
dr od 4 $B STEPS=mpisweep MPI_ARGS="-b 16 -n 100" MPI_MAXBYTES=256M MPISWEEP_LIMIT=260
dr ng 4 $B STEPS=mpisweep COLLS=allreduce DTYPES=f32 GRAPHS=plain MPI_ARGS="-b 8 -n 100" MPI_MAXBYTES=64K MPISWEEP_LIMIT=60
python3 scripts/goals.py $OUT/od/mpisweep/*.json $OUT/ng/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-120
batch_pack $(for d in od ng; do [ -d $OUT/$d ] && echo $d; done)
