#!/bin/bash
# Run 101 (1 GPU, shared ranks): branch exp/push2. ptx (spilling functions named); the collectives GPU matrix with 4 and 3 ranks on GPU 0 (the push reduce's first run on a GPU); the 256 MiB reduce at 2 and 4 shared ranks, main's PTX (embedded) against the new one, against the copy roofline.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
dr m4 1 VRANKS=4 BINS=.devbin/bins.txz STEPS="ptx collectives" COLLECTIVES_RUN='GPUCollsMatrix' COLLECTIVES_LIMIT=200
grep -B1 -A12 "reduce_uc" $OUT/m4/ptx.log | head -30
dr m3 1 VRANKS=3 BINS=.devbin/bins.txz NVLS_PTX_DIR=/tmp/device-run-ptx/ptx STEPS=collectives COLLECTIVES_RUN='GPUCollsMatrix' COLLECTIVES_LIMIT=150
mkdir -p /tmp/m $OUT/big
tar xJf .devbin/bins.txz -C /tmp/m ./nvls-bench
for n in 4 2; do for v in main new newpush; do
  case $v in main) e=();; new) e=(NVLS_PTX_DIR=/tmp/device-run-ptx/ptx);; newpush) e=(NVLS_PTX_DIR=/tmp/device-run-ptx/ptx NVLS_REDUCE_PUSH_MIN=1);; esac
  [ $n = 2 ] && [ $v = newpush ] && continue
  env "${e[@]}" timeout 60 /tmp/m/nvls-bench -transport unicast -g 1 -ranks $n -coll reduce -b 256M -e 256M -n 20 -compare none -json $OUT/big/$n-$v.json > $OUT/big/$n-$v.txt 2>&1
  echo "big $n $v rc=$? $(grep -E '^ +268435456 ' $OUT/big/$n-$v.txt | cut -c1-200)"
done; done
grep -m3 -i "roofline" $OUT/big/4-main.txt
cd $OUT && tar czf big.tgz big && rm -rf big
batch_pack m4 m3
