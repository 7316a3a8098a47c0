#!/bin/bash
# Run 58: exp/shared2 on one H100: PTX, tests at 2 shared ranks, main's bench against the branch's.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
O=$OUT/r58; mkdir -p $O /tmp/m /tmp/nb
RUN=r58t VRANKS=2 STEPS="ptx kernels collectives" KERNELS_RUN='GPUAllReduceUnicast|GPUBroadcast' KERNELS_LIMIT=150 COLLECTIVES_LIMIT=200 DEADLINE=330 scripts/device-run.sh 1 > $O/tests.log 2>&1
echo "tests rc=$?"; grep -E 'PASS|FAIL|rc ' $OUT/r58t/summary.txt 2>/dev/null | head -20
tar xJf .devbin/mainbench.txz -C /tmp/m
tar xJf .devbin/bins.txz -C /tmp/nb ./nvls-bench
P=/tmp/device-run-ptx/ptx; ls $P | head -3
one() { # name bin N C [env...]
  local name=$1 bin=$2 n=$3 c=$4; shift 4
  env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 "$@" \
    timeout 60 $bin -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 -compare none \
    -json $O/$name-$n-$c.json > $O/$name-$n-$c.txt 2>&1
  echo "$name $n $c rc=$? $(grep -E "^ +268435456" $O/$name-$n-$c.txt)"
}
for n in 2 4; do for c in allreduce broadcast reduce reducescatter allgather; do
  one main /tmp/m/nvls-bench-main $n $c
  one new /tmp/nb/nvls-bench $n $c NVLS_PTX_DIR=$P
done; done
one new2 /tmp/nb/nvls-bench 2 allreduce NVLS_PTX_DIR=$P
one new2 /tmp/nb/nvls-bench 2 broadcast NVLS_PTX_DIR=$P
