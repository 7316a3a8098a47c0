#!/bin/bash
# Run 127 (1 GPU): the launch benchmarks after they share their setup (benchLaunches); the cuda GPU tests in the same binary.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast; mkdir -p /tmp/b && tar xJf .devbin/bins.txz -C /tmp/b && cd /tmp/b && timeout 120 ./cuda.test -test.run GPU -test.bench 'GPULaunchKernel' -test.benchtime 20000x -test.count 2 -test.benchmem 2>&1 | tail -12 | tee $OUT/bench.txt
