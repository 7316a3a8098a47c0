#!/bin/bash
# Run 63 (4 GPUs): main (LL blocks of 256) on GPUs 0-1, one process a GPU: the small sizes at -n 200 and every size at -n 20; 4 GPUs without graphs at -n 200.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
T0=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
dr() { # RUN GPUS [env...]
  local run=$1 g=$2; shift 2
  local l=$(left); [ $l -lt 40 ] && { echo "$run: skipped, $l s left"; return; }
  env "$@" RUN=$run DEADLINE=$l scripts/device-run.sh $g > $OUT/$run.log 2>&1
  echo "== $run rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/$run/summary.txt 2>/dev/null | cut -c1-300
}
dr s2a 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=mpisweep MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=90
dr n4 4 STEPS=mpisweep GRAPHS=plain COLLS=allreduce MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=60
dr s2b 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=mpisweep MPISWEEP_LIMIT=200
cd $OUT && tar czf r.tgz s2a n4 s2b *.log 2>/dev/null && rm -f *.log; ls -la $OUT
