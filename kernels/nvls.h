// nvls.h: the kernel ABI (shared with Go: internal/kabi's abi.go and params.go;
// internal/kabi/abi_test.go checks every #define NVLS_* below against its Go
// twin and struct nvls_params against kabi.Params) and the leaf operations, the
// only code in which the two flavors differ.
//
// Flavors (one source, two PTX files each):
//   NVLS_MULTICAST=1  data and barrier arrivals go through the multicast (MC)
//                     alias with multimem.* instructions (sm_90, PTX ISA 8.1;
//                     .acc::f32 needs 8.2).
//   NVLS_MULTICAST=0  the same kernels; each leaf loops over the peers' UC
//                     aliases in rank order 0..nranks-1, so every rank
//                     computes bit-identical results.
//
// Freestanding: no CUDA headers are included, so the files compile with
// `nvcc -ptx -arch=sm_90 -DNVLS_MULTICAST=0|1` and, for a local syntax check
// without a toolkit, with clang's CUDA front end and -nocudainc.

#ifndef NVLS_H
#define NVLS_H

#if !defined(NVLS_MULTICAST) || (NVLS_MULTICAST != 0 && NVLS_MULTICAST != 1)
#error "compile with -DNVLS_MULTICAST=1 (multicast flavor) or -DNVLS_MULTICAST=0 (unicast flavor)"
#endif

// ---------------------------------------------------------------------------
// The ABI. Plain decimal values: abi_test.go parses these lines.

#define NVLS_MAX_RANKS 8
#define NVLS_MAX_BLOCKS 256
#define NVLS_STATUS_OFFSET 0
#define NVLS_FAILED_OFFSET 128
#define NVLS_COUNTER_OFFSET 256
#define NVLS_EPOCH_OFFSET 4096
#define NVLS_PHASES 2
#define NVLS_SIGNAL_BYTES 65536
#define NVLS_STATUS_TIMEOUT 1
#define NVLS_STATUS_ABORTED 2
#define NVLS_STATUS_MISMATCH 3
#define NVLS_ARRIVE_OFFSET 32768
#define NVLS_HOST_DIAG_OFFSET 64
#define NVLS_PHASE_ENTRY 255
#define NVLS_OP_BARRIER 1
#define NVLS_OP_ALLREDUCE 2
#define NVLS_OP_BROADCAST 3
#define NVLS_OP_REDUCESCATTER 4
#define NVLS_OP_ALLGATHER 5
#define NVLS_OP_REDUCE 6
#define NVLS_BLOCK_THREADS 512
#define NVLS_VEC_BYTES 16
#define NVLS_PARAMS_SIZE 168
#define NVLS_LL_OFFSET 8192
#define NVLS_ROOT_SEND_OFFSET 16384
#define NVLS_LL_LINE_BYTES 16
#define NVLS_FLAG_ABS_PTRS 1
#define NVLS_FLAG_ABS_SEND 2
#define NVLS_FLAG_ABS_RECV 4
#define NVLS_FLAG_SLICED 8
#define NVLS_FLAG_LAUNCH_DEPENDENTS 16
#define NVLS_FLAG_PUSH 32
#define NVLS_PUSH_FLAG_OFFSET 20480
#define NVLS_PHASE_PUSH 2
#define NVLS_PUSH_VECS 4
// The push reduce's (the ring's) piece: NVLS_RING_CHUNKS chunks of blockDim x
// NVLS_RING_VECS vectors; its FIFO NVLS_PUSH_DEPTH rounds deep. An
// experiment may compile other values (scripts/ptx.sh's NVCC_FLAGS) where
// the piece's bytes stay (the host sizes the FIFO and grid from kabi's) or
// the depth shrinks (the FIFO then half used).
#ifndef NVLS_RING_VECS
#define NVLS_RING_VECS 4
#endif
#ifndef NVLS_RING_CHUNKS
#define NVLS_RING_CHUNKS 4
#endif
#ifndef NVLS_PUSH_DEPTH
#define NVLS_PUSH_DEPTH 2
#endif
#define NVLS_PUSH_FLAGS_BYTES 16384
#define NVLS_FLAG_ROOT_SLICE 64
#define NVLS_FLAG_ONE_PASS 128
#define NVLS_FLAG_LOCAL 512
#define NVLS_FLAG_PIECES 1024
#define NVLS_FLAG_LL_TWO 2048
#define NVLS_FLAG_LL 4096
#define NVLS_CE_PIECES 8
#define NVLS_CE_FLAG_OFFSET 24576

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;

// struct nvls_params is the one by-value parameter of every kernel. Each
// field means one thing in every kernel (0 where a kernel does not use it);
// kernels/params.go has the full contract. Offsets (send, recv, stage,
// ll_area) are bytes from the start of a rank's workspace allocation, the
// same on every rank, 16-byte aligned like the workspace bases. Exceptions:
// with NVLS_FLAG_ABS_PTRS (LL kernels), send and recv, with
// NVLS_FLAG_ABS_SEND (all-gather) send, with NVLS_FLAG_ABS_RECV
// (reduce-scatter, one-shot reduce) recv, are absolute addresses of memory
// of the launching device, any alignment: operands only the own rank
// touches.
//
// count is in elements, always: a kernel moves count * elem_bytes bytes.
//
// The LL all-reduce keeps, at NVLS_LL_OFFSET of the signal area, its u32
// epoch and, at NVLS_LL_OFFSET+4, the u32 count of its blocks that have
// read the epoch.
struct nvls_params {
  u64 mc;                   // MC alias of the workspace on this device; 0 in the unicast flavor
  u64 uc[NVLS_MAX_RANKS];   // UC base of rank p's workspace as mapped on this device; uc[rank] = own
  u64 send;                 // offset of the input (absolute: NVLS_FLAG_ABS_PTRS, _SEND)
  u64 recv;                 // offset of the output (absolute: NVLS_FLAG_ABS_PTRS, _RECV)
  u64 stage;                // one-shot all-reduce in place: offset of a staging area of count elements
  u64 ll_area;              // LL all-reduce: offset of the LL area
  u64 count;                // number of elements; 0: barriers only
  u64 timeout_ns;           // spin-wait deadline relative to kernel start; 0 = never time out
  u32 elem_bytes;           // bytes per element (typed kernels: their type's size)
  u32 ll_lines;             // LL all-reduce: the LL area's capacity in lines per parity and source
  u32 rank;                 // this rank
  u32 nranks;               // 1..NVLS_MAX_RANKS
  u32 root;                 // broadcast, reduce: the root rank
  u32 opcode;               // NVLS_OP_*: written into the status word on timeout
  u32 flags;                // NVLS_FLAG_*: which operands are absolute addresses; broadcast: sliced
  u32 check;                // the call's arguments as kabi.CheckArgs packs them; the same on every rank
  u64 host_status;          // device address of the rank's status word in mapped host memory; 0: none
  u64 call_count;           // the count of the whole call (a staged call launches chunks of it); 0: count
};

static_assert(sizeof(struct nvls_params) == NVLS_PARAMS_SIZE, "struct nvls_params size");

// ---------------------------------------------------------------------------
// Compiler shim: nvcc defines all of this; clang's CUDA front end with
// -nocudainc (used for local syntax checks only) does not.

#if defined(__clang__) && !defined(__NVCC__) && !defined(__CUDACC_RTC__)
#include <__clang_cuda_builtin_vars.h>  // threadIdx, blockIdx, ...; __syncthreads is a clang builtin
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((launch_bounds(n)))
#define __syncthreads_or(pred) __nvvm_bar0_or(pred)
#endif

#define NVLS_DEV static __device__ __forceinline__

// 16 bytes, handled as a bit pattern.
struct __attribute__((aligned(16))) nvls_vec {
  u32 w[4];
};

// ---------------------------------------------------------------------------
// Plain (UC) accesses. Peer memory is read with ld.relaxed.sys: morally
// strong, so after the barrier's acquire (thread 0) and __syncthreads it
// cannot return a value older than the peer's release, and it never hits a
// stale L1 line.

NVLS_DEV nvls_vec ld_peer_v4(u64 a) {
  nvls_vec v;
  asm volatile("ld.relaxed.sys.global.v4.b32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(a)
               : "memory");
  return v;
}

NVLS_DEV void st_v4(u64 a, nvls_vec v) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]),
               "r"(v.w[3])
               : "memory");
}

// Own memory: the stage this thread wrote (in-place copy), the root's send.
NVLS_DEV nvls_vec ld_own_v4(u64 a) {
  nvls_vec v;
  asm volatile("ld.global.v4.b32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(a)
               : "memory");
  return v;
}

NVLS_DEV u32 ld_own_u8(u64 a) {
  u32 v;
  asm volatile("ld.global.u8 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
  return v;
}
NVLS_DEV u16 ld_own_b16(u64 a) {
  u16 v;
  asm volatile("ld.global.b16 %0, [%1];" : "=h"(v) : "l"(a) : "memory");
  return v;
}
NVLS_DEV u32 ld_own_b32(u64 a) {
  u32 v;
  asm volatile("ld.global.b32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
  return v;
}
NVLS_DEV u64 ld_own_b64(u64 a) {
  u64 v;
  asm volatile("ld.global.b64 %0, [%1];" : "=l"(v) : "l"(a) : "memory");
  return v;
}

NVLS_DEV u32 ld_peer_u8(u64 a) {
  u32 v;
  asm volatile("ld.relaxed.sys.global.u8 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
  return v;
}
NVLS_DEV u16 ld_peer_b16(u64 a) {
  u16 v;
  asm volatile("ld.relaxed.sys.global.b16 %0, [%1];" : "=h"(v) : "l"(a) : "memory");
  return v;
}
NVLS_DEV u32 ld_peer_b32(u64 a) {
  u32 v;
  asm volatile("ld.relaxed.sys.global.b32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
  return v;
}
NVLS_DEV u64 ld_peer_b64(u64 a) {
  u64 v;
  asm volatile("ld.relaxed.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(a) : "memory");
  return v;
}
NVLS_DEV void st_u8(u64 a, u32 v) { asm volatile("st.global.u8 [%0], %1;" ::"l"(a), "r"(v) : "memory"); }
NVLS_DEV void st_b16(u64 a, u16 v) { asm volatile("st.global.b16 [%0], %1;" ::"l"(a), "h"(v) : "memory"); }
NVLS_DEV void st_b32(u64 a, u32 v) { asm volatile("st.global.b32 [%0], %1;" ::"l"(a), "r"(v) : "memory"); }
NVLS_DEV void st_b64(u64 a, u64 v) { asm volatile("st.global.b64 [%0], %1;" ::"l"(a), "l"(v) : "memory"); }

// Orders this thread's accesses through one alias (MC or UC) against its
// later accesses to the same memory through the other.
NVLS_DEV void fence_alias() {
#if NVLS_MULTICAST
  asm volatile("fence.proxy.alias;" ::: "memory");
#endif
}

NVLS_DEV u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// ---------------------------------------------------------------------------
// Number formats. 16-bit floats are widened to f32 (exact), reduced in f32
// and rounded once, to nearest even.

NVLS_DEV float f32_of_bits(u32 b) {
  float f;
  asm("mov.b32 %0, %1;" : "=f"(f) : "r"(b));
  return f;
}
NVLS_DEV u32 bits_of_f32(float f) {
  u32 b;
  asm("mov.b32 %0, %1;" : "=r"(b) : "f"(f));
  return b;
}

NVLS_DEV float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
NVLS_DEV u16 f32_to_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
NVLS_DEV float bf16_to_f32(u16 h) { return f32_of_bits((u32)h << 16); }
NVLS_DEV u16 f32_to_bf16(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

NVLS_DEV float fmin32(float a, float b) {
  float r;
  asm("min.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
NVLS_DEV float fmax32(float a, float b) {
  float r;
  asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// ---------------------------------------------------------------------------
// Reduction operators, on the accumulator types.

struct op_sum {
  NVLS_DEV float f(float a, float b) { return a + b; }
  NVLS_DEV u32 u(u32 a, u32 b) { return a + b; }
  NVLS_DEV u32 s(u32 a, u32 b) { return a + b; }  // two's complement: the same bits
  NVLS_DEV u64 u64op(u64 a, u64 b) { return a + b; }
};
struct op_min {
  NVLS_DEV float f(float a, float b) { return fmin32(a, b); }
  NVLS_DEV u32 u(u32 a, u32 b) { return a < b ? a : b; }
  NVLS_DEV u32 s(u32 a, u32 b) { return (s32)a < (s32)b ? a : b; }
  NVLS_DEV u64 u64op(u64 a, u64 b) { return a < b ? a : b; }
};
struct op_max {
  NVLS_DEV float f(float a, float b) { return fmax32(a, b); }
  NVLS_DEV u32 u(u32 a, u32 b) { return a > b ? a : b; }
  NVLS_DEV u32 s(u32 a, u32 b) { return (s32)a > (s32)b ? a : b; }
  NVLS_DEV u64 u64op(u64 a, u64 b) { return a > b ? a : b; }
};

// ---------------------------------------------------------------------------
// Element types. Each has: E (bytes per element), L (accumulator lanes per
// 16-byte vector), the accumulator type A, unpack/pack between a vector and
// its lanes, the scalar tail's load/store, and combine with an operator.

struct dt_f32 {
  enum { E = 4, L = 4 };
  typedef float A;
  NVLS_DEV A get(const nvls_vec& v, int i) { return f32_of_bits(v.w[i]); }
  NVLS_DEV void put(nvls_vec& v, int i, A a) { v.w[i] = bits_of_f32(a); }
  NVLS_DEV A load1(u64 a) { return f32_of_bits(ld_peer_b32(a)); }
  NVLS_DEV void store1(u64 a, A x) { st_b32(a, bits_of_f32(x)); }
  template <class O> NVLS_DEV A op(A a, A b) { return O::f(a, b); }
};
struct dt_f16 {
  enum { E = 2, L = 8 };
  typedef float A;
  NVLS_DEV A get(const nvls_vec& v, int i) { return f16_to_f32((u16)(v.w[i >> 1] >> (16 * (i & 1)))); }
  NVLS_DEV void put(nvls_vec& v, int i, A a) {
    u32 h = f32_to_f16(a);
    v.w[i >> 1] = (i & 1) ? ((v.w[i >> 1] & 0xffffu) | (h << 16)) : h;
  }
  NVLS_DEV A load1(u64 a) { return f16_to_f32(ld_peer_b16(a)); }
  NVLS_DEV void store1(u64 a, A x) { st_b16(a, f32_to_f16(x)); }
  template <class O> NVLS_DEV A op(A a, A b) { return O::f(a, b); }
};
struct dt_bf16 {
  enum { E = 2, L = 8 };
  typedef float A;
  NVLS_DEV A get(const nvls_vec& v, int i) { return bf16_to_f32((u16)(v.w[i >> 1] >> (16 * (i & 1)))); }
  NVLS_DEV void put(nvls_vec& v, int i, A a) {
    u32 h = f32_to_bf16(a);
    v.w[i >> 1] = (i & 1) ? ((v.w[i >> 1] & 0xffffu) | (h << 16)) : h;
  }
  NVLS_DEV A load1(u64 a) { return bf16_to_f32(ld_peer_b16(a)); }
  NVLS_DEV void store1(u64 a, A x) { st_b16(a, f32_to_bf16(x)); }
  template <class O> NVLS_DEV A op(A a, A b) { return O::f(a, b); }
};
struct dt_s32 {
  enum { E = 4, L = 4 };
  typedef u32 A;
  NVLS_DEV A get(const nvls_vec& v, int i) { return v.w[i]; }
  NVLS_DEV void put(nvls_vec& v, int i, A a) { v.w[i] = a; }
  NVLS_DEV A load1(u64 a) { return ld_peer_b32(a); }
  NVLS_DEV void store1(u64 a, A x) { st_b32(a, x); }
  template <class O> NVLS_DEV A op(A a, A b) { return O::s(a, b); }
};
struct dt_u32 {
  enum { E = 4, L = 4 };
  typedef u32 A;
  NVLS_DEV A get(const nvls_vec& v, int i) { return v.w[i]; }
  NVLS_DEV void put(nvls_vec& v, int i, A a) { v.w[i] = a; }
  NVLS_DEV A load1(u64 a) { return ld_peer_b32(a); }
  NVLS_DEV void store1(u64 a, A x) { st_b32(a, x); }
  template <class O> NVLS_DEV A op(A a, A b) { return O::u(a, b); }
};
struct dt_u64 {
  enum { E = 8, L = 2 };
  typedef u64 A;
  NVLS_DEV A get(const nvls_vec& v, int i) { return (u64)v.w[2 * i] | ((u64)v.w[2 * i + 1] << 32); }
  NVLS_DEV void put(nvls_vec& v, int i, A a) {
    v.w[2 * i] = (u32)a;
    v.w[2 * i + 1] = (u32)(a >> 32);
  }
  NVLS_DEV A load1(u64 a) { return ld_peer_b64(a); }
  NVLS_DEV void store1(u64 a, A x) { st_b64(a, x); }
  template <class O> NVLS_DEV A op(A a, A b) { return O::u64op(a, b); }
};

// ---------------------------------------------------------------------------
// Unicast leaves (also the scalar tail of the multicast flavor).

// uc_load_reduce: the 16-byte vector at offset off of every rank's
// workspace, reduced lane by lane in rank order 0..nranks-1.
template <class D, class O>
NVLS_DEV nvls_vec uc_load_reduce(const nvls_params& p, u64 off) {
  nvls_vec v[NVLS_MAX_RANKS];
  // Issue every load before reducing; constant indices keep v in registers.
#pragma unroll
  for (int r = 0; r < NVLS_MAX_RANKS; r++)
    if (r < (int)p.nranks) v[r] = ld_peer_v4(p.uc[r] + off);
  typename D::A acc[D::L];
#pragma unroll
  for (int i = 0; i < D::L; i++) acc[i] = D::get(v[0], i);
#pragma unroll
  for (int r = 1; r < NVLS_MAX_RANKS; r++)
    if (r < (int)p.nranks) {
#pragma unroll
      for (int i = 0; i < D::L; i++) acc[i] = D::template op<O>(acc[i], D::get(v[r], i));
    }
  nvls_vec out;
#pragma unroll
  for (int i = 0; i < D::L; i++) D::put(out, i, acc[i]);
  return out;
}

NVLS_DEV void uc_store_all(const nvls_params& p, u64 off, nvls_vec v) {
#pragma unroll
  for (int r = 0; r < NVLS_MAX_RANKS; r++)
    if (r < (int)p.nranks) st_v4(p.uc[r] + off, v);
}

// The scalar tail: one element at offset off, reduced in rank order.
template <class D, class O>
NVLS_DEV typename D::A uc_load_reduce1(const nvls_params& p, u64 off) {
  typename D::A acc = D::load1(p.uc[0] + off);
#pragma unroll
  for (int r = 1; r < NVLS_MAX_RANKS; r++)
    if (r < (int)p.nranks) acc = D::template op<O>(acc, D::load1(p.uc[r] + off));
  return acc;
}

// ---------------------------------------------------------------------------
// Multicast leaves.

#if NVLS_MULTICAST

// mc_load_reduce<D, O>(a): multimem.ld_reduce of the 16 bytes at MC address
// a. Floating point: one .v4 instruction. Integers have no vector forms:
// four 32-bit or two 64-bit scalar instructions.
template <class D, class O> struct mc_ld;

#define NVLS_MC_LD_V4(DT, OP, SUFFIX)                                                   \
  template <> struct mc_ld<DT, OP> {                                                    \
    NVLS_DEV nvls_vec run(u64 a) {                                                      \
      nvls_vec v;                                                                       \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." SUFFIX " {%0,%1,%2,%3}, [%4];" \
                   : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])            \
                   : "l"(a)                                                             \
                   : "memory");                                                         \
      return v;                                                                         \
    }                                                                                   \
  };

NVLS_MC_LD_V4(dt_f32, op_sum, "add.v4.f32")
NVLS_MC_LD_V4(dt_f16, op_sum, "add.acc::f32.v4.f16x2")
NVLS_MC_LD_V4(dt_f16, op_min, "min.v4.f16x2")
NVLS_MC_LD_V4(dt_f16, op_max, "max.v4.f16x2")
NVLS_MC_LD_V4(dt_bf16, op_sum, "add.acc::f32.v4.bf16x2")
NVLS_MC_LD_V4(dt_bf16, op_min, "min.v4.bf16x2")
NVLS_MC_LD_V4(dt_bf16, op_max, "max.v4.bf16x2")

#define NVLS_MC_LD_X32(DT, OP, SUFFIX)                                                                   \
  template <> struct mc_ld<DT, OP> {                                                                     \
    NVLS_DEV nvls_vec run(u64 a) {                                                                       \
      nvls_vec v;                                                                                        \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." SUFFIX " %0, [%1];" : "=r"(v.w[0]) : "l"(a) : "memory"); \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." SUFFIX " %0, [%1];"                          \
                   : "=r"(v.w[1])                                                                        \
                   : "l"(a + 4)                                                                          \
                   : "memory");                                                                          \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." SUFFIX " %0, [%1];"                          \
                   : "=r"(v.w[2])                                                                        \
                   : "l"(a + 8)                                                                          \
                   : "memory");                                                                          \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." SUFFIX " %0, [%1];"                          \
                   : "=r"(v.w[3])                                                                        \
                   : "l"(a + 12)                                                                         \
                   : "memory");                                                                          \
      return v;                                                                                          \
    }                                                                                                    \
  };

NVLS_MC_LD_X32(dt_s32, op_sum, "add.s32")
NVLS_MC_LD_X32(dt_s32, op_min, "min.s32")
NVLS_MC_LD_X32(dt_s32, op_max, "max.s32")
NVLS_MC_LD_X32(dt_u32, op_sum, "add.u32")
NVLS_MC_LD_X32(dt_u32, op_min, "min.u32")
NVLS_MC_LD_X32(dt_u32, op_max, "max.u32")

#define NVLS_MC_LD_X64(DT, OP, SUFFIX)                                             \
  template <> struct mc_ld<DT, OP> {                                               \
    NVLS_DEV nvls_vec run(u64 a) {                                                 \
      u64 x, y;                                                                    \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." SUFFIX " %0, [%1];"    \
                   : "=l"(x)                                                       \
                   : "l"(a)                                                        \
                   : "memory");                                                    \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." SUFFIX " %0, [%1];"    \
                   : "=l"(y)                                                       \
                   : "l"(a + 8)                                                    \
                   : "memory");                                                    \
      nvls_vec v;                                                                  \
      dt_u64::put(v, 0, x);                                                        \
      dt_u64::put(v, 1, y);                                                        \
      return v;                                                                    \
    }                                                                              \
  };

NVLS_MC_LD_X64(dt_u64, op_sum, "add.u64")
NVLS_MC_LD_X64(dt_u64, op_min, "min.u64")
NVLS_MC_LD_X64(dt_u64, op_max, "max.u64")

// 16 bytes into every rank's memory: the bits, whatever the element type.
NVLS_DEV void mc_store(u64 a, nvls_vec v) {
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(v.w[0]), "r"(v.w[1]),
               "r"(v.w[2]), "r"(v.w[3])
               : "memory");
}

#endif  // NVLS_MULTICAST

// ---------------------------------------------------------------------------
// The flavor-selected leaves the kernels use.

// load_reduce: the vector at offset off reduced over every rank.
template <class D, class O>
NVLS_DEV nvls_vec load_reduce(const nvls_params& p, u64 off) {
#if NVLS_MULTICAST
  return mc_ld<D, O>::run(p.mc + off);
#else
  return uc_load_reduce<D, O>(p, off);
#endif
}

// store_all: the vector v to offset off of every rank's workspace.
NVLS_DEV void store_all(const nvls_params& p, u64 off, nvls_vec v) {
#if NVLS_MULTICAST
  mc_store(p.mc + off, v);
#else
  uc_store_all(p, off, v);
#endif
}

// ---------------------------------------------------------------------------
// The barrier. Block b of every rank meets block b of every other rank on
// slot [phase][b]: arrive adds 1 to that slot's counter on every rank; wait
// polls the own counter until it reaches the own epoch + nranks (wrap-safe),
// then stores that target as the new epoch. Epochs live in the own
// workspace, are touched only by the own device, and are never reset.

// Every kernel's first statement. griddepcontrol.wait returns once the
// stream's previous kernel has finished and its writes are visible: at
// once for a kernel launched without programmatic stream serialization,
// which waits for that before it starts; with it (the host's PDL), the
// launch overlaps the previous kernel's end and nothing here reads what
// that kernel wrote before the wait. With NVLS_FLAG_LAUNCH_DEPENDENTS the
// kernel lets the stream's next kernel launch now (that one waits in its
// own kernel_entry): the launch latency hides behind this kernel's run.
NVLS_DEV void kernel_entry(const nvls_params& p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (p.flags & NVLS_FLAG_LAUNCH_DEPENDENTS) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The kernel's deadline, from %globaltimer at entry (thread 0 only uses it).
NVLS_DEV u64 deadline_of(const nvls_params& p) {
  if (p.timeout_ns == 0) return ~0ull;
  u64 now = globaltimer();
  u64 d = now + p.timeout_ns;
  return d < now ? ~0ull : d;
}

// ---------------------------------------------------------------------------
// Failure. A wait that runs out of time records its status word (own signal
// area, atomicCAS from 0, so the first failure's code stays) and, once it
// won that word, copies it to host_status (mapped host memory the host reads
// without a copy). It then marks the team failed: the first failure's code
// with the failing rank in bits 48-55 goes into the team-failed word
// (NVLS_FAILED_OFFSET) of every rank, through the UC aliases (CAS from 0).
// Every kernel checks the own team-failed word at entry (nvls_enter, or its
// start barrier) and in its spin-waits; one that finds it set records
// NVLS_STATUS_ABORTED (never over an earlier code) and returns, so that the
// collectives queued behind a failure drain in about one timeout.

NVLS_DEV u64 status_code(const nvls_params& p, u32 kind, u32 phase) {
  return (u64)kind | ((u64)(p.opcode & 0xff) << 8) | ((u64)(phase & 0xff) << 16) | ((u64)(blockIdx.x & 0xffff) << 32);
}

NVLS_DEV u64 cas_b64(u64 a, u64 expect, u64 v) {
  u64 old;
  asm volatile("atom.relaxed.sys.global.cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "l"(a), "l"(expect), "l"(v) : "memory");
  return old;
}

// record_status: code into the own status word if it is still 0, and then
// into the host's copy. A plain 8-byte store to host memory: PCIe atomics to
// host memory are not available everywhere, and only the CAS's winner writes.
// diag (a mismatch: the arrival word of every rank, 0 where unknown) goes to
// the host first, at NVLS_HOST_DIAG_OFFSET, fenced before the code.
NVLS_DEV void record_status(const nvls_params& p, u64 code, const u64* diag = nullptr) {
  if (cas_b64(p.uc[p.rank] + NVLS_STATUS_OFFSET, 0, code) != 0 || p.host_status == 0) return;
  if (diag != nullptr) {
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks)
        asm volatile("st.relaxed.sys.global.b64 [%0], %1;" ::"l"(p.host_status + NVLS_HOST_DIAG_OFFSET + 8 * r), "l"(diag[r])
                     : "memory");
    asm volatile("fence.acq_rel.sys;" ::: "memory");
  }
  asm volatile("st.relaxed.sys.global.b64 [%0], %1;" ::"l"(p.host_status), "l"(code) : "memory");
}

// team_failed: the own team-failed word (0: no rank failed).
NVLS_DEV u64 team_failed(const nvls_params& p) {
  u64 v;
  asm volatile("ld.relaxed.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(p.uc[p.rank] + NVLS_FAILED_OFFSET) : "memory");
  return v;
}

// fail_team: the first failure's code, with this rank in bits 48-55, into
// the team-failed word of every rank (CAS from 0).
NVLS_DEV void fail_team(const nvls_params& p, u64 code) {
  const u64 failed = code | ((u64)(p.rank & 0xff) << 48);
#pragma unroll
  for (int r = 0; r < NVLS_MAX_RANKS; r++)
    if (r < (int)p.nranks) cas_b64(p.uc[r] + NVLS_FAILED_OFFSET, 0, failed);
}

NVLS_DEV void record_timeout(const nvls_params& p, u32 phase) {
  const u64 code = status_code(p, NVLS_STATUS_TIMEOUT, phase);
  record_status(p, code);
  fail_team(p, code);
}

// record_mismatch: the ranks' arrival words (diag) disagree in their check
// half: this rank records it, with every word, and fails the team.
NVLS_DEV void record_mismatch(const nvls_params& p, u32 phase, const u64* diag) {
  const u64 code = status_code(p, NVLS_STATUS_MISMATCH, phase);
  record_status(p, code, diag);
  fail_team(p, code);
}

// record_abort: this block gave up in phase (NVLS_PHASE_ENTRY: before any
// wait) because the team had failed (failed: the team-failed word): the
// failing rank goes into bits 48-55, the kind of its failure into 24-31.
NVLS_DEV void record_abort(const nvls_params& p, u32 phase, u64 failed) {
  record_status(p, status_code(p, NVLS_STATUS_ABORTED, phase) | (failed & (0xffull << 48)) | ((failed & 0xff) << 24));
}

// nvls_enter: the entry check of a kernel that does not start with a
// barrier (which checks the same itself), per thread: false when the team
// has failed, and then this thread recorded that it gave up and must do
// nothing more of the collective (it still reaches the kernel's
// __syncthreads). Every thread that gives up records it, so that no block
// leaves work undone without a status: the threads of a block may see the
// word at different times.
NVLS_DEV bool nvls_enter(const nvls_params& p) {
  const u64 f = team_failed(p);
  if (f == 0) return true;
  record_abort(p, NVLS_PHASE_ENTRY, f);
  return false;
}

// ce_piece_start: where piece i (0 to NVLS_CE_PIECES) of a pipelined
// copy-engine reduce of count elements starts (NVLS_FLAG_PIECES): count -
// count >> i in whole vectors of per elements; count past the last
// (kabi.CEPieceStart computes the same).
NVLS_DEV u64 ce_piece_start(u32 i, u64 count, u64 per) {
  if (i == 0) return 0;
  if (i >= NVLS_CE_PIECES) return count;
  return (count - (count >> i)) / per * per;
}

// ---------------------------------------------------------------------------
// The barrier (continued).

// barrier_wait: thread 0's poll of the own counter until target (wrap-safe
// at or past it; exact: equal to it, for words that hold a sequence number
// rather than grow towards one); false (status recorded) on the deadline or
// when the team failed meanwhile (checked every 64 polls).
NVLS_DEV bool barrier_wait(const nvls_params& p, u32 phase, u64 deadline, u64 counter, u32 target, bool exact = false) {
  for (u32 polls = 1;; polls++) {
    u32 got;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(got) : "l"(counter) : "memory");
    if (exact ? got == target : (s32)(got - target) >= 0) return true;
    if ((polls & 63) == 0) {
      if (globaltimer() > deadline) {
        record_timeout(p, phase);
        return false;
      }
      const u64 f = team_failed(p);
      if (f != 0) {
        record_abort(p, phase, f);
        return false;
      }
    }
  }
}

// ce_piece_ready: whether piece i (ce_piece_start) of every source but
// this rank has landed in its memory (NVLS_FLAG_PIECES): thread q <
// nranks, q != rank, polls flag word [i][q] at NVLS_CE_FLAG_OFFSET until
// it equals seq, the own start-barrier sequence word, which rank q's copy
// engine wrote there (its own word, set by the same barrier) after the
// piece; every thread of the block gets the answer. False (status
// recorded) on the deadline or when the team failed.
NVLS_DEV bool ce_piece_ready(const nvls_params& p, u32 i, u32 seq) {
  __shared__ u32 s_bad;
  if (threadIdx.x == 0) s_bad = 0;
  __syncthreads();
  const u32 q = threadIdx.x;
  if (q < p.nranks && q != p.rank &&
      !barrier_wait(p, 1, deadline_of(p), p.uc[p.rank] + NVLS_CE_FLAG_OFFSET + 4 * ((u64)i * NVLS_MAX_RANKS + q), seq, true))
    s_bad = 1;
  __syncthreads();
  const bool ok = s_bad == 0;
  __syncthreads();  // read by all before the next call writes it
  return ok;
}

// The start barrier (phase 0) carries the call's arguments: block b of
// every rank stores its arrival word {seq, call_word} (seq: the block's
// count of start barriers, kept in its epoch slot [0][b]; its low 8 bits go
// into the word) into slot [seq & 1][b][rank] of every rank's
// NVLS_ARRIVE_OFFSET words, and
// thread r < nranks polls the own slot [seq & 1][b][r] until it holds this
// seq. Two parities suffice: a rank stores seq + 2 into a slot only after
// passing start barrier seq + 1 of that block, which needed this rank's
// arrival there, which came after this rank finished polling seq. A
// call_word that differs from the own one is recorded as
// NVLS_STATUS_MISMATCH with every rank's word (in the host's status area,
// at NVLS_HOST_DIAG_OFFSET), instead of running a collective whose ranks disagree
// (every rank's block 0 sees every word, so every rank records it; other
// blocks, whose peers' grids may be smaller, give up quietly on a
// mismatch-failed team and leave the record to block 0, which itself keeps
// waiting for the words while its own status is clear). LL kernels store
// the arrival word of block 0 too (ll_collective), so that a rank running
// a barrier kernel against one running LL (counts either side of the LL
// limit) sees the difference.
//
// The arrival is relaxed: the kernel has written nothing a peer will read
// (what earlier work on the stream wrote is in the owner's memory, where
// the peers' loads find it, once that work completed), so it needs no
// sys-scope release, whose cost grows with the number of blocks that pay
// it (run 20). A kernel that writes for its peers before its start barrier
// fences first, on thread 0, which stores the arrival (the sliced
// broadcast's root). Each polling thread's load is an acquire.
//
// The end barrier (phase 1) counts: block b adds 1 to counter [1][b] of
// every rank and thread 0 polls the own counter until the own epoch
// [1][b] + nranks (wrap-safe), then stores that as the new epoch. Its
// arrival releases this block's stores to the peers: one fence.acq_rel.sys,
// then relaxed adds (the unicast flavor), or one multimem.red.release.
//
// barrier returns true when every rank's block blockIdx.x arrived, false
// when the deadline passed first, the team failed or the arguments differ
// (the status word then says so). Every thread of the block must call it
// (phase 0: at least nranks threads); all get the same answer. The
// team-failed word is read right after arriving (an arrival on a failed
// team does no harm: its slots are out of step for good); a kernel that
// starts with its barrier needs no other entry check.
//
// Multicast flavor: every thread fences the alias proxies on entry and on
// exit, so that its earlier UC accesses are ordered before the MC arrival
// (and the peers' MC accesses after it), and the MC accesses that follow the
// barrier are ordered after the UC acquire.

// call_word: the call's arguments, 56 bits: params.check (opcode, dtype,
// operator, root: kabi.CheckArgs) in bits 40-50, the call's count
// (call_count, else count) folded to 40 bits below, so that the ranks of a
// staged call whose counts differ disagree at its first chunk. An arrival word adds the low 8 bits of seq in bits 56-63.
NVLS_DEV u64 call_word(const nvls_params& p) {
  const u64 mask = (1ull << 40) - 1;
  const u64 n = p.call_count != 0 ? p.call_count : p.count;
  return ((u64)p.check << 40) | ((n ^ (n >> 40)) & mask);
}

// ll_check: the arguments as the LL lines carry them, 32 bits: check in
// bits 21-31, the low 21 bits of the folded count below (LL payloads are
// far smaller than 2^21 elements).
NVLS_DEV u32 ll_check(const nvls_params& p) { return (p.check << 21) | ((u32)call_word(p) & ((1u << 21) - 1)); }

NVLS_DEV u32 next_seq(u32 prev) {
  const u32 s = prev + 1;
  return s == 0 ? 2 : s;  // 0 is a zeroed slot's; 2 keeps the parity alternating
}

// arrive_slots: the offset of the arrival words [seq & 1][block][*].
NVLS_DEV u64 arrive_slots(u32 seq, u32 block) {
  return NVLS_ARRIVE_OFFSET + ((u64)(seq & 1) * NVLS_MAX_BLOCKS + block) * NVLS_MAX_RANKS * 8;
}

// arrive_start: one thread stores word into slot [rank] of the slots at
// offset slots on every rank: one multimem.st, or a relaxed store per rank
// (uc: also in the multicast flavor, for the LL kernels, which stay off MC).
NVLS_DEV void arrive_start(const nvls_params& p, u64 slots, u64 word, bool uc) {
#if NVLS_MULTICAST
  if (!uc) {
    asm volatile("multimem.st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p.mc + slots + 8 * (u64)p.rank), "l"(word)
                 : "memory");
    fence_alias();
    return;
  }
#endif
#pragma unroll
  for (int r = 0; r < NVLS_MAX_RANKS; r++)
    if (r < (int)p.nranks)
      asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p.uc[r] + slots + 8 * (u64)p.rank), "l"(word) : "memory");
}

// own_status: the own status word (0 while this rank recorded nothing).
NVLS_DEV u64 own_status(const nvls_params& p) {
  u64 v;
  asm volatile("ld.relaxed.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(p.uc[p.rank] + NVLS_STATUS_OFFSET) : "memory");
  return v;
}

// Outcomes of a start-barrier poll (start_barrier's s_state).
enum { START_OK = 0, START_TIMEOUT = 1, START_ABORT = 2, START_QUIET = 3 };

// start_giveup: what a start-barrier poll does on team-failed word f != 0:
// START_OK (keep polling: block 0, a mismatch this rank has yet to record),
// START_QUIET (another block, a mismatch: block 0 records it) or
// START_ABORT.
NVLS_DEV u32 start_giveup(const nvls_params& p, u64 f) {
  if ((f & 0xff) != NVLS_STATUS_MISMATCH) return START_ABORT;
  if (blockIdx.x != 0) return START_QUIET;
  return own_status(p) == 0 ? START_OK : START_ABORT;
}

NVLS_DEV bool start_barrier(const nvls_params& p, u64 deadline) {
  __shared__ u32 s_seq, s_failed;
  __shared__ u64 s_deadline, s_team;
  __shared__ u64 s_words[NVLS_MAX_RANKS];
  __shared__ u32 s_state[NVLS_MAX_RANKS];
  const u64 own = p.uc[p.rank];
  fence_alias();
  __syncthreads();
  if (threadIdx.x == 0) {
    const u32 seq = next_seq(ld_own_b32(own + NVLS_EPOCH_OFFSET + 4 * (u64)blockIdx.x));
    arrive_start(p, arrive_slots(seq, blockIdx.x), ((u64)(seq & 0xff) << 56) | call_word(p), false);
    s_seq = seq;
    s_deadline = deadline;
    s_team = team_failed(p);  // its load overlaps the stores
  }
  __syncthreads();
  const u32 seq = s_seq;
  if (threadIdx.x < p.nranks) {
    const u32 t = threadIdx.x;
    const u64 a = own + arrive_slots(seq, blockIdx.x) + 8 * (u64)t;
    u32 state = s_team == 0 ? START_OK : start_giveup(p, s_team);
    for (u32 polls = 1; state == START_OK; polls++) {
      u64 w;
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(w) : "l"(a) : "memory");
      if ((u32)(w >> 56) == (seq & 0xff)) {
        s_words[t] = w;
        break;
      }
      if ((polls & 63) != 0) continue;
      if (globaltimer() > s_deadline) {
        state = START_TIMEOUT;
        break;
      }
      const u64 f = team_failed(p);
      if (f == 0 || (state = start_giveup(p, f)) == START_OK) continue;
      if (state == START_ABORT) s_team = f;  // any failing thread's word will do
      break;
    }
    s_state[t] = state;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    u32 worst = START_OK;
    for (u32 t = 0; t < p.nranks; t++)
      if (s_state[t] != START_OK && (worst == START_OK || s_state[t] == START_TIMEOUT)) worst = s_state[t];
    bool same = true;
    if (worst == START_OK)
      for (u32 t = 0; t < p.nranks; t++) same = same && (s_words[t] << 8) == (call_word(p) << 8);
    if (worst == START_TIMEOUT) {
      record_timeout(p, 0);
    } else if (worst == START_ABORT) {
      record_abort(p, 0, s_team);
    } else if (worst == START_OK && !same) {
      record_mismatch(p, 0, s_words);
    } else if (worst == START_OK) {
      st_b32(own + NVLS_EPOCH_OFFSET + 4 * (u64)blockIdx.x, seq);
    }
    s_failed = worst != START_OK || !same;
  }
  __syncthreads();
  fence_alias();
  return s_failed == 0;
}

NVLS_DEV bool barrier(const nvls_params& p, u32 phase, u64 deadline) {
  if (phase == 0) return start_barrier(p, deadline);
  __shared__ u32 s_failed;
  fence_alias();
  __syncthreads();
  if (threadIdx.x == 0) {
    const u64 slot = (u64)(phase * NVLS_MAX_BLOCKS + blockIdx.x) * 4;
#if NVLS_MULTICAST
    asm volatile("multimem.red.release.sys.global.add.u32 [%0], %1;" ::"l"(p.mc + NVLS_COUNTER_OFFSET + slot), "r"(1u)
                 : "memory");
    fence_alias();
#else
    // One release for all the peers: a fence and relaxed adds (the PTX
    // release pattern), not a release add per peer, each of which would
    // fence again.
    asm volatile("fence.acq_rel.sys;" ::: "memory");
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks)
        asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p.uc[r] + NVLS_COUNTER_OFFSET + slot), "r"(1u)
                     : "memory");
#endif
    const u64 own = p.uc[p.rank];
    u32 epoch;
    asm volatile("ld.global.b32 %0, [%1];" : "=r"(epoch) : "l"(own + NVLS_EPOCH_OFFSET + slot) : "memory");
    const u64 f = team_failed(p);
    const u32 target = epoch + p.nranks;
    u32 failed = 1;
    if (f != 0) {
      record_abort(p, phase, f);
    } else if (barrier_wait(p, phase, deadline, own + NVLS_COUNTER_OFFSET + slot, target)) {
      st_b32(own + NVLS_EPOCH_OFFSET + slot, target);
      failed = 0;
    }
    s_failed = failed;
  }
  __syncthreads();
  fence_alias();
  return s_failed == 0;
}

// ---------------------------------------------------------------------------
// The element type and operator pairs every typed collective instantiates:
// NVLS_TYPE_OPS(X) expands X(type name, dt_*, operator name, op_*) for each
// pair the flavor has (kernels.Supported): all 18 in the unicast flavor;
// in the multicast flavor those multimem.ld_reduce has (no f32 min/max).
// kernels/names_test.go reads these lines.

#define NVLS_TYPE_OPS(X)          \
  X(f32, dt_f32, sum, op_sum)     \
  X(f16, dt_f16, sum, op_sum)     \
  X(f16, dt_f16, min, op_min)     \
  X(f16, dt_f16, max, op_max)     \
  X(bf16, dt_bf16, sum, op_sum)   \
  X(bf16, dt_bf16, min, op_min)   \
  X(bf16, dt_bf16, max, op_max)   \
  X(s32, dt_s32, sum, op_sum)     \
  X(s32, dt_s32, min, op_min)     \
  X(s32, dt_s32, max, op_max)     \
  X(u32, dt_u32, sum, op_sum)     \
  X(u32, dt_u32, min, op_min)     \
  X(u32, dt_u32, max, op_max)     \
  X(u64, dt_u64, sum, op_sum)     \
  X(u64, dt_u64, min, op_min)     \
  X(u64, dt_u64, max, op_max)     \
  NVLS_TYPE_OPS_UNICAST_ONLY(X)

#if NVLS_MULTICAST
#define NVLS_TYPE_OPS_UNICAST_ONLY(X)
#else
#define NVLS_TYPE_OPS_UNICAST_ONLY(X) \
  X(f32, dt_f32, min, op_min)         \
  X(f32, dt_f32, max, op_max)
#endif

// ---------------------------------------------------------------------------
// Own memory at any alignment (the absolute operands, NVLS_FLAG_ABS_*): the
// widest accesses the address and the length allow.

NVLS_DEV u64 min_u64(u64 a, u64 b) { return a < b ? a : b; }

// ld_bytes: the n (1..8) bytes at a, little-endian, zero-padded.
NVLS_DEV u64 ld_bytes(u64 a, u32 n) {
  if (n == 8 && (a & 7) == 0) return ld_own_b64(a);
  const u32 w = ((a | n) & 1) ? 1 : ((a | n) & 3) ? 2 : 4;
  u64 v = 0;
  for (u32 k = 0; k < n; k += w) {
    const u64 x = w == 4 ? ld_own_b32(a + k) : w == 2 ? ld_own_b16(a + k) : ld_own_u8(a + k);
    v |= x << (8 * k);
  }
  return v;
}

// st_bytes: the low n (1..8) bytes of v to a, little-endian.
NVLS_DEV void st_bytes(u64 a, u64 v, u32 n) {
  if (n == 8 && (a & 7) == 0) {
    st_b64(a, v);
    return;
  }
  const u32 w = ((a | n) & 1) ? 1 : ((a | n) & 3) ? 2 : 4;
  for (u32 k = 0; k < n; k += w) {
    const u64 x = v >> (8 * k);
    if (w == 4) {
      st_b32(a + k, (u32)x);
    } else if (w == 2) {
      st_b16(a + k, (u16)x);
    } else {
      st_u8(a + k, (u32)x & 0xff);
    }
  }
}

NVLS_DEV nvls_vec ld_any_v4(u64 a) {
  if ((a & 15) == 0) return ld_own_v4(a);
  const u64 lo = ld_bytes(a, 8), hi = ld_bytes(a + 8, 8);
  nvls_vec v;
  v.w[0] = (u32)lo;
  v.w[1] = (u32)(lo >> 32);
  v.w[2] = (u32)hi;
  v.w[3] = (u32)(hi >> 32);
  return v;
}

NVLS_DEV void st_any_v4(u64 a, nvls_vec v) {
  if ((a & 15) == 0) {
    st_v4(a, v);
    return;
  }
  st_bytes(a, (u64)v.w[0] | ((u64)v.w[1] << 32), 8);
  st_bytes(a + 8, (u64)v.w[2] | ((u64)v.w[3] << 32), 8);
}

// store1_any: one element of type D at a, any alignment.
template <class D>
NVLS_DEV void store1_any(u64 a, typename D::A x) {
  nvls_vec t;
  t.w[0] = 0;
  t.w[1] = 0;
  D::put(t, 0, x);
  st_bytes(a, (u64)t.w[0] | ((u64)t.w[1] << 32), D::E);
}

// ---------------------------------------------------------------------------
// Spans: the data movement of the one-pass kernels, grid-stride over the
// 16-byte vectors of a span, every thread of the grid taking part; the
// scalar head and tail (fewer than a vector's worth each) in block 0.

// reduce_span<D, O>: the n elements at workspace offset src (the same on
// every rank, element-aligned), reduced over every rank (load_reduce), to
// dst, an address on this device or a peer's, any alignment. The vectors
// start where src is 16-byte aligned (multimem needs it); the head before
// and the tail after go through the unicast leaves. In place (dst is this
// rank's own src), the multicast flavor fences the alias proxies between
// each MC load and the UC store of the same bytes.
template <class D, class O>
NVLS_DEV void reduce_span(const nvls_params& p, u64 src, u64 dst, u64 n) {
  const u64 per = NVLS_VEC_BYTES / D::E;
  const u64 head = min_u64(n, ((NVLS_VEC_BYTES - (src & 15)) & 15) / D::E);
  const u64 nvec = (n - head) / per;
  const u64 tail = n - head - nvec * per;
  const u64 body = head * D::E;
  const bool aligned = ((dst + body) & 15) == 0;
  const bool in_place = dst == p.uc[p.rank] + src;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += stride) {
    const u64 off = body + v * NVLS_VEC_BYTES;
    const nvls_vec x = load_reduce<D, O>(p, src + off);
    if (in_place) fence_alias();
    if (aligned) {
      st_v4(dst + off, x);
    } else {
      st_any_v4(dst + off, x);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < head + tail) {
    const u64 t = threadIdx.x;
    const u64 off = t < head ? t * D::E : body + nvec * NVLS_VEC_BYTES + (t - head) * D::E;
    store1_any<D>(dst + off, uc_load_reduce1<D, O>(p, src + off));
  }
}

// local_reduce<D, O>: the NVLS_FLAG_LOCAL reduce of the reduce-scatter and
// the reduce: count elements from this rank's own memory into recv,
// through q (p with per-source bases q.uc[r] such that q.uc[r] + send is
// source r); with NVLS_FLAG_PIECES piece by piece as they land
// (ce_piece_start, ce_piece_ready). No barrier.
template <class D, class O>
NVLS_DEV void local_reduce(const nvls_params& p, const nvls_params& q, u64 recv) {
  if (!(p.flags & NVLS_FLAG_PIECES)) {
    reduce_span<D, O>(q, p.send, recv, p.count);
    return;
  }
  const u32 seq = ld_own_b32(p.uc[p.rank] + NVLS_EPOCH_OFFSET);
  const u64 per = NVLS_VEC_BYTES / D::E;
  for (u32 i = 0; i < NVLS_CE_PIECES; i++) {
    if (!ce_piece_ready(p, i, seq)) return;
    const u64 lo = ce_piece_start(i, p.count, per), hi = ce_piece_start(i + 1, p.count, per);
    reduce_span<D, O>(q, p.send + lo * D::E, recv + lo * D::E, hi - lo);
  }
}

// copy_span: the n bytes at src (an address on this device, any
// alignment) to workspace offset dst of every rank (store_all: one
// multimem.st, or a store to each rank). The vectors start where dst is
// 16-byte aligned; the head and tail bytes go to each rank's UC alias.
NVLS_DEV void copy_span(const nvls_params& p, u64 src, u64 dst, u64 n) {
  const u64 head = min_u64(n, (NVLS_VEC_BYTES - (dst & 15)) & 15);
  const u64 nvec = (n - head) / NVLS_VEC_BYTES;
  const u64 tail = n - head - nvec * NVLS_VEC_BYTES;
  const bool aligned = ((src + head) & 15) == 0;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += stride) {
    const u64 off = head + v * NVLS_VEC_BYTES;
    store_all(p, dst + off, aligned ? ld_own_v4(src + off) : ld_any_v4(src + off));
  }
  if (blockIdx.x == 0 && threadIdx.x < head + tail) {
    const u64 t = threadIdx.x;
    const u64 off = t < head ? t : head + nvec * NVLS_VEC_BYTES + (t - head);
    const u32 b = ld_own_u8(src + off);
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)p.nranks) st_u8(p.uc[r] + dst + off, b);
  }
}

// ---------------------------------------------------------------------------
// LL (low latency): a Lamport-style push with the flag inside the data, for
// small payloads, for every collective that has it (ll_collective's K). No
// barrier, no fence: each rank stores its lines, 16 bytes {data0, e, data1,
// e ^ check} with 8 payload bytes (e: the call's epoch, check:
// params.check), into an LL area of every rank, then polls its own area
// until every rank's lines of this call carry both flags. A 16-byte
// st.volatile.global.v4.u32 is seen whole by a 16-byte
// ld.volatile.global.v4.u32 (as NCCL's LL protocol relies on), so a line
// whose two flags match holds its data; one that keeps e with another check
// comes from a rank that called with other arguments (ll_wait).
//
// What a rank pushes and what it makes of what it pulls (P = the payload
// per source, count elements):
//   LL_ALLREDUCE      pushes its send to every rank; reduces every source's
//                     lines into recv.
//   LL_REDUCESCATTER  pushes slice r of its send (P bytes at r * P) to rank
//                     r; reduces every source's lines (its own slice) into
//                     recv.
//   LL_ALLGATHER      pushes its send to every rank; copies source s's
//                     lines to recv + s * P (no reduction; elem_bytes sizes
//                     the payload).
//   LL_REDUCE         as LL_ALLREDUCE, but only the root writes recv. The
//                     others still poll: that is what keeps a fast rank
//                     from overwriting lines its peers have yet to read
//                     (below), so every rank pushes to and pulls from every
//                     rank in every kind.
//   LL_REDUCE with NVLS_FLAG_LL_TWO: in two steps. The L lines split into
//                     nranks slices of L1 = ceil(L / nranks) lines (the
//                     last shorter or empty); slice q's lines go to rank q
//                     (lines 0..L1-1 of its source slot), which reduces
//                     them, as LL_REDUCESCATTER; then every rank but the
//                     root pushes its reduced lines to the root (lines
//                     L1..2 L1 - 1 of its slot there), and the root writes
//                     its own slice and copies the others' to recv. Each
//                     rank then sends and receives 2 (nranks - 1) / nranks
//                     of the payload instead of nranks - 1 times it; the
//                     slot holds 2 L1 <= C lines (the host's limit).
//
// UC accesses only, in both flavors (the multicast flavor has the UC
// pointers too): no multimem, and no fence.proxy.alias, since the kernel
// never touches the MC alias.
//
// Layout: ll_area = the workspace offset of the LL area (the same on every
// rank), ll_lines = its capacity C in lines: [2 parities][nranks sources][C
// lines] of 16 bytes; a call uses lines 0..L-1 of each, L = ceil(P/8) <= C.
// A slot's place depends on C, never on L: with L in the layout, a fast
// rank's next call (other parity, other size) could land on lines a slow
// rank has yet to read in this one.
//
// Epochs: one u32 per rank at NVLS_LL_OFFSET, touched by its own device
// only, shared by every LL kernel. Every thread reads it at entry; this
// call's epoch e is that + 1, skipping 0 (stale lines of a zeroed area have
// flag 0) to 2, so that the parity keeps alternating across the wrap
// (0xffffffff is odd, 2 even). With one block, its thread 0 stores e at
// the end. With more, each block counts itself at entry, once all its
// threads have read the epoch (the atomic add on the counter at
// NVLS_LL_OFFSET+4, whose result waits until the end: its round trip is
// off the critical path); the block that counted last resets the counter
// and stores e at its end: every block has read the old epoch by then, and
// the next kernel on the stream sees the new one. Every rank
// runs the same sequence of LL calls, so the epochs agree without any
// exchange, and a replayed graph keeps them in step (they live on the
// device). LL kernels of one rank must not run concurrently (they don't:
// collectives are ordered on the rank's stream).
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
// bytes of the payload at 8*i (never past P; the tail padded with zeros),
// store the line to [parity][rank][i] of every rank. Pull: for each of its
// lines, load the own [parity][s][i] of every s at once, then, for each s =
// 0..nranks-1 whose line was not there yet, poll it until its flags are e
// and e ^ check (%globaltimer and the team-failed word checked every
// 1024 polls; on expiry record_timeout(p, 0), on a failed team
// record_abort(p, 0, ...), on another check record_mismatch),
// then reduce in rank order (16-bit floats in f32, rounded once:
// bit-identical on every rank, as the unicast one-shot) or copy, and write
// the valid bytes. In place is fine: a thread reads the input bytes of its
// lines in the push, before it writes the output bytes of the same lines
// (reduce-scatter: recv = slice rank of send; all-gather: send = slot rank
// of recv, rewritten with the same bytes). No end barrier: nothing reads
// another rank's user buffer. Having no start barrier either, every thread
// checks the team at entry (nvls_enter) and, finding it failed, pushes and
// pulls nothing.

enum ll_kind { LL_ALLREDUCE, LL_REDUCESCATTER, LL_ALLGATHER, LL_REDUCE };

NVLS_DEV void st_volatile_line(u64 a, u32 d0, u32 f0, u32 d1, u32 f1) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(d0), "r"(f0), "r"(d1), "r"(f1) : "memory");
}

NVLS_DEV void ld_volatile_line(u64 a, u32& d0, u32& f0, u32& d1, u32& f1) {
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(a) : "memory");
}

// ll_wait waits until the lines of the sources in pending (a bit a
// source; source s's line at a + s * stride) carry epoch e and e ^ check,
// loading every pending line each round, all in flight together: the wait
// ends one load after the last line arrives, not one load a source after
// the source before it. The lines' words are left in d0, f0, d1, f1.
// false when the deadline passed or the team failed first (both checked
// every 1024 rounds), or when a line carries e with another check 64
// times: that source called with other arguments (NVLS_STATUS_MISMATCH,
// with the two ranks' checks). The status word says which.
NVLS_DEV bool ll_wait(const nvls_params& p, u64 a, u64 stride, u32 pending, u32 e, u64 deadline, u32 (&d0)[NVLS_MAX_RANKS],
                      u32 (&f0)[NVLS_MAX_RANKS], u32 (&d1)[NVLS_MAX_RANKS], u32 (&f1)[NVLS_MAX_RANKS]) {
  const u32 want = e ^ ll_check(p);
  u32 other[NVLS_MAX_RANKS] = {};
  for (u32 rounds = 1; pending != 0; rounds++) {
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++)
      if (pending & (1u << s)) ld_volatile_line(a + (u64)s * stride, d0[s], f0[s], d1[s], f1[s]);
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++) {
      if (!(pending & (1u << s)) || f0[s] != e) continue;
      if (f1[s] == want) {
        pending &= ~(1u << s);
      } else if (++other[s] == 64) {
        // Words as the barrier's, without seq (bits 56-63 0: a 21-bit count).
        u64 diag[NVLS_MAX_RANKS] = {};
        const u32 mine = ll_check(p), theirs = f1[s] ^ e;
        diag[p.rank] = ((u64)(mine >> 21) << 40) | (mine & ((1u << 21) - 1));
        diag[s] = ((u64)(theirs >> 21) << 40) | (theirs & ((1u << 21) - 1));
        record_mismatch(p, 0, diag);
        return false;
      }
    }
    if (pending != 0 && (rounds & 1023) == 0) {
      if (globaltimer() > deadline) {
        record_timeout(p, 0);
        return false;
      }
      const u64 f = team_failed(p);
      if (f != 0) {
        record_abort(p, 0, f);
        return false;
      }
    }
  }
  return true;
}

// ll_count: with more than one block, count this block as one whose
// threads have all read the epoch; thread 0 gets the count before its add
// (the others 0). The fence orders the block's epoch reads (seen through
// the __syncthreads) before the add. Every block counts, also one that
// found the team failed, so that the count always reaches gridDim.x.
NVLS_DEV u32 ll_count(u64 own) {
  u32 old = 0;
  if (gridDim.x == 1) return old;
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    asm volatile("atom.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(own + NVLS_LL_OFFSET + 4), "r"(1u) : "memory");
  }
  return old;
}

// ll_publish stores the epoch (also after a timeout: the team is unusable
// then anyway, and the counter stays consistent): with one block, thread 0
// once every thread is done (the __syncthreads); with more, thread 0 of
// the block that counted last (ll_count returned gridDim.x - 1), which
// also resets the counter.
NVLS_DEV void ll_publish(u64 own, u32 e, u32 counted) {
  if (gridDim.x == 1) {
    __syncthreads();
    if (threadIdx.x == 0) st_b32(own + NVLS_LL_OFFSET, e);
    return;
  }
  if (threadIdx.x == 0 && counted == gridDim.x - 1) {
    st_b32(own + NVLS_LL_OFFSET + 4, 0);
    st_b32(own + NVLS_LL_OFFSET, e);
  }
}

template <class D, class O, int K>
NVLS_DEV void ll_collective(const nvls_params& p) {
  const u64 own = p.uc[p.rank];
  const bool abs = (p.flags & NVLS_FLAG_ABS_PTRS) != 0;
  const u64 send = abs ? p.send : own + p.send;
  const u64 recv = abs ? p.recv : own + p.recv;
  const u64 payload = p.count * (K == LL_ALLGATHER ? (u64)p.elem_bytes : (u64)D::E);
  const u64 lines = (payload + 7) / 8;
  const u64 nranks = p.nranks;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  // The first line's payload is loaded before the epoch, so that the two
  // loads are in flight together (the push needs both).
  u64 v_first = 0;
  if (K != LL_REDUCESCATTER && first < lines) v_first = ld_bytes(send + 8 * first, (u32)min_u64(payload - 8 * first, 8));
  u32 e = ld_own_b32(own + NVLS_LL_OFFSET);
  // Block 0 stores the start-barrier arrival word of block 0 (barrier), so
  // that a rank running a barrier kernel in this call sees this one's check.
  const bool arrive = blockIdx.x == 0 && threadIdx.x == 0;
  const u32 seq = arrive ? next_seq(ld_own_b32(own + NVLS_EPOCH_OFFSET)) : 0;
  bool failed = !nvls_enter(p);  // its load overlaps the epoch's
  const u32 counted = ll_count(own);
  e += 1;
  if (e == 0) e = 2;
  const u64 cap = p.ll_lines;
  const u64 area = p.ll_area + (u64)(e & 1) * nranks * cap * NVLS_LL_LINE_BYTES;

  // Push (two steps: line j of slice r, send line r * l1 + j, to rank r).
  const bool two = K == LL_REDUCE && (p.flags & NVLS_FLAG_LL_TWO) != 0;
  const u64 l1 = two ? (lines + nranks - 1) / nranks : lines;
  for (u64 i = first; i < l1 && !failed; i += stride) {
    const u64 off = area + ((u64)p.rank * cap + i) * NVLS_LL_LINE_BYTES;
    u64 v = K == LL_REDUCESCATTER ? 0 : i == first ? v_first : ld_bytes(send + 8 * i, (u32)min_u64(payload - 8 * i, 8));
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)nranks) {
        if (two) {
          const u64 g = (u64)r * l1 + i;
          if (g >= lines) continue;
          if (r > 0) v = ld_bytes(send + 8 * g, (u32)min_u64(payload - 8 * g, 8));
        }
        if (K == LL_REDUCESCATTER) v = ld_bytes(send + (u64)r * payload + 8 * i, (u32)min_u64(payload - 8 * i, 8));
        st_volatile_line(p.uc[r] + off, (u32)v, e, (u32)(v >> 32), e ^ ll_check(p));
      }
  }
  if (arrive && !failed) {
    arrive_start(p, arrive_slots(seq, 0), ((u64)(seq & 0xff) << 56) | call_word(p), true);
    st_b32(own + NVLS_EPOCH_OFFSET, seq);
  }

  // Pull, then reduce or copy, and write.
  const u64 deadline = deadline_of(p);
  for (u64 i = first; i < l1 && !failed; i += stride) {
    const u64 g = two ? (u64)p.rank * l1 + i : i;  // the line of recv
    const u64 line = own + area + i * NVLS_LL_LINE_BYTES, per_src = cap * NVLS_LL_LINE_BYTES;
    u32 d0[NVLS_MAX_RANKS], f0[NVLS_MAX_RANKS], d1[NVLS_MAX_RANKS], f1[NVLS_MAX_RANKS];
    if (g < lines) {
      const u32 valid = (u32)min_u64(payload - 8 * g, 8);
      typename D::A acc[D::L / 2];
      // One load of every source's line, all in flight at once; the lines
      // not there yet are then loaded again together (ll_wait), so that a
      // call waits for its last line and one load more, not one load a rank.
#pragma unroll
      for (int s = 0; s < NVLS_MAX_RANKS; s++)
        if (s < (int)nranks) ld_volatile_line(line + (u64)s * per_src, d0[s], f0[s], d1[s], f1[s]);
      u32 pending = 0;
#pragma unroll
      for (int s = 0; s < NVLS_MAX_RANKS; s++)
        if (s < (int)nranks && (f0[s] != e || f1[s] != (e ^ ll_check(p)))) pending |= 1u << s;
      if (pending != 0) failed = !ll_wait(p, line, per_src, pending, e, deadline, d0, f0, d1, f1);
      if (failed) continue;
#pragma unroll
      for (int s = 0; s < NVLS_MAX_RANKS; s++) {
        if (s >= (int)nranks) continue;
        const u64 data = (u64)d0[s] | ((u64)d1[s] << 32);
        if (K == LL_ALLGATHER) {
          st_bytes(recv + (u64)s * payload + 8 * i, data, valid);
          continue;
        }
        nvls_vec v;
        v.w[0] = (u32)data;
        v.w[1] = (u32)(data >> 32);
        v.w[2] = 0;
        v.w[3] = 0;
#pragma unroll
        for (int k = 0; k < D::L / 2; k++) acc[k] = s == 0 ? D::get(v, k) : D::template op<O>(acc[k], D::get(v, k));
      }
      if (K == LL_ALLGATHER || (K == LL_REDUCE && !two && p.rank != p.root)) continue;
      nvls_vec out;
      out.w[0] = 0;
      out.w[1] = 0;
#pragma unroll
      for (int k = 0; k < D::L / 2; k++) D::put(out, k, acc[k]);
      if (two && p.rank != p.root) {
        // Step two: the reduced line to the root, line l1 + i of the slot.
        st_volatile_line(p.uc[p.root] + area + ((u64)p.rank * cap + l1 + i) * NVLS_LL_LINE_BYTES, out.w[0], e, out.w[1], e ^ ll_check(p));
        continue;
      }
      st_bytes(recv + 8 * g, (u64)out.w[0] | ((u64)out.w[1] << 32), valid);
    }
    if (!two || p.rank != p.root) continue;
    // Step two on the root: line i of every other rank's slice.
    u32 pending = 0;
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++)
      if (s < (int)nranks && s != (int)p.root && (u64)s * l1 + i < lines) {
        ld_volatile_line(line + l1 * NVLS_LL_LINE_BYTES + (u64)s * per_src, d0[s], f0[s], d1[s], f1[s]);
        if (f0[s] != e || f1[s] != (e ^ ll_check(p))) pending |= 1u << s;
      }
    if (pending != 0) failed = !ll_wait(p, line + l1 * NVLS_LL_LINE_BYTES, per_src, pending, e, deadline, d0, f0, d1, f1);
    if (failed) continue;
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++)
      if (s < (int)nranks && s != (int)p.root && (u64)s * l1 + i < lines) {
        const u64 gs = (u64)s * l1 + i;
        st_bytes(recv + 8 * gs, (u64)d0[s] | ((u64)d1[s] << 32), (u32)min_u64(payload - 8 * gs, 8));
      }
  }
  ll_publish(own, e, counted);
}

// LL broadcast (nvls_broadcast with NVLS_FLAG_LL): the root's P = count *
// elem_bytes bytes in L = ceil(P/8) lines, in the LL area, epochs and
// parities of ll_collective. The root stores line i into slot
// [parity][root] of every other rank (out of place, also the valid bytes
// into its own recv); every other rank polls its own slot-root lines and
// writes their bytes to recv. The parities' argument (above) needs every
// rank to hear from every rank in every call, and the data goes one way
// only: so every rank but the root also stores one line (line 0 of its
// own slot, no payload) into every other rank's area, and thread 0 of
// block 0 of every rank waits for the lines of every rank but the root
// and itself. With the root's data alone, two non-roots could drift a
// call apart, and the fast one overwrite, two calls later, a line the
// slow one has yet to read. The lines carry the call's check as
// ll_collective's, so another collective or root on some rank is a
// mismatch (ll_wait).
//
// With NVLS_FLAG_LL_TWO, in two steps, so that the root's links carry the
// lines once rather than nranks - 1 times: the L lines split into S =
// nranks - 1 slices of L1 = ceil(L / S) lines (the last shorter or
// empty); slice q belongs to rank (root + 1 + q) mod nranks, and the root
// stores its line j into that rank's slot-root line j. That rank writes
// it to recv and stores it on to every other rank but the root, at line
// 1 + j of its own slot (line 0 is its one line), then takes line j of
// every other rank's slice from there. The slots hold L1 + 1 <= C lines
// (the host's limit).
NVLS_DEV void ll_broadcast(const nvls_params& p) {
  const u64 own = p.uc[p.rank];
  const bool abs = (p.flags & NVLS_FLAG_ABS_PTRS) != 0;
  const u64 send = abs ? p.send : own + p.send;
  const u64 recv = abs ? p.recv : own + p.recv;
  const u64 payload = p.count * (u64)p.elem_bytes;
  const u64 lines = (payload + 7) / 8;
  const u64 nranks = p.nranks;
  const bool root = p.rank == p.root;
  const bool two = (p.flags & NVLS_FLAG_LL_TWO) != 0 && nranks > 1;
  const u64 slices = two ? nranks - 1 : 1;
  const u64 l1 = (lines + slices - 1) / slices;  // lines a thread set spans
  const u64 mine = two ? (p.rank + nranks - p.root - 1) % nranks : 0;  // the own slice (one step: the one)
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  u64 v_first = 0;  // loaded before the epoch, as in ll_collective
  if (root && first < lines) v_first = ld_bytes(send + 8 * first, (u32)min_u64(payload - 8 * first, 8));
  u32 e = ld_own_b32(own + NVLS_LL_OFFSET);
  const bool lead = blockIdx.x == 0 && threadIdx.x == 0;
  const u32 seq = lead ? next_seq(ld_own_b32(own + NVLS_EPOCH_OFFSET)) : 0;
  bool failed = !nvls_enter(p);
  const u32 counted = ll_count(own);
  e += 1;
  if (e == 0) e = 2;
  const u64 cap = p.ll_lines, per_src = cap * NVLS_LL_LINE_BYTES;
  const u64 area = p.ll_area + (u64)(e & 1) * nranks * per_src;
  const u32 want = e ^ ll_check(p);

  // Push: the root its lines (two steps: line q x L1 + j to the owner of
  // slice q), every other rank its one line.
  if (root) {
    for (u64 j = first; j < l1 && !failed; j += stride) {
      const u64 off = area + ((u64)p.root * cap + j) * NVLS_LL_LINE_BYTES;
      if (!two) {
        const u32 valid = (u32)min_u64(payload - 8 * j, 8);
        const u64 v = j == first ? v_first : ld_bytes(send + 8 * j, valid);
#pragma unroll
        for (int r = 0; r < NVLS_MAX_RANKS; r++)
          if (r < (int)nranks && r != (int)p.root) st_volatile_line(p.uc[r] + off, (u32)v, e, (u32)(v >> 32), want);
        if (send != recv) st_bytes(recv + 8 * j, v, valid);
        continue;
      }
#pragma unroll
      for (int r = 0; r < NVLS_MAX_RANKS; r++) {
        if (r >= (int)nranks || r == (int)p.root) continue;
        const u64 g = (((u64)r + nranks - p.root - 1) % nranks) * l1 + j;
        if (g >= lines) continue;
        const u32 valid = (u32)min_u64(payload - 8 * g, 8);
        const u64 v = g == first ? v_first : ld_bytes(send + 8 * g, valid);
        st_volatile_line(p.uc[r] + off, (u32)v, e, (u32)(v >> 32), want);
        if (send != recv) st_bytes(recv + 8 * g, v, valid);
      }
    }
  } else if (lead && !failed) {
#pragma unroll
    for (int r = 0; r < NVLS_MAX_RANKS; r++)
      if (r < (int)nranks && r != (int)p.rank) st_volatile_line(p.uc[r] + area + (u64)p.rank * per_src, 0, e, 0, want);
  }
  if (lead && !failed) {
    arrive_start(p, arrive_slots(seq, 0), ((u64)(seq & 0xff) << 56) | call_word(p), true);
    st_b32(own + NVLS_EPOCH_OFFSET, seq);
  }

  // Pull: the root's lines (the array index a constant, so that the
  // words stay in registers); two steps: passed on, then the other
  // slices' lines; then the other ranks' one line.
  const u64 deadline = deadline_of(p);
  u32 d0[NVLS_MAX_RANKS], f0[NVLS_MAX_RANKS], d1[NVLS_MAX_RANKS], f1[NVLS_MAX_RANKS];
  for (u64 j = first; j < l1 && !root && !failed; j += stride) {
    const u64 line = own + area + j * NVLS_LL_LINE_BYTES;
    const u64 g = mine * l1 + j;
    if (g < lines) {
      u32 pending = 0;
#pragma unroll
      for (int s = 0; s < NVLS_MAX_RANKS; s++)
        if (s == (int)p.root) {
          ld_volatile_line(line + (u64)s * per_src, d0[s], f0[s], d1[s], f1[s]);
          if (f0[s] != e || f1[s] != want) pending = 1u << s;
        }
      if (pending != 0) failed = !ll_wait(p, line, per_src, pending, e, deadline, d0, f0, d1, f1);
      if (failed) break;
      u32 w0 = 0, w1 = 0;
#pragma unroll
      for (int s = 0; s < NVLS_MAX_RANKS; s++)
        if (s == (int)p.root) w0 = d0[s], w1 = d1[s];
      if (two) {
        const u64 off = area + ((u64)p.rank * cap + 1 + j) * NVLS_LL_LINE_BYTES;
#pragma unroll
        for (int r = 0; r < NVLS_MAX_RANKS; r++)
          if (r < (int)nranks && r != (int)p.root && r != (int)p.rank) st_volatile_line(p.uc[r] + off, w0, e, w1, want);
      }
      st_bytes(recv + 8 * g, (u64)w0 | ((u64)w1 << 32), (u32)min_u64(payload - 8 * g, 8));
    }
    if (!two) continue;
    // Line j of every other rank's slice, at line 1 + j of its slot.
    u32 pending = 0;
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++) {
      if (s >= (int)nranks || s == (int)p.root || s == (int)p.rank) continue;
      if ((((u64)s + nranks - p.root - 1) % nranks) * l1 + j >= lines) continue;
      ld_volatile_line(line + NVLS_LL_LINE_BYTES + (u64)s * per_src, d0[s], f0[s], d1[s], f1[s]);
      if (f0[s] != e || f1[s] != want) pending |= 1u << s;
    }
    if (pending != 0) failed = !ll_wait(p, line + NVLS_LL_LINE_BYTES, per_src, pending, e, deadline, d0, f0, d1, f1);
    if (failed) break;
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++) {
      if (s >= (int)nranks || s == (int)p.root || s == (int)p.rank) continue;
      const u64 gs = (((u64)s + nranks - p.root - 1) % nranks) * l1 + j;
      if (gs < lines) st_bytes(recv + 8 * gs, (u64)d0[s] | ((u64)d1[s] << 32), (u32)min_u64(payload - 8 * gs, 8));
    }
  }
  if (lead && !failed) {
    u32 pending = 0;
#pragma unroll
    for (int s = 0; s < NVLS_MAX_RANKS; s++)
      if (s < (int)nranks && s != (int)p.root && s != (int)p.rank) pending |= 1u << s;
    if (pending != 0) ll_wait(p, own + area, per_src, pending, e, deadline, d0, f0, d1, f1);
  }
  ll_publish(own, e, counted);
}

#endif  // NVLS_H
