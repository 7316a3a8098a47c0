#!/bin/bash
# Run 57: one H100, shared ranks, the same command on ten builds (docs/perf.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0
O=$OUT/run57; mkdir -p $O /tmp/b
tar xJf .devbin/bis.txz -C /tmp/b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/machine.txt
one() { # name bin N C [env...]
  local name=$1 bin=$2 n=$3 c=$4; shift 4
  env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 "$@" \
    timeout 60 /tmp/b/nvls-bench-$bin -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 -compare none \
    -json $O/$name-$n-$c.json > $O/$name-$n-$c.txt 2>&1
  echo "$name $n $c rc=$? $(grep -E "^ +268435456" $O/$name-$n-$c.txt)"
}
for n in 2 4; do for c in allreduce broadcast; do
  for b in rec r19 r22 r23 r32 r36 mg fin main sh1; do one $b $b $n $c; done
  one mg0 main $n $c NVLS_MIN_GRID=0
  one pdl0 main $n $c NVLS_PDL=off
  one both main $n $c NVLS_MIN_GRID=0 NVLS_PDL=off
  one noce main $n $c NVLS_CE_MIN=64G
  one rec2 rec $n $c
done; done
