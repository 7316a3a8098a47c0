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
// Push (NVLS_FLAG_PUSH on the two-shot kernel, unicast, nranks > 2): the
// two-shot's slices, moved by stores alone, as NCCL's ring moves a
// reduce. Slice j of the vectors (pr_slice, as the push broadcast's)
// belongs to the rank j + 1 after the root, its owner; it goes in pieces
// of blockDim x NVLS_PUSH_VECS vectors, piece q to block q mod grid,
// round q / grid. In round k block b of every rank stores its own piece
// of every slice it does not own into slot [rank][b][k mod
// NVLS_PUSH_DEPTH] of that slice's owner's FIFO (at stage +
// NVLS_PUSH_FLAGS_BYTES), once the owner has credited round k -
// NVLS_PUSH_DEPTH; fences once (fence.acq_rel.sys) and stores k + 1 into
// the owner's ready word [rank][b]. Then, on an owner, block b waits for
// the ready words of every other rank to reach k + 1, reduces the pieces
// with its own in rank order and stores the sum into the root's recv,
// and, where round k + NVLS_PUSH_DEPTH follows, stores k + 1 into its
// credit word [owner][b] of every other rank: every credit stored is
// waited for, so none lands after its rank has moved on. Every link then
// carries stores only, S each way. Block b zeroes its own ready and credit
// words before the start barrier (the stage holds other collectives'
// data between calls), fenced, so that no peer's store of this call
// precedes them. The elements after the last whole vector: block 0 of the
// root reduces them from every rank's send (symmetric) before the end
// barrier. send and recv are workspace offsets.
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
// pr_slice: vectors [lo, lo + n) make slice j of nvec (broadcast.cu's
// push_slice).
NVLS_DEV void pr_slice(const nvls_params& p, u64 nvec, u64 j, u64& lo, u64& n) {
  const u64 slices = p.nranks - 1;
  const u64 per = nvec / slices;
  lo = j * per;
  n = j == slices - 1 ? nvec - lo : per;
}

// pr_ready and pr_credit: the push reduce's flag words [s][b] in rank r's
// stage.
NVLS_DEV u64 pr_ready(const nvls_params& p, u64 r, u64 s, u64 b) { return p.uc[r] + p.stage + (s * NVLS_MAX_BLOCKS + b) * 4; }
NVLS_DEV u64 pr_credit(const nvls_params& p, u64 r, u64 s, u64 b) {
  return p.uc[r] + p.stage + ((NVLS_MAX_RANKS + s) * NVLS_MAX_BLOCKS + b) * 4;
}

// pr_wait: thread 0 polls the own word at flag until it reaches target;
// false (status recorded, phase NVLS_PHASE_PUSH) on the deadline or when
// the team failed meanwhile (broadcast.cu's push_wait, any word).
NVLS_DEV bool pr_wait(const nvls_params& p, u64 flag, u64 deadline, u32 target) {
  for (u32 polls = 1;; polls++) {
    u32 got;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(got) : "l"(flag) : "memory");
    if (got >= target) return true;
    if ((polls & 63) == 0) {
      if (globaltimer() > deadline) {
        record_timeout(p, NVLS_PHASE_PUSH);
        return false;
      }
      const u64 f = team_failed(p);
      if (f != 0) {
        record_abort(p, NVLS_PHASE_PUSH, f);
        return false;
      }
    }
  }
}

// reduce_push: the push reduce between the barriers; false when a wait
// gave up (the status word says why).
template <class D, class O>
NVLS_DEV bool reduce_push(const nvls_params& p, u64 deadline) {
  const u64 per_vec = NVLS_VEC_BYTES / D::E;
  const u64 nvec = p.count / per_vec;
  const u64 piece = (u64)blockDim.x * NVLS_PUSH_VECS;
  const u64 b = blockIdx.x, n = p.nranks, me = p.rank;
  const u64 send = p.uc[me] + p.send, recv = p.uc[p.root] + p.recv;
  const u64 fifo = p.stage + NVLS_PUSH_FLAGS_BYTES;
  const bool owner = me != p.root;
  const u64 mine = (me + n - p.root - 1) % n;  // the own slice, on an owner
  u64 mlo = 0, mn = 0;
  if (owner) pr_slice(p, nvec, mine, mlo, mn);
  for (u64 k = 0;; k++) {
    const u64 q = k * gridDim.x + b;
    const u64 slot = ((me * gridDim.x + b) * NVLS_PUSH_DEPTH + k % NVLS_PUSH_DEPTH) * piece * NVLS_VEC_BYTES;
    bool any = false;
    // As a source: the own piece q of every slice another rank owns.
    for (u64 j = 0; j < n - 1; j++) {
      const u64 o = (p.root + 1 + j) % n;
      u64 lo, len;
      pr_slice(p, nvec, j, lo, len);
      if (o == me || q * piece >= len) continue;
      any = true;
      if (k >= NVLS_PUSH_DEPTH) {
        const int waited = threadIdx.x == 0 ? pr_wait(p, pr_credit(p, me, o, b), deadline, (u32)(k - NVLS_PUSH_DEPTH + 1)) : 0;
        if (!__syncthreads_or(waited)) return false;
      }
      // The thread's vectors of the piece loaded together, then stored:
      // one memory latency a piece, not one a vector (run 101).
      const u64 a = lo + q * piece, m = min_u64(piece, len - q * piece);
      const u64 dst = p.uc[o] + fifo + slot;
      nvls_vec x[NVLS_PUSH_VECS];
#pragma unroll
      for (int i = 0; i < NVLS_PUSH_VECS; i++) {
        const u64 v = threadIdx.x + (u64)i * blockDim.x;
        if (v < m) x[i] = ld_own_v4(send + (a + v) * NVLS_VEC_BYTES);
      }
#pragma unroll
      for (int i = 0; i < NVLS_PUSH_VECS; i++) {
        const u64 v = threadIdx.x + (u64)i * blockDim.x;
        if (v < m) st_v4(dst + v * NVLS_VEC_BYTES, x[i]);
      }
    }
    const bool own = owner && q * piece < mn;
    if (!any && !own) return true;  // the same for every thread of the block
    __syncthreads();
    if (threadIdx.x == 0 && any) {
      asm volatile("fence.acq_rel.sys;" ::: "memory");
      for (u64 j = 0; j < n - 1; j++) {
        const u64 o = (p.root + 1 + j) % n;
        u64 lo, len;
        pr_slice(p, nvec, j, lo, len);
        if (o == me || q * piece >= len) continue;
        asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(pr_ready(p, o, me, b)), "r"((u32)(k + 1)) : "memory");
      }
    }
    if (!own) continue;
    // As the owner: every other rank's piece q of the own slice.
    int waited = 1;
    if (threadIdx.x == 0)
      for (u64 s = 0; s < n && waited; s++)
        if (s != me) waited = pr_wait(p, pr_ready(p, me, s, b), deadline, (u32)(k + 1));
    if (!__syncthreads_or(waited)) return false;
    // Source by source in rank order, the thread's vectors of the piece
    // loaded together (a latency a source, not one a vector).
    const u64 a = mlo + q * piece, m = min_u64(piece, mn - q * piece);
    typename D::A acc[NVLS_PUSH_VECS][D::L];
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++) {
      if (s >= (int)n) continue;
      const u64 src = (u64)s == me ? send + a * NVLS_VEC_BYTES
                                   : p.uc[me] + fifo + (((u64)s * gridDim.x + b) * NVLS_PUSH_DEPTH + k % NVLS_PUSH_DEPTH) * piece * NVLS_VEC_BYTES;
      nvls_vec x[NVLS_PUSH_VECS];
#pragma unroll
      for (int j = 0; j < NVLS_PUSH_VECS; j++) {
        const u64 v = threadIdx.x + (u64)j * blockDim.x;
        if (v < m) x[j] = (u64)s == me ? ld_own_v4(src + v * NVLS_VEC_BYTES) : ld_peer_v4(src + v * NVLS_VEC_BYTES);  // a peer wrote the FIFO
      }
#pragma unroll
      for (int j = 0; j < NVLS_PUSH_VECS; j++)
#pragma unroll
        for (int i = 0; i < D::L; i++) acc[j][i] = s == 0 ? D::get(x[j], i) : D::template op<O>(acc[j][i], D::get(x[j], i));
    }
#pragma unroll
    for (int j = 0; j < NVLS_PUSH_VECS; j++) {
      const u64 v = threadIdx.x + (u64)j * blockDim.x;
      if (v >= m) continue;
      nvls_vec out;
#pragma unroll
      for (int i = 0; i < D::L; i++) D::put(out, i, acc[j][i]);
      st_v4(recv + (a + v) * NVLS_VEC_BYTES, out);
    }
    __syncthreads();
    if (threadIdx.x == 0 && (k + NVLS_PUSH_DEPTH) * gridDim.x * piece + b * piece < mn) {
      for (u64 s = 0; s < n; s++)
        if (s != me) asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(pr_credit(p, s, me, b)), "r"((u32)(k + 1)) : "memory");
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
  if ((p.flags & NVLS_FLAG_PUSH) != 0 && p.nranks > 2) {
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
