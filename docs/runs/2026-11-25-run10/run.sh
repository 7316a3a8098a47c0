export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
set -u
B=/tmp/b; mkdir -p $B $OUT/r; tar xzf .devbin/bins.tgz -C $B; R=$OUT/r
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; ls -la /usr/lib/x86_64-linux-gnu/libnccl* 2>/dev/null; } > $R/machine.txt 2>&1
st() { n=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim "$@" > $R/$n.log 2>&1; rc=$?; echo "$n: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/$n.log) FAIL=$(grep -c -- '--- FAIL' $R/$n.log) SKIP=$(grep -c -- '--- SKIP' $R/$n.log)"; grep -- '--- FAIL' $R/$n.log | head -5; }
st cuda 60 $B/cuda.test -test.run GPU -test.v
st vmm 120 $B/vmm.test -test.run GPU -test.v
st team-copies 60 $B/team.test -test.run GPUTypedCopies -test.v
for i in 1 2 3; do st graphreplay-$i 120 env NVLS_GPU_VRANKS=2 $B/collectives.test -test.run GPUGraphReplay -test.v; done
st simdiff 200 $B/simdiff.test -test.run GPUDiff -test.v -diff.seed 1 -diff.seqs 300
grep -E '^simdiff:|^difference|sequences|differences' $R/simdiff.log | head -30
st nccl-sym 60 $B/nccl.test -test.v -test.run '^TestGPUSymmetricWindows$'
st bench-gpu 200 $B/bench.test -test.v -test.run '^TestGPU(SharedRanks|CompareNCCLSymmetric)$'
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING timeout 120 $B/nvls-bench -transport unicast -g 1 -compare nccl -b 8 -e 256M -f 4 -json $R/ncclsym.json > $R/ncclsym.txt 2>&1; echo "ncclsym rc=$? symmetric-lines=$(grep -c '\[Symmetric\]' $R/ncclsym.txt)"
grep -v 'NCCL INFO' $R/ncclsym.txt | head -30
for v in 2 4; do timeout 120 $B/nvls-bench -transport unicast -g 1 -ranks $v -b 8 -e 256M -f 4 -json $R/shared-$v.json > $R/shared-$v.txt 2>&1; echo "shared-$v rc=$?"; done
grep -v '^#  *[0-9]' $R/shared-2.txt | head -12; tail -25 $R/shared-4.txt
timeout 60 $B/nvls-bench -transport unicast -g 1 -ranks 2 -G 5 -m 4 -a 1 -b 8 -e 1M -f 4 > $R/flags.txt 2>&1; echo "flags rc=$?"; tail -5 $R/flags.txt
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r
