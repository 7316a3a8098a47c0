#!/bin/bash
# Run 123 (2 GPUs): the all-reduce without graphs, f32 8 B - 64 KiB, one process per GPU: -n 100 averages, per-call medians, -n 1000, processes pinned, GOGC=off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt; nproc >> $OUT/machine.txt
mkdir -p /tmp/b && tar xJf .devbin/bins.txz -C /tmp/b
X="-x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x NVLS_ENABLE -x NVLS_TRANSPORT"
A="-transport unicast -coll allreduce -d f32 -b 8 -e 64K -f 4 -compare nccl"
run() { name=$1; shift; timeout 60 "$@" > $OUT/$name.txt 2>&1; echo "== $name rc=$?"; grep -E '^ +[0-9]+ ' $OUT/$name.txt | awk '{printf "%s %s/%s (n %s/%s s %s/%s); ", $1, $6, $10, $14, $18, $22, $26}'; echo; }
for pass in 1 2; do
run avg$pass mpirun --allow-run-as-root --bind-to none -np 2 $X /tmp/b/nvls-bench-mpi $A -n 100
run med$pass mpirun --allow-run-as-root --bind-to none -np 2 $X /tmp/b/nvls-bench-mpi $A -n 100 -timing median
run n1000_$pass mpirun --allow-run-as-root --bind-to none -np 2 $X /tmp/b/nvls-bench-mpi $A -n 1000
run core$pass mpirun --allow-run-as-root --bind-to core -np 2 $X /tmp/b/nvls-bench-mpi $A -n 100
run gogc$pass env GOGC=off mpirun --allow-run-as-root --bind-to none -np 2 $X -x GOGC /tmp/b/nvls-bench-mpi $A -n 100
done
