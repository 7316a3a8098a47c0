// broadcast.cu: nvls_broadcast, count elements of elem_bytes bytes from the
// root's send to every rank's recv (in place allowed: send == recv on the
// root). The kernel is type-free: it copies count * elem_bytes bytes.
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads, the
// same grid on every rank; count >= 1; send and recv 16-byte aligned.
// Every rank launches it: non-roots only take part in the two barriers (the
// first says their recv is free to overwrite, the second that the data has
// landed). The root's copy is copy_span (nvls.h): one multimem.st pass, or
// a store to every rank.

#include "nvls.h"

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_broadcast(const struct nvls_params p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  if (!barrier(p, 0, deadline)) return;
  if (p.rank == p.root) copy_span(p, p.uc[p.rank] + p.send, p.recv, p.count * p.elem_bytes);
  barrier(p, 1, deadline);
}
