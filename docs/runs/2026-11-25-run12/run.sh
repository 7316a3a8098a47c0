export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
set -u
B=/tmp/b; mkdir -p $B $OUT/r; [ -x $B/nvls-bench ] || tar xzf .devbin/bins.tgz -C $B; R=$OUT/r
[ -d /tmp/p/ptx ] || { OUT=/tmp/p scripts/ptx-device.sh > $R/ptx.log 2>&1; }
export NVLS_PTX_DIR=/tmp/p/ptx
date -u > $R/machine.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/machine.txt
timeout 150 $B/collectives.test -test.run '^$' -test.bench GPUSyncFloor -test.benchtime 1s > $R/syncfloor.log 2>&1; echo "syncfloor rc=$?"
grep -E "^Benchmark|floor" $R/syncfloor.log | head -40
for c in allreduce broadcast barrier; do for n in 1 2 4; do timeout 40 $B/nvls-bench -transport unicast -g 1 -ranks $n -coll $c -z 1 -b 8 -e 8 -n 2000 -w 200 > $R/lat-$c-$n.txt 2>&1 || echo "lat $c $n rc=$?"; done; done
grep -h -B1 "^ *8 " $R/lat-*.txt | grep -v "^--" | head -20; for f in $R/lat-*.txt; do echo "$(basename $f): $(grep -E '^ +(8|0) ' $f | head -1)"; done
for c in reducescatter allgather reduce allreduce broadcast; do for n in 2 4; do timeout 60 $B/nvls-bench -transport unicast -g 1 -ranks $n -coll $c -b 256M -e 256M -n 20 -w 5 -json $R/roof-$c-$n.json > $R/roof-$c-$n.txt 2>&1; echo "roof $c $n rc=$? $(grep -E '^ +268435456' $R/roof-$c-$n.txt)"; done; done
grep -h "Copy roofline" $R/roof-reducescatter-2.txt
st() { n=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim "$@" > $R/$n.log 2>&1; rc=$?; echo "$n: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/$n.log) FAIL=$(grep -c -- '--- FAIL' $R/$n.log)"; }
st simdiff 150 $B/simdiff.test -test.run GPUDiff -test.v -diff.seed 1 -diff.seqs 300
grep -E '^simdiff:|^differences by|^ +[0-9]+  ' $R/simdiff.log | head -30
st soak 200 env NVLS_GPU_VRANKS=2 NVLS_SOAK_DURATION=170s $B/collectives.test -test.run GPUSoak -test.v -test.timeout 195s
grep -E 'soak|#wrong' $R/soak.log | tail -4
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r
