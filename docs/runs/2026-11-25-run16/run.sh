export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
B=/tmp/b; mkdir -p $B; tar xzf .devbin/bins.tgz -C $B
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -arch=sm_90 -o $B/floor scripts/floor.cu -lcuda 2>&1 | tail -5
$B/floor -n 20000 2>&1 | tee $OUT/floor.txt
timeout 120 $B/collectives.test -test.run 'GPUOneRank|GPUReadme' -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)|panic" | sort | uniq -c | sort -rn | head -8 | tee $OUT/onerank.txt
timeout 120 $B/collectives.test -test.run 'GPUOneRank|GPUReadme' -test.v 2>&1 | grep -E "FAIL|panic|Error" | head -20
timeout 200 $B/collectives.test -test.run '^$' -test.bench 'GPUSyncFloor' -test.benchtime 1s 2>&1 | grep -E "^Benchmark|FAIL|panic" | sed 's/BenchmarkGPUSyncFloor.//' | tee $OUT/gofloor.txt
for r in 1 2; do timeout 60 $B/nvls-bench -transport unicast -g 1 -ranks $r -z 1 -b 8 -e 8 -n 2000 2>&1 | tail -4; done | tee $OUT/bench.txt
