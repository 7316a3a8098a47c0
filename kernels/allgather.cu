// allgather.cu: all-gather, type-free (count elements of elem_bytes bytes):
//
//   nvls_allgather_oneshot, nvls_allgather_ll
//
// Every rank's recv holds nranks slots of count elements; slot r of every
// rank's recv gets rank r's send.
//
// One-shot: start barrier (every rank's recv is free to overwrite); rank r
// stores its send into slot r of every rank's recv (copy_span: in the
// multicast flavor one multimem.st pass, in the unicast flavor a store to
// every rank); end barrier (every slot has landed). recv is a workspace
// offset (symmetric: every rank writes it); send is only ever touched by
// its own rank: with NVLS_FLAG_ABS_SEND an address of this device, any
// alignment (else an offset). In place (send = recv + rank x count
// elements) is safe: the slot is rewritten with the bytes it holds.
//
// LL: ll_collective<LL_ALLGATHER> (nvls.h), NVLS_FLAG_ABS_PTRS; the element
// type and operator it is instantiated with are unused.
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads (LL:
// 1..NVLS_BLOCK_THREADS), the same on every rank; count >= 1; elem_bytes >=
// 1.

#include "nvls.h"

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_allgather_oneshot(const struct nvls_params p) {
  kernel_entry(p);
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 bytes = p.count * p.elem_bytes;
  const u64 send = (p.flags & NVLS_FLAG_ABS_SEND) ? p.send : p.uc[p.rank] + p.send;
  if (!barrier(p, 0, deadline)) return;
  copy_span(p, send, p.recv + (u64)p.rank * bytes, bytes);
  barrier(p, 1, deadline);
}

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_allgather_ll(const struct nvls_params p) {
  kernel_entry(p);
  ll_collective<dt_u32, op_sum, LL_ALLGATHER>(p);
}
