#!/bin/bash
# Run 62 (4 GPUs): the TMA probe (fixed), exp/ll256's A/B on 2 GPUs, main's matrices (LL blocks of 256) on 4 and 2 GPUs, the small-size scoreboard at -n 200, the single process at -n 1000 twice.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
T0=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
dr() { # RUN GPUS [env...]
  local run=$1 g=$2; shift 2
  local l=$(left); [ $l -lt 40 ] && { echo "$run: skipped, $l s left"; return; }
  env "$@" RUN=$run DEADLINE=$l scripts/device-run.sh $g > $OUT/$run.log 2>&1
  echo "== $run rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/$run/summary.txt 2>/dev/null | cut -c1-300
}
mkdir -p $OUT/probe
nvidia-smi -L > $OUT/probe/machine.txt
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [[ -x $d/nvcc ]] && { PATH=$d:$PATH; break; }; done
( nvcc -O2 -arch=sm_90 -Ikernels -o /tmp/llprobe scripts/llprobe.cu -lcuda && CUDA_VISIBLE_DEVICES=0,1 timeout 90 /tmp/llprobe 1 - bw ) > $OUT/probe/bw.log 2>&1
echo "== probe rc=$? at $(( $(date +%s) - T0 )) s"; grep -v warning $OUT/probe/bw.log | grep "bw\|error" | tail -40
dr v2 2 CUDA_VISIBLE_DEVICES=0,1 BINS=.devbin/bench-exp-ll256.txz STEPS=variants VARIANT_COLLS="allreduce allgather" VARIANT_MAXBYTES=64K VARIANT_ARGS="-n 200" VARIANTS="t512:NVLS_LL_THREADS=512 t256:NVLS_LL_THREADS=256"
dr s4 4 STEPS=mpisweep MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=120
dr sp1 4 STEPS="launch mpisweep" LAUNCH_MODES=workers LAUNCH_GRAPH="-graph -n 1000" LAUNCH_MAXBYTES=512K COLLS=allreduce MPI_MAXBYTES=512K MPI_ARGS="-n 1000" MPISWEEP_LIMIT=60
dr sp2 4 STEPS=launch LAUNCH_MODES=workers LAUNCH_GRAPH="-graph -n 1000" LAUNCH_MAXBYTES=512K
dr c4 4 STEPS=collectives COLLECTIVES_RUN='GPUAllReduceMatrix|GPUCollsMatrix' COLLECTIVES_LIMIT=190
dr c2 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=collectives COLLECTIVES_RUN='GPUAllReduceMatrix|GPUCollsMatrix' COLLECTIVES_LIMIT=130
cd $OUT && tar czf r.tgz probe v2 s4 sp1 sp2 c4 c2 *.log 2>/dev/null && rm -f *.log; ls -la $OUT
