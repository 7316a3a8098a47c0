#!/bin/bash
# Run 67 (2 GPUs): exp/cers's knobs against main at 256-512 MiB, main's full 2-GPU scoreboard (run 64 PTX), the kernels GPU tests.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt; nvidia-smi topo -m >> $OUT/machine.txt
dr o2 2 STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=256M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="old:"
dr n2 2 BINS=.devbin/bench-exp-cers.txz STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=256M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="new: p4:NVLS_CE_PIECES=4 p16:NVLS_CE_PIECES=16 g16:NVLS_CE_LOCAL_GRID=16 new2:"
dr o2b 2 STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=256M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="old2:"
dr sb 2 STEPS=mpisweep MPISWEEP_LIMIT=150
dr ss 2 STEPS=mpisweep MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=70
dr ng 2 STEPS=mpisweep COLLS=allreduce GRAPHS=plain MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=40
dr sp 2 STEPS=launch LAUNCH_MODES=workers LAUNCH_GRAPH="-graph -n 1000" LAUNCH_MAXBYTES=512K
dr k2 2 STEPS=kernels KERNELS_LIMIT=200 SOAK_FOR=40s
batch_pack o2 n2 o2b sb ss ng sp k2
