export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
B=/tmp/b; mkdir -p $B; tar xzf .devbin/bins.tgz -C $B
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
nvcc -O2 -arch=sm_90 -o $B/floor scripts/floor.cu -lcuda 2>&1 | tail -15
$B/floor -n 20000 2>&1 | tee $OUT/floor.txt
timeout 100 $B/collectives.test -test.run '^$' -test.bench 'GPUSyncFloor/(floor|ranks=1/via=caller)' -test.benchtime 1s 2>&1 | grep -E '^Benchmark|FAIL|panic' | sed 's/BenchmarkGPUSyncFloor.//' | tee $OUT/gofloor.txt
$B/floor -n 20000 2>&1 | tee $OUT/floor2.txt
