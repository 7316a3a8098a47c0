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
// Push (NVLS_FLAG_PUSH on the two-shot kernel, unicast, nranks > 1,
// 4- and 8-byte types; 16-bit types ignore the flag, since a partial sum
// rounded at every hop would pass the one rounding the others make): a
// ring, as NCCL's reduce, by stores alone. The vectors go in pieces of
// NVLS_RING_CHUNKS x blockDim x NVLS_RING_VECS, piece q to block q mod grid, round q /
// grid, along the chain root + 1, root + 2, ..., root. In round k block
// b of the rank at position pos adds its own piece to the partial sum its
// predecessor stored in slot [b][k mod NVLS_PUSH_DEPTH] of its FIFO (at
// stage + NVLS_PUSH_FLAGS_BYTES; the first rank has none) and stores the
// sum into the same slot of its successor's FIFO, once the successor has
// credited round k - NVLS_PUSH_DEPTH; fences (fence.acq_rel.sys) and
// stores k + 1 into the successor's ready word [rank][b]; the root stores
// the whole sum into its recv. A rank that consumed its slot of round k
// stores k + 1 into its credit word [rank][b] of the predecessor where
// round k + NVLS_PUSH_DEPTH follows: every credit stored is waited for.
// Every GPU then stores S into one peer and takes S from another. Block
// b zeroes its own ready and credit words before the start barrier (the
// stage holds other collectives' data between calls), fenced, so that no
// peer's store of this call precedes them. The elements after the last
// whole vector: block 0 of the root reduces them from every rank's send
// (symmetric) before the end barrier. send and recv are workspace
// offsets.
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

#if !NVLS_MULTICAST
// pr_ready and pr_credit: the push reduce's flag words [s][b] in rank r's
// stage.
NVLS_DEV u64 pr_ready(const nvls_params& p, u64 r, u64 s, u64 b) { return p.uc[r] + p.stage + (s * NVLS_MAX_BLOCKS + b) * 4; }
NVLS_DEV u64 pr_credit(const nvls_params& p, u64 r, u64 s, u64 b) {
  return p.uc[r] + p.stage + ((NVLS_MAX_RANKS + s) * NVLS_MAX_BLOCKS + b) * 4;
}

// reduce_push: the push reduce, a ring, between the barriers; false when a
// wait gave up (the status word says why).
template <class D, class O>
NVLS_DEV bool reduce_push(const nvls_params& p, u64 deadline) {
  const u64 per_vec = NVLS_VEC_BYTES / D::E;
  const u64 nvec = p.count / per_vec;
  const u64 chunk = (u64)blockDim.x * NVLS_RING_VECS, piece = chunk * NVLS_RING_CHUNKS;
  const u64 b = blockIdx.x, n = p.nranks, me = p.rank;
  const u64 pos = (me + n - p.root - 1) % n;  // 0: the rank after the root; n - 1: the root
  const u64 prev = (me + n - 1) % n, next = (me + 1) % n;
  const u64 send = p.uc[me] + p.send, recv = p.uc[p.root] + p.recv;
  const u64 fifo = p.stage + NVLS_PUSH_FLAGS_BYTES;
  for (u64 k = 0;; k++) {
    const u64 a = (k * gridDim.x + b) * piece;
    if (a >= nvec) return true;  // the same for every thread of the block
    const u64 m = min_u64(piece, nvec - a);
    const u64 slot = fifo + (b * NVLS_PUSH_DEPTH + k % NVLS_PUSH_DEPTH) * piece * NVLS_VEC_BYTES;
    // The predecessor's partial sum of round k in the own FIFO; the
    // successor's credit for the slot of round k - depth in its FIFO.
    int waited = 1;
    if (threadIdx.x == 0) {
      if (pos > 0) waited = barrier_wait(p, NVLS_PHASE_PUSH, deadline, pr_ready(p, me, prev, b), (u32)(k + 1));
      if (waited && pos < n - 1 && k >= NVLS_PUSH_DEPTH)
        waited = barrier_wait(p, NVLS_PHASE_PUSH, deadline, pr_credit(p, me, next, b), (u32)(k - NVLS_PUSH_DEPTH + 1));
    }
    if (!__syncthreads_or(waited)) return false;
    // Chunk by chunk, the thread's vectors of the own piece and of the
    // partial sum loaded together, then the sum (the predecessors' first,
    // the chain's order) stored into the successor's FIFO, or the root's
    // recv: one fence and flag a piece.
    const u64 dst = pos == n - 1 ? recv + a * NVLS_VEC_BYTES : p.uc[next] + slot;
    for (u64 c0 = 0; c0 < m; c0 += chunk) {
      nvls_vec x[NVLS_RING_VECS], y[NVLS_RING_VECS];
#pragma unroll
      for (int j = 0; j < NVLS_RING_VECS; j++) {
        const u64 v = c0 + threadIdx.x + (u64)j * blockDim.x;
        if (v >= m) continue;
        x[j] = ld_own_v4(send + (a + v) * NVLS_VEC_BYTES);
        if (pos > 0) y[j] = ld_peer_v4(p.uc[me] + slot + v * NVLS_VEC_BYTES);  // the predecessor wrote it
      }
#pragma unroll
      for (int j = 0; j < NVLS_RING_VECS; j++) {
        const u64 v = c0 + threadIdx.x + (u64)j * blockDim.x;
        if (v >= m) continue;
        nvls_vec out = x[j];
        if (pos > 0) {
#pragma unroll
          for (int i = 0; i < D::L; i++) D::put(out, i, D::template op<O>(D::get(y[j], i), D::get(x[j], i)));
        }
        st_v4(dst + v * NVLS_VEC_BYTES, out);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (pos < n - 1) {
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(pr_ready(p, next, me, b)), "r"((u32)(k + 1)) : "memory");
      }
      // Every credit stored is waited for (the predecessor's round k +
      // depth exists), so none lands after its rank has moved on.
      if (pos > 0 && ((k + NVLS_PUSH_DEPTH) * gridDim.x + b) * piece < nvec)
        asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(pr_credit(p, prev, me, b)), "r"((u32)(k + 1)) : "memory");
    }
  }
}

// reduce_push_tail: the elements after the last whole vector, reduced
// from every rank's send by block 0 of the root.
template <class D, class O>
NVLS_DEV void reduce_push_tail(const nvls_params& p) {
  const u64 per_vec = NVLS_VEC_BYTES / D::E;
  const u64 first = p.count / per_vec * per_vec;
  if (p.rank != p.root || blockIdx.x != 0) return;
  for (u64 i = first + threadIdx.x; i < p.count; i += blockDim.x) {
    const u64 off = p.send + i * D::E;
    typename D::A acc = D::load1(p.uc[0] + off);
#pragma unroll
    for (int r = 1; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks) acc = D::template op<O>(acc, D::load1(p.uc[r] + off));
    D::store1(p.uc[p.root] + p.recv + i * D::E, acc);
  }
}
#endif

template <class D, class O>
static __device__ __forceinline__ void reduce_twoshot(const nvls_params& p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
#if !NVLS_MULTICAST
  if ((p.flags & NVLS_FLAG_PUSH) != 0 && p.nranks > 1 && D::E >= 4) {
    if (threadIdx.x < 2 * NVLS_MAX_RANKS) {
      // Block b's own ready and credit words, zeroed before any peer's
      // store of this call (the start barrier's arrival is relaxed).
      const u64 s = threadIdx.x % NVLS_MAX_RANKS;
      st_b32(threadIdx.x < NVLS_MAX_RANKS ? pr_ready(p, p.rank, s, blockIdx.x) : pr_credit(p, p.rank, s, blockIdx.x), 0);
      asm volatile("fence.acq_rel.sys;" ::: "memory");
    }
    __syncthreads();
    if (!barrier(p, 0, deadline)) return;
    if (reduce_push<D, O>(p, deadline)) reduce_push_tail<D, O>(p);  // gave up: the end barrier finds the team failed
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("fence.acq_rel.sys;" ::: "memory");
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
