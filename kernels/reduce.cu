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
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  if (!barrier(p, 0, deadline)) return;
  if (p.rank == p.root) reduce_span<D, O>(p, p.send, root_recv(p), p.count);
  barrier(p, 1, deadline);
}

#if !NVLS_MULTICAST
// combine: a op b, lane by lane (a holds ranks 0..r-1's reduction, b rank
// r's values: uc_load_reduce's order).
template <class D, class O>
NVLS_DEV nvls_vec combine(const nvls_vec& a, const nvls_vec& b) {
  nvls_vec out;
#pragma unroll
  for (int i = 0; i < D::L; i++) D::put(out, i, D::template op<O>(D::get(a, i), D::get(b, i)));
  return out;
}

// reduce_chain: the chained reduce (NVLS_FLAG_CHAIN), between the
// barriers. Pieces of blockDim vectors, piece q to block q mod grid in
// round q / grid. Rank 0 stores its send's piece into slot k mod
// NVLS_CHAIN_SLOTS of its block's ring in rank 1's staging area (params
// stage); rank r (0 < r < nranks - 1) waits for it (its push flag),
// combines it with its own send's piece and stores the result into rank
// r + 1's ring; rank nranks - 1 stores the final piece into the root's
// recv. Each store of a round is followed by one fence and the next
// rank's flag (k + 1); a rank that consumed piece k gives the previous
// rank credit k + 1, and a rank waits for credit k + 1 - SLOTS before it
// overwrites a slot. Flags count from 0 every call: a rank clears its
// credit word after the last credit came and its flag after its last
// piece. The elements after the last whole vector: the root's block 0,
// from every rank's send in rank order, as the two-shot's tail.
template <class D, class O>
static __device__ __forceinline__ void reduce_chain(const nvls_params& p, u64 deadline) {
  const u64 per_vec = NVLS_VEC_BYTES / D::E;
  const u64 nvec = p.count / per_vec;
  const u64 piece = blockDim.x;
  const u64 me = p.rank, last = p.nranks - 1;
  const u64 own = p.uc[me];
  const u64 flag = NVLS_PUSH_FLAG_OFFSET + (u64)blockIdx.x * 4;
  const u64 credit = NVLS_CREDIT_OFFSET + (u64)blockIdx.x * 4;
  const u64 ring = p.stage + (u64)blockIdx.x * NVLS_CHAIN_SLOTS * piece * NVLS_VEC_BYTES;
  u32 k = 0;
  bool ok = true;
  for (;; k++) {
    const u64 q = (u64)k * gridDim.x + blockIdx.x;
    if (q * piece >= nvec) break;
    int waited = 1;
    if (threadIdx.x == 0) {
      if (me > 0) waited = flag_wait(p, own + flag, k + 1, NVLS_PHASE_PUSH, deadline);
      if (waited && me < last && k >= NVLS_CHAIN_SLOTS)
        waited = flag_wait(p, own + credit, k + 1 - NVLS_CHAIN_SLOTS, NVLS_PHASE_PUSH, deadline);
    }
    if (!__syncthreads_and(waited)) {
      ok = false;
      break;
    }
    const u64 v = q * piece + threadIdx.x;
    const u64 slot = ring + ((u64)(k % NVLS_CHAIN_SLOTS) * piece + threadIdx.x) * NVLS_VEC_BYTES;
    if (v < nvec) {
      nvls_vec x = ld_own_v4(own + p.send + v * NVLS_VEC_BYTES);
      if (me > 0) x = combine<D, O>(ld_peer_v4(own + slot), x);  // a peer (rank me - 1) wrote the slot
      st_v4(me < last ? p.uc[me + 1] + slot : p.uc[p.root] + p.recv + v * NVLS_VEC_BYTES, x);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("fence.acq_rel.sys;" ::: "memory");
      if (me < last) asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p.uc[me + 1] + flag), "r"(k + 1) : "memory");
      if (me > 0) asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p.uc[me - 1] + credit), "r"(k + 1) : "memory");
    }
  }
  if (threadIdx.x == 0) {
    if (ok && me < last && k > 0) flag_wait(p, own + credit, k, NVLS_PHASE_PUSH, deadline);
    st_b32(own + credit, 0);
    st_b32(own + flag, 0);
  }
  const u64 tail = p.count - nvec * per_vec;
  if (me == p.root && blockIdx.x == 0 && threadIdx.x < tail) {
    const u64 off = (nvec * per_vec + threadIdx.x) * D::E;
    D::store1(own + p.recv + off, uc_load_reduce1<D, O>(p, p.send + off));
  }
}
#endif

template <class D, class O>
static __device__ __forceinline__ void reduce_twoshot(const nvls_params& p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
#if !NVLS_MULTICAST
  if ((p.flags & NVLS_FLAG_CHAIN) != 0 && p.nranks > 2) {
    if (!barrier(p, 0, deadline)) return;
    reduce_chain<D, O>(p, deadline);
    barrier(p, 1, deadline);
    return;
  }
#endif
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
