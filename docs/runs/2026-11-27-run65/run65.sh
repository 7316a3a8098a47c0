#!/bin/bash
# Run 65 (4 GPUs): main after exp/llwait, its PTX embedded: the kernels' LL matrix at 2-4 ranks and a short soak, the -n 200 scoreboard to 64 KiB.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
T0=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
dr() { # RUN GPUS [env...]
  local run=$1 g=$2; shift 2
  local l=$(left); [ $l -lt 40 ] && { echo "$run: skipped, $l s left"; return; }
  env "$@" RUN=$run DEADLINE=$l scripts/device-run.sh $g > $OUT/$run.log 2>&1
  echo "== $run rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/$run/summary.txt 2>/dev/null | cut -c1-300
}
dr s4 4 STEPS=mpisweep MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=70
dr k4 4 STEPS=kernels KERNELS_RUN='GPUAllReduceUnicast//ll|GPUSoak' SOAK_FOR=25s KERNELS_LIMIT=70
cd $OUT && tar czf r.tgz s4 k4 *.log 2>/dev/null && rm -f *.log; ls -la $OUT
