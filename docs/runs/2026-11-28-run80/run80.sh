#!/bin/bash
# Run 80 (2 GPUs): main's 2-GPU scoreboard in one run (run 67's sweeps), on the card kind run 67 did not have.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=440
source scripts/device-batch.sh
M=BINS=.devbin/bench-main.txz
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt; nvidia-smi topo -m >> $OUT/machine.txt
dr sb 2 $M STEPS=mpisweep MPISWEEP_LIMIT=180
dr ss 2 $M STEPS=mpisweep MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=70
dr ng 2 $M STEPS=mpisweep COLLS=allreduce GRAPHS=plain MPI_MAXBYTES=64K MPI_ARGS="-n 2000" MPISWEEP_LIMIT=45
dr sp 2 $M STEPS=launch LAUNCH_MODES=workers LAUNCH_GRAPH="-graph -n 1000" LAUNCH_MAXBYTES=512K
batch_pack sb ss ng sp
