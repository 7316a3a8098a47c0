// broadcast.cu: nvls_broadcast, count elements of elem_bytes bytes from the
// root's send to every rank's recv (in place allowed: send == recv on the
// root). The kernel is type-free: it copies count * elem_bytes bytes.
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads, the
// same grid on every rank; count >= 1; send and recv 16-byte aligned.
// With NVLS_FLAG_LL: the LL broadcast (nvls.h: ll_broadcast), blocks of
// 1..NVLS_BLOCK_THREADS threads, the LL area given, any alignment, no other
// broadcast flag.
// Every rank launches it, between two barriers (the first says every recv
// is free to overwrite and the root's send is ready, the second that the
// data has landed). Multicast: the root copies it all, one multimem.st pass
// (copy_span, nvls.h). Unicast: the root stores it to every rank, or, with
// NVLS_FLAG_SLICED and nranks > 1, the root's send is cut into nranks - 1
// slices of whole 16-byte vectors (the last one takes the rest): the rank
// j + 1 after the root (mod nranks) loads slice j through the root's UC
// alias and stores it to every rank, the root included, whose blocks copy
// nothing. The root's link then carries the data once each way, as a ring's.
// With NVLS_FLAG_ROOT_SLICE too the send is cut into nranks slices and the
// root copies slice 0 from its own send as the rank j after it copies
// slice j: where the ranks share one GPU's memory bandwidth, not links,
// every rank's share counts (docs/perf.md run 57).
// With NVLS_FLAG_PUSH and nranks > 2 (it wins over NVLS_FLAG_SLICED) the
// same slices move by stores alone: push_root, push_forward below.
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

#if !NVLS_MULTICAST
// Push (NVLS_FLAG_PUSH, unicast, nranks > 2): the slices of the sliced
// broadcast, moved by stores alone. Slice j of the root's send belongs to
// rank j + 1 after the root; it goes in pieces of blockDim x
// NVLS_PUSH_VECS vectors, piece q to block q mod grid, round q / grid.
// Round k of the root's block b stores piece k x grid + b of every slice
// into its rank's recv (and its own recv, out of place), fences once
// (fence.acq_rel.sys) and stores k + 1 into that rank's push flag b. Block
// b of rank j + 1 waits (ld.acquire.sys) for its flag to reach k + 1 and
// stores the piece, from its own recv, into the recv of every rank but
// the root and itself. Every link then carries stores only: the root's
// the data once, every other rank's its slice to each of the others. A
// rank's flags count from 0 in every call: block b sets its own back to 0
// after its last round, before its end-barrier arrival, and the next
// call's root stores into them only after the next start barrier. The
// bytes after the last whole vector go from the root's block 0 to every
// rank.

// push_slice: vectors [lo, lo + n) of the root's send make slice j.
NVLS_DEV void push_slice(const nvls_params& p, u64 nvec, u64 j, u64& lo, u64& n) {
  const u64 slices = p.nranks - 1;
  const u64 per = nvec / slices;
  lo = j * per;
  n = j == slices - 1 ? nvec - lo : per;
}

// push_wait: thread 0 polls the own push flag of its block until it
// reaches target; false (status recorded, phase NVLS_PHASE_PUSH) on the
// deadline or when the team failed meanwhile.
NVLS_DEV bool push_wait(const nvls_params& p, u64 deadline, u32 target) {
  return barrier_wait(p, NVLS_PHASE_PUSH, deadline, p.uc[p.rank] + NVLS_PUSH_FLAG_OFFSET + (u64)blockIdx.x * 4, target);
}

// push_root: the root's part, between the barriers.
NVLS_DEV void push_root(const nvls_params& p, u64 bytes) {
  const u64 nvec = bytes / NVLS_VEC_BYTES;
  const u64 piece = (u64)blockDim.x * NVLS_PUSH_VECS;
  const u64 src = p.uc[p.rank] + p.send;
  const u64 self = p.send != p.recv ? p.uc[p.rank] + p.recv : 0;  // out of place: the own recv too
  for (u64 k = 0;; k++) {
    const u64 q = k * gridDim.x + blockIdx.x;
    bool any = false;
    for (u64 j = 0; j < p.nranks - 1; j++) {
      u64 lo, n;
      push_slice(p, nvec, j, lo, n);
      if (q * piece >= n) continue;
      any = true;
      const u64 dst = p.uc[(p.root + 1 + j) % p.nranks] + p.recv;
      const u64 hi = lo + min_u64((q + 1) * piece, n);
      for (u64 v = lo + q * piece + threadIdx.x; v < hi; v += blockDim.x) {
        const nvls_vec x = ld_own_v4(src + v * NVLS_VEC_BYTES);
        st_v4(dst + v * NVLS_VEC_BYTES, x);
        if (self != 0) st_v4(self + v * NVLS_VEC_BYTES, x);
      }
    }
    if (!any) break;  // the same for every thread of the block
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("fence.acq_rel.sys;" ::: "memory");
      for (u64 j = 0; j < p.nranks - 1; j++) {
        u64 lo, n;
        push_slice(p, nvec, j, lo, n);
        if (q * piece >= n) continue;
        const u64 flag = p.uc[(p.root + 1 + j) % p.nranks] + NVLS_PUSH_FLAG_OFFSET + (u64)blockIdx.x * 4;
        asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(flag), "r"((u32)(k + 1)) : "memory");
      }
    }
  }
  const u64 tail = bytes - nvec * NVLS_VEC_BYTES;
  if (blockIdx.x == 0 && threadIdx.x < tail) {
    const u64 off = nvec * NVLS_VEC_BYTES + threadIdx.x;
    const u32 b = ld_own_u8(src + off);
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks && (r != (int)p.rank || self != 0)) st_u8(p.uc[r] + p.recv + off, b);
  }
}

// push_forward: the part of the rank j + 1 after the root, between the
// barriers; false when a wait gave up (the status word says why).
NVLS_DEV bool push_forward(const nvls_params& p, u64 bytes, u64 deadline) {
  const u64 nvec = bytes / NVLS_VEC_BYTES;
  const u64 piece = (u64)blockDim.x * NVLS_PUSH_VECS;
  const u64 j = (p.rank + p.nranks - p.root - 1) % p.nranks;
  const u64 own = p.uc[p.rank] + p.recv;
  u64 lo, n;
  push_slice(p, nvec, j, lo, n);
  bool ok = true;
  for (u64 k = 0;; k++) {
    const u64 q = k * gridDim.x + blockIdx.x;
    if (q * piece >= n) break;
    // Thread 0's verdict reaches every thread through the block barrier,
    // which also orders its acquire before their loads.
    const int waited = threadIdx.x == 0 ? push_wait(p, deadline, (u32)(k + 1)) : 0;
    if (!__syncthreads_or(waited)) {
      ok = false;
      break;
    }
    const u64 hi = lo + min_u64((q + 1) * piece, n);
    for (u64 v = lo + q * piece + threadIdx.x; v < hi; v += blockDim.x) {
      const nvls_vec x = ld_peer_v4(own + v * NVLS_VEC_BYTES);  // a peer (the root) wrote it
#pragma unroll
      for (int r = 0; r < NVLS_MAX_RANKS; r++)
        if (r < (int)p.nranks && r != (int)p.root && r != (int)p.rank) st_v4(p.uc[r] + p.recv + v * NVLS_VEC_BYTES, x);
    }
  }
  if (threadIdx.x == 0) st_b32(p.uc[p.rank] + NVLS_PUSH_FLAG_OFFSET + (u64)blockIdx.x * 4, 0);
  return ok;
}
#endif

extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS) nvls_broadcast(const struct nvls_params p) {
  kernel_entry(p);
  if ((p.flags & NVLS_FLAG_LL) != 0) {
    ll_broadcast(p);  // nvls.h: no barrier, both flavors
    return;
  }
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 bytes = p.count * p.elem_bytes;
#if NVLS_MULTICAST
  if (!barrier(p, 0, deadline)) return;
  if (p.rank == p.root) copy_span(p, p.uc[p.rank] + p.send, p.recv, bytes);
#else
  if ((p.flags & NVLS_FLAG_PUSH) != 0 && p.nranks > 2) {
    if (!barrier(p, 0, deadline)) return;
    if (p.rank == p.root) {
      push_root(p, bytes);
    } else {
      push_forward(p, bytes, deadline);  // gave up: the end barrier finds the team failed
    }
    barrier(p, 1, deadline);
    return;
  }
  const bool sliced = (p.flags & NVLS_FLAG_SLICED) != 0 && p.nranks > 1;
  const u64 slot = NVLS_ROOT_SEND_OFFSET + (u64)blockIdx.x * 8;
  if (sliced && p.rank == p.root && threadIdx.x == 0) {
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks && r != (int)p.root) st_b64(p.uc[r] + slot, p.send);
    asm volatile("fence.acq_rel.sys;" ::: "memory");  // the start barrier's arrival is relaxed
  }
  if (!barrier(p, 0, deadline)) return;
  const bool all = (p.flags & NVLS_FLAG_ROOT_SLICE) != 0;  // the root takes slice 0
  if (sliced && (all || p.rank != p.root)) {
    __shared__ u64 s_send;
    if (threadIdx.x == 0) s_send = p.rank == p.root ? p.send : ld_peer_b64(p.uc[p.rank] + slot);  // a peer (the root) wrote it
    __syncthreads();
    const u64 slices = all ? p.nranks : p.nranks - 1;
    const u64 j = (p.rank + p.nranks - p.root - (all ? 0 : 1)) % p.nranks;  // 0..slices-1
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
