#!/bin/bash
# Run 130 (4 GPUs): main 2eecab1, run 113's PTX. smpattern at 4 GPUs; the ring over grids (reduce 16-256 MiB); the all-reduce f32/bf16 1-64 MiB with main's PTX against exp/bf16loop's; the kernels and collectives GPU tests with 4 GPUs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=575
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt; nvidia-smi topo -m >> $OUT/machine.txt
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x $d/nvcc ] && { PATH=$d:$PATH; break; }; done
nvcc -O2 -arch=sm_90 -o /tmp/smpattern scripts/smpattern.cu 2>&1 | tail -5
timeout 60 /tmp/smpattern 256 5 > $OUT/smpattern.txt 2>&1; echo "== smpattern rc=$? at $(( $(date +%s) - batch_t0 )) s"; cat $OUT/smpattern.txt
B=BINS=.devbin/bins.txz
dr rv 4 $B STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=16M VARIANT_MAXBYTES=256M VARIANT_FACTOR=4 VARIANT_ARGS="-n 10" \
  VARIANTS="def: r31:NVLS_RING_MIN=1,NVLS_RING_BYTES=8M r63:NVLS_RING_MIN=1,NVLS_RING_BYTES=16M r127:NVLS_RING_MIN=1"
for v in def r31 r63 r127; do echo "== $v $(grep -E '^ +[0-9]+ ' $OUT/rv/variant-$v-reduce.log 2>/dev/null | awk '{printf "%dM %s/%s (n %s/%s s %s/%s); ", $1/1048576, $6, $10, $14, $18, $22, $26}')"; done
P=/tmp/ptxnew; mkdir -p $P && tar xJf .devbin/ptx-bf16loop.tar.xz -C $P && ls $P/ptx | wc -l
dr vb 4 $B STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=1M VARIANT_MAXBYTES=64M VARIANT_FACTOR=4 VARIANT_ARGS="-n 50 -d bf16" VARIANTS="old:NVLS_PTX_DIR=$PWD/ptx new:NVLS_PTX_DIR=$P/ptx"
dr vf 4 $B STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=1M VARIANT_MAXBYTES=64M VARIANT_FACTOR=4 VARIANT_ARGS="-n 50" VARIANTS="old:NVLS_PTX_DIR=$PWD/ptx new:NVLS_PTX_DIR=$P/ptx"
for r in vb vf; do for v in old new; do echo "== $r $v $(grep -E '^ +[0-9]+ ' $OUT/$r/variant-$v-allreduce.log 2>/dev/null | awk '{printf "%dM %s/%s (n %s/%s s %s/%s); ", $1/1048576, $6, $10, $14, $18, $22, $26}')"; done; done
dr k 4 $B STEPS=kernels KERNELS_LIMIT=110 SOAK_FOR=10s
dr c1 4 $B STEPS=collectives COLLECTIVES_RUN='TestGPUBroadcast|TestGPUCollsMatrix|TestGPUReadme|TestGPULaunchFromCaller' COLLECTIVES_LIMIT=160
if [ "$(batch_left)" -ge 200 ]; then
  dr c2 4 $B STEPS=collectives COLLECTIVES_SKIP='GPUSoak|TestGPUBroadcast|TestGPUCollsMatrix|TestGPUReadme|TestGPULaunchFromCaller' COLLECTIVES_LIMIT=$(( $(batch_left) - 15 ))
else echo "c2: skipped, $(batch_left) s left"; fi
grep -h -- "--- FAIL" $OUT/k/*.log $OUT/c1/*.log $OUT/c2/*.log 2>/dev/null | head
batch_pack $(for d in rv vb vf k c1 c2; do [ -d $OUT/$d ] && echo $d; done)
