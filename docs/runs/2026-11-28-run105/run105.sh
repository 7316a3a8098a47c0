#!/bin/bash
# Run 105 (4 GPUs): the all-gather's LL launch, main's nvls-bench-mpi against branch exp/agspread's, alternately, 1 KiB - 1 MiB, -n 200; the all-reduce at 3 ranks, copy-engine limit default against 64M.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
mkdir -p /tmp/b $OUT/ag $OUT/ar3
tar xJf .devbin/bins.txz -C /tmp/b ./nvls-bench-mpi && mv /tmp/b/nvls-bench-mpi /tmp/b/new
xz -dc .devbin/old.txz > /tmp/b/main && chmod +x /tmp/b/main
M=(mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x NVLS_ENABLE -x NVLS_TRANSPORT)
for pass in 1 2; do for v in main new; do
  timeout 100 "${M[@]}" -np 4 /tmp/b/$v -transport unicast -coll allgather -b 1K -e 1M -f 2 -n 200 -graph -compare nccl -json $OUT/ag/$v-$pass.json > $OUT/ag/$v-$pass.txt 2>&1
  echo "ag $v pass $pass rc=$?"
  grep -E '^ +(4096|16384|65536|262144) ' $OUT/ag/$v-$pass.txt | cut -c1-170
done; done
for v in base ce64; do
  e=(); [ $v = ce64 ] && e=(-x NVLS_CE_MIN=64M)
  CUDA_VISIBLE_DEVICES=0,1,2 timeout 120 "${M[@]}" -x CUDA_VISIBLE_DEVICES "${e[@]}" -np 3 /tmp/b/new -transport unicast -coll allreduce -b 96M -e 384M -f 2 -n 20 -graph -compare nccl -json $OUT/ar3/$v.json > $OUT/ar3/$v.txt 2>&1
  echo "ar3 $v rc=$?"
  grep -E '^ +(100663296|201326592|402653184) ' $OUT/ar3/$v.txt | cut -c1-170
done
cd $OUT && tar czf r.tgz ag ar3 && rm -rf ag ar3
