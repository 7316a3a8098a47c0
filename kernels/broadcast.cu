// broadcast.cu: nvls_broadcast, count elements of elem_bytes bytes from the
// root's send to every rank's recv (in place allowed: send == recv on the
// root). The kernel is type-free: it copies count * elem_bytes bytes.
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads, the
// same grid on every rank; count >= 1; send and recv 16-byte aligned.
// Every rank launches it: non-roots only take part in the two barriers (the
// first says their recv is free to overwrite, the second that the data has
// landed).

#include "nvls.h"

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_broadcast(const struct nvls_params p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  if (!barrier(p, 0, deadline)) return;
  if (p.rank == p.root) {
    const u64 own = p.uc[p.rank];
    const u64 bytes = p.count * p.elem_bytes;
    const u64 nvec = bytes / NVLS_VEC_BYTES;
    const u64 tail = bytes - nvec * NVLS_VEC_BYTES;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += stride) {
      const u64 off = v * NVLS_VEC_BYTES;
      store_all(p, p.recv + off, ld_own_v4(own + p.send + off));
    }
    if (blockIdx.x == 0 && threadIdx.x < tail) {
      const u64 off = nvec * NVLS_VEC_BYTES + threadIdx.x;
      const u32 b = ld_peer_u8(own + p.send + off);
#pragma unroll
      for (int r = 0; r < NVLS_MAX_RANKS; r++)
        if (r < (int)p.nranks) st_u8(p.uc[r] + p.recv + off, b);
    }
  }
  barrier(p, 1, deadline);
}
