export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
set -u
B=/tmp/b; mkdir -p $B $OUT/r; tar xzf .devbin/bins.tgz -C $B; R=$OUT/r
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; date -u; } > $R/machine.txt 2>&1
st() { n=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim "$@" > $R/$n.log 2>&1; rc=$?; echo "$n: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/$n.log) FAIL=$(grep -c -- '--- FAIL' $R/$n.log) SKIP=$(grep -c -- '--- SKIP' $R/$n.log)"; grep -- '--- FAIL' $R/$n.log | head -8; }
s0=$(date +%s)
timeout 100 $B/collectives.test -test.run '^$' -test.bench GPUSyncFloor -test.benchtime 1s > $R/syncfloor.log 2>&1; echo "syncfloor rc=$? $(( $(date +%s)-s0 ))s"
grep -E "^Benchmark" $R/syncfloor.log | sed 's/BenchmarkGPUSyncFloor\///' | awk '{print $1, $3, $4, $5, $6, $7, $8, $9}'
for c in reduce allreduce; do for n in 2 4; do timeout 40 $B/nvls-bench -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 -w 5 -json $R/roof-$c-$n.json > $R/roof-$c-$n.txt 2>&1; echo "roof $c $n rc=$? $(grep -E '^ +268435456' $R/roof-$c-$n.txt)"; done; done
grep -h "roofline" $R/roof-reduce-2.txt | head -2
for c in allreduce barrier; do for n in 1 2 4; do timeout 30 $B/nvls-bench -transport unicast -g 1 -ranks $n -coll $c -z 1 -b 8 -e 8 -n 2000 -w 200 > $R/lat-$c-$n.txt 2>&1 || echo "lat $c $n rc=$?"; echo "lat $c $n: $(grep -E '^ +(8|0) ' $R/lat-$c-$n.txt | head -1)"; done; done
st simdiff 60 $B/simdiff.test -test.run GPUDiff -test.v -diff.seed 1 -diff.seqs 300
grep -E '^simdiff:|differences|gpu_test.go' $R/simdiff.log | head -20
st readme 40 $B/collectives.test -test.run GPUReadme -test.v
st reduce-matrix-v4 90 env NVLS_GPU_VRANKS=4 $B/collectives.test -test.run 'GPUCollsMatrix/reduce_' -test.v -test.timeout 85s
st colls-rest-v2 150 env NVLS_GPU_VRANKS=2 $B/collectives.test -test.run GPU -test.skip 'GPUSoak|GPUCollsMatrix|GPUSyncFloor' -test.v -test.timeout 145s
grep -h "drained in\|Close took" $R/colls-rest-v2.log | head -4
st soak-v4 60 env NVLS_GPU_VRANKS=4 NVLS_SOAK_DURATION=40s $B/collectives.test -test.run GPUSoak -test.v -test.timeout 58s
grep -E 'soak|#wrong' $R/soak-v4.log | tail -3
echo "total $(( $(date +%s)-s0 ))s"
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r
