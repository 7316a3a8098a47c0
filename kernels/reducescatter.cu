// reducescatter.cu: reduce-scatter, one entry point per algorithm x element
// type x operator (the pairs of NVLS_TYPE_OPS, as the all-reduce):
//
//   nvls_reducescatter_{oneshot|ll}_{f32|f16|bf16|s32|u32|u64}_{sum|min|max}
//
// Every rank's send holds nranks slices of count elements; rank r's recv
// gets slice r reduced over every rank (16-bit floats in f32, rounded once;
// unicast: in rank order).
//
// One-shot: start barrier (every rank's send is ready); rank r reduces
// slice r (reduce_span: in the multicast flavor one multimem.ld_reduce pass
// over it, in the unicast flavor loads from every rank) into its recv; end
// barrier (no rank returns, so that its send may be overwritten, while a
// peer still reads it). send is a workspace offset (symmetric: the peers
// read it); recv is only ever touched by its own rank: with
// NVLS_FLAG_ABS_RECV an address of this device, any alignment (else an
// offset). In place (recv = send + rank x count elements) is safe: slice r
// of rank r is read by rank r only, each vector by the thread that writes
// it.
//
// Local (NVLS_FLAG_LOCAL, unicast only): the reduce from this rank's own
// memory, no barrier, for the copy-engine all-reduce (package collectives,
// ce.go): source r != rank at stage + r x (call_count / nranks) elements,
// the own at send. With NVLS_FLAG_PIECES too, the sources land while it
// runs, and it reduces piece i (ce_piece_start) once every other rank's
// flag word for it says so (ce_piece_ready).
//
// LL: ll_collective<LL_REDUCESCATTER> (nvls.h), NVLS_FLAG_ABS_PTRS.
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads (LL:
// 1..NVLS_BLOCK_THREADS), the same on every rank; count >= 1; elem_bytes =
// D::E.

#include "nvls.h"

template <class D, class O>
static __device__ __forceinline__ void reducescatter(const nvls_params& p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 recv = (p.flags & NVLS_FLAG_ABS_RECV) ? p.recv : p.uc[p.rank] + p.recv;
#if !NVLS_MULTICAST
  // NVLS_FLAG_LOCAL: the peers' contributions are in this rank's memory
  // already, put there by copy engine between the host's barriers: source
  // r at stage + r x (call_count / nranks) elements, the own at send, count
  // elements each (a chunk of slices of call_count / nranks). reduce_span
  // reads them through per-source bases q.uc[r] such that q.uc[r] + send
  // is source r. No barrier here.
  if (p.flags & NVLS_FLAG_LOCAL) {
    if (!nvls_enter(p)) return;
    const u64 own = p.uc[p.rank], stride = (p.call_count != 0 ? p.call_count / p.nranks : p.count) * D::E;
    nvls_params q = p;
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks && r != (int)p.rank) q.uc[r] = own + p.stage + (u64)r * stride - p.send;
    local_reduce<D, O>(p, q, recv);
    return;
  }
#endif
  if (!barrier(p, 0, deadline)) return;
  reduce_span<D, O>(p, p.send + (u64)p.rank * p.count * D::E, recv, p.count);
  barrier(p, 1, deadline);
}

#define NVLS_REDUCESCATTER(TN, DT, ON, OP)                                                                      \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_reducescatter_oneshot_##TN##_##ON(const struct nvls_params p) {                                     \
    kernel_entry(p);                                                                                           \
    reducescatter<DT, OP>(p);                                                                                  \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_reducescatter_ll_##TN##_##ON(const struct nvls_params p) {                                          \
    kernel_entry(p);                                                                                           \
    ll_collective<DT, OP, LL_REDUCESCATTER>(p);                                                                \
  }

NVLS_TYPE_OPS(NVLS_REDUCESCATTER)
