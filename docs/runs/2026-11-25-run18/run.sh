export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
set -u
B=/tmp/b; mkdir -p $B $OUT/r; tar xzf .devbin/bins.tgz -C $B; R=$OUT/r
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } > $R/machine.txt 2>&1
s=$(date +%s); OUT=/tmp/p scripts/ptx-device.sh > $R/ptx.log 2>&1; echo "ptx rc=$? $(( $(date +%s)-s ))s"
tar czf $OUT/ptx.tgz -C /tmp/p ptx
export NVLS_PTX_DIR=/tmp/p/ptx
grep -E "entries|accepted|LDGMC|multimem|spill|FAIL|error" $R/ptx.log | head -20
st() { n=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim "$@" > $R/$n.log 2>&1; rc=$?; echo "$n: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/$n.log) FAIL=$(grep -c -- '--- FAIL' $R/$n.log) SKIP=$(grep -c -- '--- SKIP' $R/$n.log)"; grep -- '--- FAIL' $R/$n.log | head -8; }
st kernels-v2 100 env NVLS_GPU_VRANKS=2 $B/kernels.test -test.run 'GPUBroadcast|GPUAllReduceUnicast' -test.v
st bcast-v2 120 env NVLS_GPU_VRANKS=2 $B/collectives.test -test.run 'GPUBroadcast|GPUGraphReplay|GPUReadme' -test.v
st bcast-v3 120 env NVLS_GPU_VRANKS=3 $B/collectives.test -test.run 'GPUBroadcast' -test.v
st bcast-v4 120 env NVLS_GPU_VRANKS=4 $B/collectives.test -test.run 'GPUBroadcast|GPUDrain' -test.v
st soak-v4 60 env NVLS_GPU_VRANKS=4 NVLS_SOAK_DURATION=30s $B/collectives.test -test.run GPUSoak -test.v
grep -h "broadcasts took\|drained in\|#wrong\|operations" $R/*.log | head -12
for n in 2 4; do for c in broadcast allgather; do timeout 90 $B/nvls-bench -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 > $R/bench-$c-$n.txt 2>&1; echo "$c ranks=$n rc=$?"; grep -iE "roofline|^ +268435456" $R/bench-$c-$n.txt | head -4; done; done
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r
