export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
set -u
B=$PWD/.devbin/bins; mkdir -p $B $OUT/r; tar xzf .devbin/bins.tgz -C $B
R=$OUT/r
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; } > $R/machine.txt 2>&1
s=$(date +%s); OUT=/tmp/p scripts/ptx-device.sh > $R/ptx.log 2>&1; echo "ptx rc=$? $(( $(date +%s)-s ))s"
tar czf $OUT/ptx.tgz -C /tmp/p ptx
export NVLS_PTX_DIR=/tmp/p/ptx
st() { n=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim "$@" > $R/$n.log 2>&1; rc=$?; echo "$n: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/$n.log) FAIL=$(grep -c -- '--- FAIL' $R/$n.log)"; grep -- '--- FAIL' $R/$n.log | head -5; }
st cuda 60 $B/cuda.test -test.run GPU -test.v
st kernels-v2 200 env NVLS_GPU_VRANKS=2 $B/kernels.test -test.run GPU -test.v -soak 3000 -soak-for 40s
st kernels-v4x 90 env NVLS_GPU_VRANKS=4 $B/kernels.test -test.run 'GPUBarrierWrapLateRank|GPURankOrderMatchesSim|GPUSpecialValues' -test.v
st kernels-v8x 90 env NVLS_GPU_VRANKS=8 $B/kernels.test -test.run 'GPURankOrderMatchesSim|GPUSpecialValues' -test.v
st collectives-v2 150 env NVLS_GPU_VRANKS=2 $B/collectives.test -test.run GPU -test.skip GPUSoak -test.v
st team-v4 60 env NVLS_GPU_VRANKS=4 $B/team.test -test.run GPU -test.v
grep -h -E "ranks:.*(differing|order-sensitive)|registers|spill|LDGMC|accepted" $R/*.log | head -30
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
