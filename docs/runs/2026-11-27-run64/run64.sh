#!/bin/bash
# Run 64 (4 GPUs): exp/llwait (the LL wait loads every missing line together): its PTX, the A/B against the embedded (run 58) PTX on 4 and 2 GPUs, then its tests.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
T0=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
dr() { # RUN GPUS [env...]
  local run=$1 g=$2; shift 2
  local l=$(left); [ $l -lt 40 ] && { echo "$run: skipped, $l s left"; return; }
  env "$@" RUN=$run DEADLINE=$l scripts/device-run.sh $g > $OUT/$run.log 2>&1
  echo "== $run rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/$run/summary.txt 2>/dev/null | cut -c1-300
}
P=/tmp/device-run-ptx/ptx
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-160
[ -d $P ] || { echo "no PTX"; exit 1; }
dr v4 4 STEPS=variants VARIANT_COLLS="allreduce allgather" VARIANT_MAXBYTES=64K VARIANT_ARGS="-n 200" VARIANTS="old: new:NVLS_PTX_DIR=$P old2: new2:NVLS_PTX_DIR=$P"
dr v2 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=variants VARIANT_COLLS=allreduce VARIANT_MAXBYTES=64K VARIANT_ARGS="-n 200" VARIANTS="old: new:NVLS_PTX_DIR=$P"
dr c4 4 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUAllReduceMatrix|GPUCollsMatrix|GPUTimeout|GPUArgMismatch' COLLECTIVES_LIMIT=200
dr k4 4 NVLS_PTX_DIR=$P STEPS=kernels KERNELS_RUN='GPUAllReduceUnicast/4-ranks/LL|GPUTimeout' KERNELS_LIMIT=60
dr c2 2 CUDA_VISIBLE_DEVICES=0,1 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUAllReduceMatrix|GPUCollsMatrix' COLLECTIVES_LIMIT=110
cd $OUT && tar czf r.tgz px v4 v2 c4 k4 c2 *.log 2>/dev/null && rm -f *.log; ls -la $OUT
