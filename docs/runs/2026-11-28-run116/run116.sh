#!/bin/bash
# Run 116 (2 GPUs): main, run 113's PTX. The all-reduce without graphs to 64 KiB again, two passes of -n 100 (run 115's 32 B out of place: 8.23 us, a point 2.5x its neighbours).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=120
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
for p in 1 2; do
dr ng$p 2 $B STEPS=mpisweep COLLS=allreduce DTYPES=f32 GRAPHS=plain MPI_ARGS="-b 8 -n 100" MPI_MAXBYTES=64K MPISWEEP_LIMIT=40
python3 scripts/goals.py $OUT/ng$p/mpisweep/*.json 2>&1 | grep "no graphs" | cut -c1-120
done
batch_pack ng1 ng2
