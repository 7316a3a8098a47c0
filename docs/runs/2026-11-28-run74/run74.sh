#!/bin/bash
# Run 74 (4 GPUs; GPUs 0-1 for 2 ranks): exp/cepipe (its PTX committed, run 73) 2-rank all-reduce against main; main's LL limits at 4 GPUs for reduce-scatter, all-gather, all-reduce; the branch's collectives matrices at 4 GPUs and kernels GPU tests at 2 and 4.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=555
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
G2=CUDA_VISIBLE_DEVICES=0,1
A="STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2"
dr ao2 2 $G2 $M $A VARIANT_ARGS="-n 20" VARIANTS="old:"
dr an2 2 $G2 $A VARIANT_ARGS="-n 20" VARIANTS="new:"
dr ao2b 2 $G2 $M $A VARIANT_ARGS="-n 20" VARIANTS="old2:"
dr an2b 2 $G2 $A VARIANT_ARGS="-n 20" VARIANTS="new2:"
dr ll4 4 $M STEPS=variants VARIANT_COLLS="reducescatter allgather allreduce" VARIANT_MINBYTES=256K VARIANT_MAXBYTES=4M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="base: ll256:NVLS_LL_MAX=256K ll512:NVLS_LL_MAX=512K"
dr c4 4 STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine|GPUAllReduceMatrix|GPUCollsMatrix|GPUTimeout' COLLECTIVES_LIMIT=210
dr k2 2 $G2 STEPS=kernels KERNELS_LIMIT=90 SOAK_FOR=15s
dr k4 4 STEPS=kernels KERNELS_LIMIT=$(( $(batch_left) - 15 )) SOAK_FOR=15s
batch_pack ao2 an2 ao2b an2b ll4 c4 k2 k4
