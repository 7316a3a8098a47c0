#!/bin/bash
# Run 112 (2 GPUs): branch exp/ringvecs. llprobe's piece mode; run 111's PTX (committed, embedded); PTX with 8 vectors a thread (2 chunks) and two rounds deep; the reduce f32 16/64/256 MiB at 2 ranks, the ring on from every size, over grids (NVLS_RING_BYTES), NCCL beside. The GPU matrices wait for the kernel chosen.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=400
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [[ -x $d/nvcc ]] && { PATH=$d:$PATH; break; }; done; export PATH
for v in v8:-DNVLS_RING_VECS=8\ -DNVLS_RING_CHUNKS=2 d2:-DNVLS_PUSH_DEPTH=2; do
  (NVCC_FLAGS="${v#*:}" scripts/ptx.sh /tmp/ptx-${v%%:*} > $OUT/ptx-${v%%:*}.log 2>&1; echo "ptx ${v%%:*} rc=$?" >> $OUT/ptx-bg.txt) &
done
nvcc -O2 -arch=sm_90 -Ikernels -Iscripts -o /tmp/llprobe scripts/llprobe.cu -lcuda 2>&1 | tail -5
timeout 120 /tmp/llprobe 1 - piece > $OUT/piece.txt 2>&1; echo "piece rc=$? at $(( $(date +%s) - batch_t0 )) s"
grep "rank 0" $OUT/piece.txt
wait
cat $OUT/ptx-bg.txt; for v in v8 d2; do grep -A2 "  reduce_uc" $OUT/ptx-$v.log | head -3; done
P=$(pwd)/ptx
V=""
for g in b:$P:4M:7 b:$P:8M:15 b:$P:16M:31 b:$P:64M:127 v:/tmp/ptx-v8:8M:15 v:/tmp/ptx-v8:16M:31 v:/tmp/ptx-v8:64M:127 v:/tmp/ptx-v8:4M:7 d:/tmp/ptx-d2:64M:127; do
  IFS=: read -r k dir fifo blocks <<<"$g"; V="$V $k$blocks:NVLS_PTX_DIR=$dir,NVLS_RING_MIN=1,NVLS_RING_BYTES=$fifo"
done
dr pr 2 BINS=.devbin/bins.txz STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=16M VARIANT_MAXBYTES=256M VARIANT_FACTOR=4 VARIANT_ARGS="-n 20" VARIANTS="$V"
for v in $V; do v=${v%%:*}; echo "== $v $(grep -E '^ +[0-9]+ ' $OUT/pr/variant-$v-reduce.log 2>/dev/null | awk '$1>=16777216 {printf "%s %s/%s (nccl %s/%s); ", $1, $6, $10, $14, $18}')"; done
cp $OUT/ptx-*.log $OUT/pr/ 2>/dev/null
batch_pack pr
