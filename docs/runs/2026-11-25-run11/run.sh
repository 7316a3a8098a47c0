export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
set -u
B=/tmp/b; mkdir -p $B $OUT/r; tar xzf .devbin/bins.tgz -C $B; R=$OUT/r
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; date -u; } > $R/machine.txt 2>&1
s=$(date +%s); OUT=/tmp/p scripts/ptx-device.sh > $R/ptx.log 2>&1; echo "ptx rc=$? $(( $(date +%s)-s ))s"
tar czf $OUT/ptx.tgz -C /tmp/p ptx
export NVLS_PTX_DIR=/tmp/p/ptx
grep -E "entries|accepted|LDGMC|multimem|spill|FAIL|error" $R/ptx.log | head -20
st() { n=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim "$@" > $R/$n.log 2>&1; rc=$?; echo "$n: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/$n.log) FAIL=$(grep -c -- '--- FAIL' $R/$n.log) SKIP=$(grep -c -- '--- SKIP' $R/$n.log)"; grep -- '--- FAIL' $R/$n.log | head -8; }
st cuda 60 $B/cuda.test -test.run GPU -test.v
st kernels-v2 120 env NVLS_GPU_VRANKS=2 $B/kernels.test -test.run GPU -test.v -soak 2000 -soak-for 20s
grep -h "returned after\|drain" $R/kernels-v2.log | head -5
st colls-matrix-v2 200 env NVLS_GPU_VRANKS=2 $B/collectives.test -test.run GPUCollsMatrix -test.v -test.timeout 190s
st colls-matrix-v4 150 env NVLS_GPU_VRANKS=4 $B/collectives.test -test.run GPUCollsMatrix -test.v -test.timeout 140s
st colls-rest-v2 170 env NVLS_GPU_VRANKS=2 $B/collectives.test -test.run GPU -test.skip 'GPUSoak|GPUCollsMatrix' -test.v -test.timeout 160s
st drain-v4 40 env NVLS_GPU_VRANKS=4 $B/collectives.test -test.run GPUDrain -test.v
grep -h "drained in\|Close took" $R/colls-rest-v2.log $R/drain-v4.log | head -8
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r
