#!/bin/bash
# Run 111 (1 GPU, ranks sharing it): branch exp/ringvecs. The PTX regenerated, and the ring's experiment PTX (8 vectors a thread in 2 chunks; the next chunk's loads before the stores; two rounds deep): ptxas's registers and spills; the collectives GPU matrix's ring cases on each with 2 and 4 ranks; the 256 MiB ring reduce with 2 ranks sharing the GPU at 7, 15 and 31 blocks on each (no link: the blocks' own pace against local memory).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=330
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [[ -x $d/nvcc ]] && { PATH=$d:$PATH; break; }; done; export PATH
for v in v8:-DNVLS_RING_VECS=8\ -DNVLS_RING_CHUNKS=2 p:-DNVLS_RING_PIPE=1 d2:-DNVLS_PUSH_DEPTH=2; do
  (NVCC_FLAGS="${v#*:}" scripts/ptx.sh /tmp/ptx-${v%%:*} > $OUT/ptx-${v%%:*}.log 2>&1; echo "ptx ${v%%:*} rc=$?" >> $OUT/ptx-bg.txt) &
done
dr m 1 VRANKS=2 BINS=.devbin/bins.txz STEPS="ptx collectives" COLLECTIVES_RUN='GPUCollsMatrix/reduce_.*_push_' COLLECTIVES_LIMIT=60
wait
cat $OUT/ptx-bg.txt; for v in v8 p d2; do echo "-- $v"; grep -A3 "  reduce_uc" $OUT/ptx-$v.log | head -4; done
grep -A3 "  reduce_uc" $OUT/m/ptx.log | head -4
P=/tmp/device-run-ptx/ptx
for v in v8 p d2; do for n in 2 4; do
  dr c$v$n 1 VRANKS=$n BINS=.devbin/bins.txz NVLS_PTX_DIR=/tmp/ptx-$v STEPS=collectives COLLECTIVES_RUN='GPUCollsMatrix/reduce_.*_push_' COLLECTIVES_LIMIT=45
done; done
mkdir -p /tmp/b $OUT/big && tar xJf .devbin/bins.txz -C /tmp/b ./nvls-bench
for v in base:$P v8:/tmp/ptx-v8 p:/tmp/ptx-p; do for f in 4M:7 8M:15 16M:31; do
  NVLS_PTX_DIR=${v#*:} NVLS_RING_MIN=1 NVLS_RING_BYTES=${f%%:*} timeout 40 /tmp/b/nvls-bench -transport unicast -g 1 -ranks 2 -coll reduce -b 256M -e 256M -n 20 -compare none -json $OUT/big/${v%%:*}-${f#*:}.json > $OUT/big/${v%%:*}-${f#*:}.txt 2>&1
  echo "big ${v%%:*} ${f#*:} blocks rc=$? $(grep -E '^ +268435456 ' $OUT/big/${v%%:*}-${f#*:}.txt | awk '{print $6, $10}')"
done; done
cp $OUT/ptx-*.log $OUT/big/
batch_pack m big $(cd $OUT && ls -d c* 2>/dev/null)
