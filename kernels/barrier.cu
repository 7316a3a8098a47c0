// barrier.cu: nvls_barrier, a device-side barrier of the team on barrier
// slot [0][0]. Launch: grid 1, a block of at least nranks threads (the start
// barrier polls one rank's slot a thread), at most NVLS_BLOCK_THREADS.

#include "nvls.h"

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_barrier(const struct nvls_params p) {
  kernel_entry(p);
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  barrier(p, 0, deadline);
}
