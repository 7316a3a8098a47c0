#!/bin/bash
# Run 126 (2 GPUs): the all-reduce f32 without graphs, 8 B - 64 KiB, one process per GPU, -n 200: -timing median -segment 20 twice, -timing avg twice; goals.py over them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
mkdir -p /tmp/b && tar xJf .devbin/bins.txz -C /tmp/b
X="-x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x NVLS_ENABLE -x NVLS_TRANSPORT"
A="-transport unicast -coll allreduce -d f32 -b 8 -e 64K -f 4 -compare nccl -n 200"
mkdir -p $OUT/j
for pass in 1 2; do
  for mode in seg avg; do
    M=""; [ $mode = seg ] && M="-timing median -segment 20"
    timeout 90 mpirun --allow-run-as-root --bind-to none -np 2 $X /tmp/b/nvls-bench-mpi $A $M -json $OUT/j/$mode$pass.json > $OUT/j/$mode$pass.txt 2>&1
    echo "== $mode$pass rc=$?"; grep -E '^ +[0-9]+ ' $OUT/j/$mode$pass.txt | awk '{printf "%s %s/%s (n %s/%s s %s/%s); ", $1, $6, $10, $14, $18, $22, $26}'; echo
  done
done
python3 scripts/goals.py $OUT/j/*.json 2>&1 | grep -v "^not measured" | cut -c1-120 | tee $OUT/goals.txt
(cd $OUT && tar czf r.tgz j && rm -rf j)
