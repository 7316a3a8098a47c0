// allreduce.cu: one-shot, two-shot and LL all-reduce, one entry point per
// algorithm x element type x operator:
//
//   nvls_allreduce_{oneshot|twoshot|ll}_{f32|f16|bf16|s32|u32|u64}_{sum|min|max}
//
// The unicast flavor (NVLS_MULTICAST=0) has all 18 type x operator pairs;
// the multicast flavor only those multimem.ld_reduce has: f32 sum; f16 and
// bf16 sum, min, max; s32, u32, u64 sum, min, max (kernels.Supported).
//
// Launch: grid 1..NVLS_MAX_BLOCKS blocks of NVLS_BLOCK_THREADS threads (LL:
// 1..NVLS_BLOCK_THREADS), the same grid and block on every rank; count >= 1;
// elem_bytes = D::E (not read: the type fixes it); send, recv,
// stage, ll_area 16-byte aligned (LL with NVLS_FLAG_ABS_PTRS: send and recv
// any alignment).

#include "nvls.h"

// One-shot: every rank reduces the whole buffer from every rank's send and
// writes it to its own recv. In place (stage != 0) the result goes to stage
// first, because peers may still be reading this rank's send = recv until
// the end barrier; after it, each block copies back the elements it wrote,
// which are exactly the elements block blockIdx.x of every peer read.
template <class D, class O>
static __device__ __forceinline__ void allreduce_oneshot(const nvls_params& p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 per_vec = NVLS_VEC_BYTES / D::E;
  const u64 nvec = p.count / per_vec;
  const u64 tail = p.count - nvec * per_vec;
  const u64 own = p.uc[p.rank];
  const u64 dst = p.stage != 0 ? p.stage : p.recv;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;

  if (!barrier(p, 0, deadline)) return;
  for (u64 v = first; v < nvec; v += stride) {
    const u64 off = v * NVLS_VEC_BYTES;
    st_v4(own + dst + off, load_reduce<D, O>(p, p.send + off));
  }
  if (blockIdx.x == 0 && threadIdx.x < tail) {
    const u64 off = nvec * NVLS_VEC_BYTES + threadIdx.x * D::E;
    D::store1(own + dst + off, uc_load_reduce1<D, O>(p, p.send + off));
  }
  if (!barrier(p, 1, deadline)) return;
  if (p.stage != 0) {
    for (u64 v = first; v < nvec; v += stride) {
      const u64 off = v * NVLS_VEC_BYTES;
      st_v4(own + p.recv + off, ld_own_v4(own + p.stage + off));
    }
    if (blockIdx.x == 0 && threadIdx.x < tail) {
      const u64 off = nvec * NVLS_VEC_BYTES + threadIdx.x * D::E;
      D::store1(own + p.recv + off, D::load1(own + p.stage + off));
    }
  }
}

// Two-shot: the vectors are split into nranks contiguous slices, rank r
// owning slice r (the last slice also takes the remainder and the scalar
// tail); each rank reduces its slice from every rank and stores the result
// to every rank (unicast, 8 or more vectors a thread: in two passes, all
// the loads first). In place is safe: a slice is read and written only by
// its owner, each vector by one thread.
template <class D, class O>
static __device__ __forceinline__ void allreduce_twoshot(const nvls_params& p) {
  const u64 deadline = threadIdx.x == 0 ? deadline_of(p) : 0;
  const u64 per_vec = NVLS_VEC_BYTES / D::E;
  const u64 nvec = p.count / per_vec;
  const u64 tail = p.count - nvec * per_vec;
  const u64 slice = nvec / p.nranks;
  const bool last = p.rank == p.nranks - 1;
  const u64 lo = (u64)p.rank * slice;
  const u64 hi = last ? nvec : lo + slice;
  const u64 stride = (u64)gridDim.x * blockDim.x;

  if (!barrier(p, 0, deadline)) return;
  const u64 first = lo + (u64)blockIdx.x * blockDim.x + threadIdx.x;
#if !NVLS_MULTICAST
  // A slice of 8 or more vectors a thread goes in two passes: the reduce
  // (loads from every rank) into the own recv, then the own result to
  // every peer, so that the links carry loads, then stores, as a
  // reduce-scatter and an all-gather do (run 28 at 512 MiB: 326 and 346
  // GB/s a direction, against 320 for the two mixed). A thread rereads
  // only what it wrote; slice r of any buffer is touched by rank r alone.
  // NVLS_FLAG_ONE_PASS (ranks sharing a device, where the GPU's memory
  // and not a link is the limit) keeps one pass: the second pass's reread
  // cost 91 -> 68% of the copy roofline on 1 x H100 (docs/perf.md run 57).
  if ((p.flags & NVLS_FLAG_ONE_PASS) == 0 && hi - lo >= 8 * stride) {
    const u64 own = p.uc[p.rank];
    for (u64 v = first; v < hi; v += stride) {
      const u64 off = v * NVLS_VEC_BYTES;
      st_v4(own + p.recv + off, load_reduce<D, O>(p, p.send + off));
    }
    for (u64 v = first; v < hi; v += stride) {
      const u64 off = v * NVLS_VEC_BYTES;
      const nvls_vec x = ld_own_v4(own + p.recv + off);
#pragma unroll
      for (int r = 0; r < NVLS_MAX_RANKS; r++)
        if (r < (int)p.nranks && r != (int)p.rank) st_v4(p.uc[r] + p.recv + off, x);
    }
  } else
#endif
    for (u64 v = first; v < hi; v += stride) {
      const u64 off = v * NVLS_VEC_BYTES;
      store_all(p, p.recv + off, load_reduce<D, O>(p, p.send + off));
    }
  if (last && blockIdx.x == 0 && threadIdx.x < tail) {
    const u64 off = nvec * NVLS_VEC_BYTES + threadIdx.x * D::E;
    const typename D::A x = uc_load_reduce1<D, O>(p, p.send + off);
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks) D::store1(p.uc[r] + p.recv + off, x);
  }
  barrier(p, 1, deadline);
}

#define NVLS_ALLREDUCE(TN, DT, ON, OP)                                                                          \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_allreduce_oneshot_##TN##_##ON(const struct nvls_params p) {                                         \
    kernel_entry(p);                                                                                           \
    allreduce_oneshot<DT, OP>(p);                                                                              \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_allreduce_twoshot_##TN##_##ON(const struct nvls_params p) {                                         \
    kernel_entry(p);                                                                                           \
    allreduce_twoshot<DT, OP>(p);                                                                              \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_allreduce_ll_##TN##_##ON(const struct nvls_params p) {                                              \
    kernel_entry(p);                                                                                           \
    ll_collective<DT, OP, LL_ALLREDUCE>(p);                                                                    \
  }

NVLS_TYPE_OPS(NVLS_ALLREDUCE)
