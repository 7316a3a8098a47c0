#!/bin/bash
# Run 61 (4 GPUs): the TMA probe, exp/tma's bulk loads (ptx + variants + tests), exp/ll256's LL blocks, the single process at -n 200.
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
( nvcc -O2 -arch=sm_90 -Ikernels -o /tmp/llprobe scripts/llprobe.cu -lcuda && CUDA_VISIBLE_DEVICES=0,1 timeout 60 /tmp/llprobe 1 - bw ) > $OUT/probe/bw.log 2>&1
echo "== probe rc=$? at $(( $(date +%s) - T0 )) s"; tail -40 $OUT/probe/bw.log
P=/tmp/device-run-ptx/ptx
dr px 4 STEPS=ptx
dr bk 4 NVLS_PTX_DIR=$P STEPS=variants VARIANT_COLLS="reducescatter allreduce" VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANTS="sm: bulk:NVLS_BULK_MIN=1 sm2: bulk2:NVLS_BULK_MIN=1"
dr ll 4 BINS=.devbin/bench-exp-ll256.txz STEPS=variants VARIANT_COLLS="allreduce allgather" VARIANT_MAXBYTES=64K VARIANT_ARGS="-n 200" VARIANTS="t512:NVLS_LL_THREADS=512 t256:NVLS_LL_THREADS=256 t128:NVLS_LL_THREADS=128 ll4k:NVLS_LL_MAX=4K"
dr sp 4 STEPS="launch mpisweep" LAUNCH_MODES=workers LAUNCH_GRAPH="-graph -n 200" COLLS=allreduce MPI_MAXBYTES=1M MPI_ARGS="-n 200" MPISWEEP_LIMIT=120
dr kb 4 NVLS_PTX_DIR=$P STEPS=kernels KERNELS_RUN='GPUAllReduceUnicast/4-ranks///passes-flags-0x100' KERNELS_LIMIT=60
dr cb 4 NVLS_PTX_DIR=$P NVLS_BULK_MIN=1 STEPS=collectives COLLECTIVES_RUN='GPUAllReduceMatrix|GPUCollsMatrix' COLLECTIVES_LIMIT=200
cd $OUT && tar czf r.tgz probe px bk ll sp kb cb *.log 2>/dev/null && rm -f *.log; ls -la $OUT
