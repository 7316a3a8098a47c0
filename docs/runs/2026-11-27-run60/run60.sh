#!/bin/bash
# Run 60 (nvidia-h100-x4): what run 59's step limits cut: the kernels GPU tests at 4 GPUs, the collectives at 2; then the scoreboard.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
T0=$(date +%s)
left() { echo $(( ${BUDGET:-300} - ($(date +%s) - T0) )); }
dr() { # RUN GPUS [env...]
  local run=$1 g=$2; shift 2
  local l=$(left); [ $l -lt 40 ] && { echo "$run: skipped, $l s left"; return; }
  env "$@" RUN=$run DEADLINE=$l scripts/device-run.sh $g > $OUT/$run.log 2>&1
  echo "== $run rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/$run/summary.txt 2>/dev/null | cut -c1-300
}
dr k4a 4 STEPS=kernels KERNELS_RUN='GPUAllReduceUnicast/4-ranks' KERNELS_LIMIT=100
dr k4b 4 STEPS=kernels KERNELS_RUN='GPUSoak|GPUBroadcast|GPUBarrierWrap$|GPUTimeout' SOAK_FOR=15s KERNELS_LIMIT=60
dr t2 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=collectives COLLECTIVES_RUN='GPUGraphReplay|GPUTimeout|GPULaunchFromCaller|GPUReadme' COLLECTIVES_LIMIT=40
dr s4 4 STEPS=mpisweep MPISWEEP_LIMIT=170
