export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
B=/tmp/b; mkdir -p $B; tar xzf .devbin/bins.tgz -C $B
timeout 60 $B/collectives.test -test.run '^$' -test.bench 'GPUSyncFloor/floor' -test.benchtime 1s 2>&1 | grep -E "^Benchmark|FAIL|panic|ok|PASS" | sed 's/BenchmarkGPUSyncFloor\///'
NVLS_GPU_VRANKS=2 timeout 40 $B/collectives.test -test.run 'GPUReadme|GPUBroadcast' -test.v 2>&1 | grep -c -- "--- PASS"
