export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
B=/tmp/b; mkdir -p $B; tar xzf .devbin/bins.tgz -C $B
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -arch=sm_90 -o $B/floor scripts/floor.cu -lcuda 2>&1 | tail -5
$B/floor -n 20000 2>&1 | tee $OUT/floor.txt
for i in 1 2; do timeout 60 $B/nvls-bench -transport unicast -g 1 -ranks 1 -z 1 -b 8 -e 8 -n 20000 2>&1 | grep -E "^ +8 "; done | tee $OUT/bench.txt
timeout 60 $B/nvls-bench -transport unicast -g 1 -ranks 1 -z 1 -b 8 -e 8 -n 20000 -coll broadcast 2>&1 | grep -E "^ +8 " | tee -a $OUT/bench.txt
timeout 60 $B/nvls-bench -transport unicast -g 1 -ranks 2 -z 1 -b 8 -e 8 -n 20000 2>&1 | grep -E "^ +8 " | tee -a $OUT/bench.txt
timeout 200 $B/collectives.test -test.run '^$' -test.bench 'GPUSyncFloor' -test.benchtime 1s 2>&1 | grep -E "^Benchmark|FAIL|panic" | sed 's/BenchmarkGPUSyncFloor.//' | tee $OUT/gofloor.txt
timeout 100 $B/collectives.test -test.run 'GPUOneRank|GPUReadme' -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)|panic" | sort | uniq -c | tee $OUT/tests.txt
NVLS_GPU_VRANKS=2 timeout 100 $B/collectives.test -test.run 'GPUReadme|GPUBroadcast|GPUDrain' -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)|panic|drained" | sed 's/ (.*//' | sort | uniq -c | sort -rn | head | tee -a $OUT/tests.txt
