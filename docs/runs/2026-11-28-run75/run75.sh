#!/bin/bash
# Run 75 (1 GPU, shared ranks): main after exp/cepipe (run 73's PTX embedded) at 256 MiB against the copy roofline, 2 and 4 ranks; LL sizes 64 KiB - 1 MiB against main before run 71's LL blocks (2ca0bb4^).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
mkdir -p /tmp/m $OUT/big $OUT/ll
xz -dc .devbin/nb.xz > /tmp/m/nb && xz -dc .devbin/prell.xz > /tmp/m/prell && chmod +x /tmp/m/nb /tmp/m/prell
T0=$(date +%s)
for n in 2 4; do for c in allreduce broadcast reduce reducescatter allgather; do
  timeout 60 /tmp/m/nb -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 -compare none -json $OUT/big/$n-$c.json > $OUT/big/$n-$c.txt 2>&1
  echo "big $n $c rc=$? $(grep -E '^ +268435456 ' $OUT/big/$n-$c.txt | cut -c1-200)"
done; done
echo "== big at $(( $(date +%s) - T0 )) s"
for n in 2 4; do for c in allreduce reduce reducescatter allgather; do for b in nb prell; do
  timeout 40 /tmp/m/$b -transport unicast -g 1 -ranks $n -coll $c -b 64K -e 1M -f 2 -n 200 -graph -compare none -json $OUT/ll/$b-$n-$c.json > $OUT/ll/$b-$n-$c.txt 2>&1
  echo "ll $b $n $c rc=$? $(grep -E '^ +[0-9]+ ' $OUT/ll/$b-$n-$c.txt | awk '{printf "%s:%s/%s ", $1, $6, $10}')"
done; done; done
echo "== ll at $(( $(date +%s) - T0 )) s"
grep -m3 -i "roofline\|copy" $OUT/big/2-allreduce.txt
cd $OUT && tar czf r.tgz big ll && rm -rf big ll
