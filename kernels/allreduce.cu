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
// to every rank. In place is safe: a slice is read and written only by its
// owner, each vector by one thread.
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
  for (u64 v = lo + (u64)blockIdx.x * blockDim.x + threadIdx.x; v < hi; v += stride) {
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

// ---------------------------------------------------------------------------
// LL (low latency): a Lamport-style push with the flag inside the data, for
// small payloads. No barrier, no fence: each rank stores its send, in 16-byte
// lines {data0, flag, data1, flag} (8 payload bytes per line), into an LL
// area of every rank, then polls its own area until every rank's lines of
// this call carry this call's flag. A 16-byte st.volatile.global.v4.u32 is
// seen whole by a 16-byte ld.volatile.global.v4.u32 (as NCCL's LL protocol
// relies on), so a line whose two flags match holds its data.
//
// UC accesses only, in both flavors (the multicast flavor has the UC
// pointers too): no multimem, and no fence.proxy.alias, since the kernel
// never touches the MC alias.
//
// Layout: ll_area = the workspace offset of the LL area (the same on every
// rank), ll_lines = its capacity C in lines: [2 parities][nranks sources][C
// lines] of 16 bytes; a call uses lines 0..L-1 of each, L = ceil(P/8) <= C,
// P = count * element size. A slot's place depends on C, never on L: with
// L in the layout, a fast rank's next call (other parity, other size) could
// land on lines a slow rank has yet to read in this one.
//
// Epochs: one u32 per rank at NVLS_LL_OFFSET, touched by its own device only.
// Every block reads it at entry; this call's epoch e is that + 1, skipping 0
// (stale lines of a zeroed area have flag 0) to 2, so that the parity keeps
// alternating across the wrap (0xffffffff is odd, 2 even). The last block
// to finish (the atomic add on the done counter at NVLS_LL_OFFSET+4 returns
// gridDim.x - 1) resets the counter and stores e: the next kernel on the
// stream sees it. Every rank runs the same sequence of LL calls, so the
// epochs agree without any exchange, and a replayed graph keeps them in step
// (they live on the device). LL kernels of one rank must not run
// concurrently (they don't: collectives are ordered on the rank's stream).
//
// Why two parities suffice: rank A writes epoch e+2's lines into rank B's
// parity (e & 1) area only after A has finished call e+1, which needed B's
// call e+1 lines, which B wrote at the start of its call e+1, which stream
// order places after B's whole call e kernel (all of B's reads of parity
// e & 1 in call e) finished. So nothing B still has to read is overwritten.
// A stale line in the current parity carries an older epoch, != e (unless
// that line was last written 2^32 LL calls ago: never in practice).
//
// Per thread: lines i = first, first + stride, ... (the same mapping on every
// rank: a function of count and the grid only). Push: read the (up to) 8
// bytes of send at 8*i (never past P; the tail padded with zeros), store the
// line to [parity][rank][i] of every rank. Pull: for each of its lines, for
// s = 0..nranks-1, poll the own [parity][s][i] until both flags == e
// (%globaltimer checked every 1024 polls; on expiry record_timeout(p, 0)),
// reduce in rank order (16-bit floats in f32, rounded once: bit-identical
// on every rank, as the unicast one-shot), write the valid bytes to recv.
// In place (send == recv) is fine: a thread reads send[i] in the push,
// before it writes recv[i]. No end barrier: nothing reads another rank's
// user buffer.

NVLS_DEV void st_volatile_line(u64 a, u32 d0, u32 flag, u32 d1) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(d0), "r"(flag), "r"(d1), "r"(flag)
               : "memory");
}

NVLS_DEV void ld_volatile_line(u64 a, u32& d0, u32& f0, u32& d1, u32& f1) {
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(a) : "memory");
}

// ll_load8: the valid (1..8) bytes at a, little-endian, zero-padded. One
// 8-byte load when whole and aligned, else bytes (any alignment).
NVLS_DEV u64 ll_load8(u64 a, u64 valid) {
  if (valid == 8 && (a & 7) == 0) {
    u64 v;
    asm volatile("ld.global.b64 %0, [%1];" : "=l"(v) : "l"(a) : "memory");
    return v;
  }
  u64 v = 0;
  for (u64 k = 0; k < valid; k++) {
    u32 b;
    asm volatile("ld.global.u8 %0, [%1];" : "=r"(b) : "l"(a + k) : "memory");
    v |= (u64)(b & 0xff) << (8 * k);
  }
  return v;
}

NVLS_DEV void ll_store8(u64 a, u64 valid, u64 v) {
  if (valid == 8 && (a & 7) == 0) {
    st_b64(a, v);
    return;
  }
  for (u64 k = 0; k < valid; k++) st_u8(a + k, (u32)(v >> (8 * k)) & 0xff);
}

template <class D, class O>
static __device__ __forceinline__ void allreduce_ll(const nvls_params& p) {
  const u64 own = p.uc[p.rank];
  const bool abs = (p.flags & NVLS_FLAG_ABS_PTRS) != 0;
  const u64 send = abs ? p.send : own + p.send;
  const u64 recv = abs ? p.recv : own + p.recv;
  const u64 payload = p.count * D::E;
  const u64 lines = (payload + 7) / 8;
  const u64 nranks = p.nranks;
  u32 e;
  asm volatile("ld.global.b32 %0, [%1];" : "=r"(e) : "l"(own + NVLS_LL_OFFSET) : "memory");
  e += 1;
  if (e == 0) e = 2;
  const u64 cap = p.ll_lines;
  const u64 area = p.ll_area + (u64)(e & 1) * nranks * cap * NVLS_LL_LINE_BYTES;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;

  // Push.
  for (u64 i = first; i < lines; i += stride) {
    const u64 rest = payload - 8 * i;
    const u64 v = ll_load8(send + 8 * i, rest < 8 ? rest : 8);
    const u64 off = area + ((u64)p.rank * cap + i) * NVLS_LL_LINE_BYTES;
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)nranks) st_volatile_line(p.uc[r] + off, (u32)v, e, (u32)(v >> 32));
  }

  // Pull, reduce, write.
  const u64 deadline = deadline_of(p);
  bool failed = false;
  for (u64 i = first; i < lines && !failed; i += stride) {
    typename D::A acc[D::L / 2];
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++) {
      if (s >= (int)nranks || failed) continue;
      const u64 a = own + area + ((u64)s * cap + i) * NVLS_LL_LINE_BYTES;
      u32 d0, f0, d1, f1;
      for (u32 polls = 1;; polls++) {
        ld_volatile_line(a, d0, f0, d1, f1);
        if (f0 == e && f1 == e) break;
        if ((polls & 1023) == 0 && globaltimer() > deadline) {
          record_timeout(p, 0);
          failed = true;
          break;
        }
      }
      nvls_vec v;
      v.w[0] = d0;
      v.w[1] = d1;
      v.w[2] = 0;
      v.w[3] = 0;
#pragma unroll
      for (int k = 0; k < D::L / 2; k++) acc[k] = s == 0 ? D::get(v, k) : D::template op<O>(acc[k], D::get(v, k));
    }
    if (failed) break;
    nvls_vec out;
    out.w[0] = 0;
    out.w[1] = 0;
#pragma unroll
    for (int k = 0; k < D::L / 2; k++) D::put(out, k, acc[k]);
    const u64 rest = payload - 8 * i;
    ll_store8(recv + 8 * i, rest < 8 ? rest : 8, (u64)out.w[0] | ((u64)out.w[1] << 32));
  }

  // The last block done publishes the epoch (also after a timeout: the team
  // is unusable then anyway, and the counter stays consistent).
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    u32 old;
    asm volatile("atom.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(own + NVLS_LL_OFFSET + 4), "r"(1u) : "memory");
    if (old == gridDim.x - 1) {
      st_b32(own + NVLS_LL_OFFSET + 4, 0);
      st_b32(own + NVLS_LL_OFFSET, e);
    }
  }
}

#define NVLS_ALLREDUCE(TN, DT, ON, OP)                                                                          \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_allreduce_oneshot_##TN##_##ON(const struct nvls_params p) {                                         \
    allreduce_oneshot<DT, OP>(p);                                                                              \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_allreduce_twoshot_##TN##_##ON(const struct nvls_params p) {                                         \
    allreduce_twoshot<DT, OP>(p);                                                                              \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(NVLS_BLOCK_THREADS)                                             \
      nvls_allreduce_ll_##TN##_##ON(const struct nvls_params p) {                                              \
    allreduce_ll<DT, OP>(p);                                                                                   \
  }

NVLS_ALLREDUCE(f32, dt_f32, sum, op_sum)
NVLS_ALLREDUCE(f16, dt_f16, sum, op_sum)
NVLS_ALLREDUCE(f16, dt_f16, min, op_min)
NVLS_ALLREDUCE(f16, dt_f16, max, op_max)
NVLS_ALLREDUCE(bf16, dt_bf16, sum, op_sum)
NVLS_ALLREDUCE(bf16, dt_bf16, min, op_min)
NVLS_ALLREDUCE(bf16, dt_bf16, max, op_max)
NVLS_ALLREDUCE(s32, dt_s32, sum, op_sum)
NVLS_ALLREDUCE(s32, dt_s32, min, op_min)
NVLS_ALLREDUCE(s32, dt_s32, max, op_max)
NVLS_ALLREDUCE(u32, dt_u32, sum, op_sum)
NVLS_ALLREDUCE(u32, dt_u32, min, op_min)
NVLS_ALLREDUCE(u32, dt_u32, max, op_max)
NVLS_ALLREDUCE(u64, dt_u64, sum, op_sum)
NVLS_ALLREDUCE(u64, dt_u64, min, op_min)
NVLS_ALLREDUCE(u64, dt_u64, max, op_max)

#if !NVLS_MULTICAST
// multimem.ld_reduce has no f32 min/max: unicast only.
NVLS_ALLREDUCE(f32, dt_f32, min, op_min)
NVLS_ALLREDUCE(f32, dt_f32, max, op_max)
#endif
