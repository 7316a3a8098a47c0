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
// NVLS_FLAG_SLICED and nranks > 1, the root's send is cut into nranks - 1
// slices of whole 16-byte vectors (the last one takes the rest): the rank
// j + 1 after the root (mod nranks) loads slice j through the root's UC
// alias and stores it to every rank, the root included, whose blocks copy
// nothing. The root's link then carries the data once each way, as a ring's.
// One pass on purpose: loads first, then stores (run 31) took 1.74 x as
// long at 2 GPUs, since the loads and the stores share the links' two
// directions, which one pass keeps busy at once.
// Only the root knows where its send is (under MPI no other process does):
// block b of the root stores it into slot b of every other rank's
// NVLS_ROOT_SEND_OFFSET words and fences (fence.acq_rel.sys: the start
// barrier's arrival is relaxed) before arriving at the start barrier, and
// block b of every other rank reads its own slot after the barrier's
// acquire. A slot is rewritten only by the next broadcast's root, which
// cannot pass its start barrier before every rank left this one's end
// barrier. In place is safe: slice j of the root's buffer is read and
// written by its slice's rank alone, each vector loaded before it is stored.

#include "nvls.h"

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_broadcast(const struct nvls_params p) {
  kernel_entry(p);
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 bytes = p.count * p.elem_bytes;
#if NVLS_MULTICAST
  if (!barrier(p, 0, deadline)) return;
  if (p.rank == p.root) copy_span(p, p.uc[p.rank] + p.send, p.recv, bytes);
#else
  const bool sliced = (p.flags & NVLS_FLAG_SLICED) != 0 && p.nranks > 1;
  const u64 slot = NVLS_ROOT_SEND_OFFSET + (u64)blockIdx.x * 8;
  if (sliced && p.rank == p.root && threadIdx.x == 0) {
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks && r != (int)p.root) st_b64(p.uc[r] + slot, p.send);
    asm volatile("fence.acq_rel.sys;" ::: "memory");  // the start barrier's arrival is relaxed
  }
  if (!barrier(p, 0, deadline)) return;
  if (sliced && p.rank != p.root) {
    __shared__ u64 s_send;
    if (threadIdx.x == 0) s_send = ld_peer_b64(p.uc[p.rank] + slot);  // a peer (the root) wrote it
    __syncthreads();
    const u64 slices = p.nranks - 1;
    const u64 j = (p.rank + p.nranks - p.root - 1) % p.nranks;  // 0..nranks-2
    const u64 slice = bytes / NVLS_VEC_BYTES / slices * NVLS_VEC_BYTES;
    const u64 lo = j * slice;
    const u64 n = j == slices - 1 ? bytes - lo : slice;
    copy_span(p, p.uc[p.root] + s_send + lo, p.recv + lo, n);
  } else if (!sliced && p.rank == p.root) {
    copy_span(p, p.uc[p.rank] + p.send, p.recv, bytes);
  }
#endif
  barrier(p, 1, deadline);
}
