#!/bin/bash
# Run 124 (1 GPU): the driver calls' host cost, cuLaunchKernelEx with and without PDL beside cuLaunchKernel.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt; lscpu | grep -E "Model name|MHz" >> $OUT/machine.txt
mkdir -p /tmp/b && tar xJf .devbin/bins.txz -C /tmp/b
cd /tmp/b && timeout 200 ./cuda.test -test.run XXX -test.bench 'GPULaunchKernel|GPUGraphLaunch|GPUEventRecord' -test.benchtime 20000x -test.count 3 -test.benchmem 2>&1 | tee $OUT/bench.txt
