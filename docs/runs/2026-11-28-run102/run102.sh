#!/bin/bash
# Run 102 (1 GPU, shared ranks): branch exp/push2, the push reduce's loads together. ptx; the GPU matrix's push reduce cases with 4 and 3 ranks on GPU 0; the 256 MiB reduce at 4 shared ranks: two-shot, push (2 MiB stages), push (8 MiB stages).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=400
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr m4 1 VRANKS=4 BINS=.devbin/bins.txz STEPS="ptx collectives" COLLECTIVES_RUN='GPUCollsMatrix/reduce_.*_push_' COLLECTIVES_LIMIT=100
grep -A10 "reduce_uc" $OUT/m4/ptx.log | head -12
dr m3 1 VRANKS=3 BINS=.devbin/bins.txz NVLS_PTX_DIR=/tmp/device-run-ptx/ptx STEPS=collectives COLLECTIVES_RUN='GPUCollsMatrix/reduce_.*_push_' COLLECTIVES_LIMIT=80
mkdir -p /tmp/m $OUT/big
tar xJf .devbin/bins.txz -C /tmp/m ./nvls-bench
export NVLS_PTX_DIR=/tmp/device-run-ptx/ptx
for v in twoshot push2m push8m; do
  case $v in twoshot) e=();; push2m) e=(NVLS_REDUCE_PUSH_MIN=1);; push8m) e=(NVLS_REDUCE_PUSH_MIN=1 NVLS_STAGE_BYTES=8M);; esac
  env "${e[@]}" timeout 60 /tmp/m/nvls-bench -transport unicast -g 1 -ranks 4 -coll reduce -b 256M -e 256M -n 20 -compare none -json $OUT/big/4-$v.json > $OUT/big/4-$v.txt 2>&1
  echo "big 4 $v rc=$? $(grep -E '^ +268435456 ' $OUT/big/4-$v.txt | cut -c1-200)"
done
tail -3 $OUT/big/4-push8m.txt
cd $OUT && tar czf big.tgz big && rm -rf big
batch_pack m4 m3
