#!/bin/bash
# Run 132 (1 GPU, shared ranks): main (run 113's PTX) against run 92's PTX (run 99's), 256 MiB f32 against the copy roofline, 2 and 4 ranks on GPU 0, each PTX in turn through NVLS_PTX_DIR, two passes.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
mkdir -p /tmp/m /tmp/p92 /tmp/p113 $OUT/big
tar xJf .devbin/bins.txz -C /tmp/m ./nvls-bench || tar xJf .devbin/bins.txz -C /tmp/m nvls-bench
tar xJf .devbin/ptx-run92.tar.xz -C /tmp/p92; tar xJf .devbin/ptx-main.tar.xz -C /tmp/p113
T0=$(date +%s)
for pass in 1 2; do for p in p92 p113; do for n in 2 4; do for c in allreduce broadcast reduce reducescatter allgather; do
  NVLS_PTX_DIR=/tmp/$p/ptx timeout 60 /tmp/m/nvls-bench -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 -compare none -json $OUT/big/$pass-$p-$n-$c.json > $OUT/big/$pass-$p-$n-$c.txt 2>&1
  echo "$pass $p $n $c rc=$? $(grep -E '^ +268435456 ' $OUT/big/$pass-$p-$n-$c.txt | cut -c1-200)"
done; done; done; done
echo "== at $(( $(date +%s) - T0 )) s"
grep -m3 -i "roofline" $OUT/big/1-p113-2-allreduce.txt
cd $OUT && tar czf r.tgz big && rm -rf big
