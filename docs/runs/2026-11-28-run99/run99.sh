#!/bin/bash
# Run 99 (1 GPU, shared ranks): main, run 92's PTX, 256 MiB against the copy roofline, 2 and 4 ranks (as run 75).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
mkdir -p /tmp/m $OUT/big
tar xJf .devbin/bins.txz -C /tmp/m ./nvls-bench || tar xJf .devbin/bins.txz -C /tmp/m nvls-bench
ls -la /tmp/m
T0=$(date +%s)
for n in 2 4; do for c in allreduce broadcast reduce reducescatter allgather; do
  timeout 60 /tmp/m/nvls-bench -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 -compare none -json $OUT/big/$n-$c.json > $OUT/big/$n-$c.txt 2>&1
  echo "big $n $c rc=$? $(grep -E '^ +268435456 ' $OUT/big/$n-$c.txt | cut -c1-200)"
done; done
echo "== big at $(( $(date +%s) - T0 )) s"
grep -m3 -i "roofline\|copy" $OUT/big/2-allreduce.txt
cd $OUT && tar czf r.tgz big && rm -rf big
