#!/bin/bash
# Run 59 (nvidia-h100-x4): matrices on run 58's PTX at 4 and 2 GPUs, small sizes at -n 200, no graphs, the scoreboard.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
T0=$(date +%s)
left() { echo $(( ${BUDGET:-575} - ($(date +%s) - T0) )); }
dr() { # RUN GPUS [env...]
  local run=$1 g=$2; shift 2
  local l=$(left); [ $l -lt 40 ] && { echo "$run: skipped, $l s left"; return; }
  env "$@" RUN=$run DEADLINE=$l scripts/device-run.sh $g > $OUT/$run.log 2>&1
  echo "== $run rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/$run/summary.txt 2>/dev/null | cut -c1-300
}
dr k4 4 STEPS=kernels SOAK_FOR=20s KERNELS_LIMIT=120
dr t4 4 STEPS=collectives COLLECTIVES_LIMIT=240
dr v4 4 STEPS=variants VARIANT_COLLS="allreduce allgather" VARIANT_MAXBYTES=64K VARIANT_ARGS="-n 200" VARIANTS="n200:"
dr p4 4 STEPS=mpisweep GRAPHS=plain COLLS=allreduce MPI_MAXBYTES=64K MPI_ARGS="-n 200"
dr k2 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=kernels SOAK_FOR=10s KERNELS_LIMIT=90
dr t2 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=collectives COLLECTIVES_LIMIT=120
dr s4 4 STEPS=mpisweep MPISWEEP_LIMIT=200
