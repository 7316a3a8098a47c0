// reduce.cu: reduce to a root, one entry point per algorithm x element type
// x operator (the pairs of NVLS_TYPE_OPS, as the all-reduce):
//
//   nvls_reduce_{oneshot|twoshot|ll}_{f32|f16|bf16|s32|u32|u64}_{sum|min|max}
//
// The root's recv gets count elements reduced over every rank's send; no
// other rank's recv is touched. send is a workspace offset (symmetric).
//
// One-shot: start barrier; the root reduces the whole buffer from every
// rank (reduce_span: multimem.ld_reduce, or loads from every rank) into its
// recv; end barrier (no rank returns while the root still reads its send).
// recv: with NVLS_FLAG_ABS_RECV an address of the root's device, any
// alignment (the other ranks pass anything: they do not read it). In place
// on the root (recv = send) is safe: only the root reads its send.
//
// Two-shot: the vectors split into nranks - 1 contiguous slices, one per
// rank other than the root (w = the rank's index among them; the last
// slice takes the remainder and the tail); each such rank reduces its
// slice and stores it into the root's workspace at offset recv (no
// NVLS_FLAG_ABS_RECV: every rank writes there); end barrier. The root
// reduces nothing: its links then carry the sum once (the others' stores)
// plus its own send once (the others' loads), where slices of its own
// would add nranks - 1 loads of its slice from the peers: 1.5 x the bytes
// at 4 ranks, the root's links being the bottleneck. A team of one rank
// (never launched by collectives) reduces it all itself. With
// NVLS_FLAG_ROOT_SLICE every rank, the root included, reduces one of
// nranks slices (w = the rank): at 2 ranks the root's link then carries
// half the sum as the peer's stores and half the peer's send as loads, as
// the two-shot all-reduce's does, instead of the whole sum as stores and
// the whole of its own send as the peer's loads.
//
// Local (NVLS_FLAG_LOCAL, unicast one-shot, launched on the root alone):
// the root reduces from its own memory, no barrier, for the copy-engine
// reduce (package collectives, ce.go): rank r's contribution at stage + w
// x chunk (w: r's index among the ranks other than the root; chunk: count
// elements rounded up to whole 16-byte vectors), the own at send; recv
// may be one of those sources exactly.
// With NVLS_FLAG_PIECES too, the sources land while it runs: it reduces
// piece i (ce_piece_start) once the own flag word [i][q] at
// NVLS_CE_FLAG_OFFSET of every other rank q equals the own start-barrier
// sequence word (ce_piece_ready).
//
// LL: ll_collective<LL_REDUCE> (nvls.h), NVLS_FLAG_ABS_PTRS.
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads (LL:
// 1..NVLS_BLOCK_THREADS), the same on every rank; count >= 1; elem_bytes =
// D::E; root < nranks.

#include "nvls.h"

NVLS_DEV u64 root_recv(const nvls_params& p) {
  return (p.flags & NVLS_FLAG_ABS_RECV) ? p.recv : p.uc[p.root] + p.recv;
}

template <class D, class O>
static __device__ __forceinline__ void reduce_oneshot(const nvls_params& p) {
#if !NVLS_MULTICAST
  // NVLS_FLAG_LOCAL, launched on the root alone: the other ranks' sends
  // are in the root's own memory already, put there by copy engine
  // between the host's barriers, packed at stage (rank r's at slot r, or
  // r - 1 past the root), count elements each in slots of whole 16-byte
  // vectors; the own at send. No
  // barrier. reduce_span reads them through per-source bases q.uc[r].
  if (p.flags & NVLS_FLAG_LOCAL) {
    if (!nvls_enter(p)) return;
    const u64 own = p.uc[p.rank], chunk = (p.count * D::E + NVLS_VEC_BYTES - 1) / NVLS_VEC_BYTES * NVLS_VEC_BYTES;
    nvls_params q = p;
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks && r != (int)p.rank) q.uc[r] = own + p.stage + (u64)(r < (int)p.rank ? r : r - 1) * chunk - p.send;
    local_reduce<D, O>(p, q, root_recv(p));
    return;
  }
#endif
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  if (!barrier(p, 0, deadline)) return;
  if (p.rank == p.root) reduce_span<D, O>(p, p.send, root_recv(p), p.count);
  barrier(p, 1, deadline);
}

template <class D, class O>
static __device__ __forceinline__ void reduce_twoshot(const nvls_params& p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 per_vec = NVLS_VEC_BYTES / D::E;
  const bool all = p.nranks == 1 || (p.flags & NVLS_FLAG_ROOT_SLICE) != 0;  // the root takes a slice too
  const u64 workers = all ? p.nranks : p.nranks - 1;
  const u64 w = (all || p.rank < p.root) ? p.rank : p.rank - 1;
  const u64 slice = p.count / per_vec / workers;
  const u64 lo = w * slice * NVLS_VEC_BYTES;
  const u64 n = w == workers - 1 ? p.count - w * slice * per_vec : slice * per_vec;
  if (!barrier(p, 0, deadline)) return;
  if (all || p.rank != p.root) reduce_span<D, O>(p, p.send + lo, root_recv(p) + lo, n);
  barrier(p, 1, deadline);
}

#define NVLS_REDUCE(TN, DT, ON, OP)                                                                             \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_reduce_oneshot_##TN##_##ON(const struct nvls_params p) {                                            \
    kernel_entry(p);                                                                                           \
    reduce_oneshot<DT, OP>(p);                                                                                 \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_reduce_twoshot_##TN##_##ON(const struct nvls_params p) {                                            \
    kernel_entry(p);                                                                                           \
    reduce_twoshot<DT, OP>(p);                                                                                 \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_reduce_ll_##TN##_##ON(const struct nvls_params p) {                                                 \
    kernel_entry(p);                                                                                           \
    ll_collective<DT, OP, LL_REDUCE>(p);                                                                       \
  }

NVLS_TYPE_OPS(NVLS_REDUCE)
