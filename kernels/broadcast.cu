// broadcast.cu: nvls_broadcast, count elements of elem_bytes bytes from the
// root's send to every rank's recv (in place allowed: send == recv on the
// root). The kernel is type-free: it copies count * elem_bytes bytes.
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads, the
// same grid on every rank; count >= 1; send and recv 16-byte aligned.
// Every rank launches it, between two barriers (the first says every recv
// is free to overwrite and the root's send is ready, the second that the
// data has landed). Multicast: the root copies it all, one multimem.st pass
// (copy_span, nvls.h). Unicast: the root stores it to every rank, or, with
// NVLS_FLAG_SLICED (send then the root's offset on every rank), every rank
// r loads slice r of the root's send through the root's UC alias and stores
// it to every rank: the root's links carry the data once, not once per
// peer, and every rank's blocks copy. Slices are whole 16-byte vectors, the
// last one taking the rest. In place is safe: slice r of the root's buffer
// is read and written by rank r alone.

#include "nvls.h"

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_broadcast(const struct nvls_params p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 bytes = p.count * p.elem_bytes;
  if (!barrier(p, 0, deadline)) return;
#if NVLS_MULTICAST
  if (p.rank == p.root) copy_span(p, p.uc[p.rank] + p.send, p.recv, bytes);
#else
  if (p.flags & NVLS_FLAG_SLICED) {
    const u64 slice = bytes / NVLS_VEC_BYTES / p.nranks * NVLS_VEC_BYTES;
    const u64 lo = (u64)p.rank * slice;
    const u64 n = p.rank == p.nranks - 1 ? bytes - lo : slice;
    copy_span(p, p.uc[p.root] + p.send + lo, p.recv + lo, n);
  } else if (p.rank == p.root) {
    copy_span(p, p.uc[p.rank] + p.send, p.recv, bytes);
  }
#endif
  barrier(p, 1, deadline);
}
