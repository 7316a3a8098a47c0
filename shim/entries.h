/* NCCL's entry points the shim exports, as one X-macro list for
 * forward.c (the real NCCL's, p_X) and entry.c (the shim's, which route
 * each call by its caller). Not a cgo preamble: Go files do not include
 * it. */
#ifndef NVLS_ENTRIES_H_
#define NVLS_ENTRIES_H_
#include "forward.h"

/* X(name, return type, parameters as in nccl.h, arguments, arguments for
 * the Go side, whose exports drop const). */
#define NVLS_ENTRIES(X)                                                                                              \
  X(GetVersion, ncclResult_t, (int* v), (v), (v))                                                                    \
  X(GetUniqueId, ncclResult_t, (ncclUniqueId * id), (id), (id))                                                      \
  X(CommInitRank, ncclResult_t, (ncclComm_t * c, int n, ncclUniqueId id, int r), (c, n, id, r), (c, n, id, r))       \
  X(CommInitRankConfig, ncclResult_t, (ncclComm_t * c, int n, ncclUniqueId id, int r, ncclConfig_t* cfg),            \
    (c, n, id, r, cfg), (c, n, id, r, cfg))                                                                          \
  X(CommShrink, ncclResult_t, (ncclComm_t c, int* excl, int nexcl, ncclComm_t* nc, ncclConfig_t* cfg, int flags),    \
    (c, excl, nexcl, nc, cfg, flags), (c, excl, nexcl, nc, cfg, flags))                                              \
  X(CommInitRankScalable, ncclResult_t,                                                                              \
    (ncclComm_t * c, int n, int r, int nid, ncclUniqueId* ids, ncclConfig_t* cfg), (c, n, r, nid, ids, cfg),          \
    (c, n, r, nid, ids, cfg))                                                                                        \
  X(CommInitAll, ncclResult_t, (ncclComm_t * c, int n, const int* devs), (c, n, devs), (c, n, (int*)devs))           \
  X(CommFinalize, ncclResult_t, (ncclComm_t c), (c), (c))                                                            \
  X(CommDestroy, ncclResult_t, (ncclComm_t c), (c), (c))                                                             \
  X(CommAbort, ncclResult_t, (ncclComm_t c), (c), (c))                                                               \
  X(CommSplit, ncclResult_t, (ncclComm_t c, int color, int key, ncclComm_t* nc, ncclConfig_t* cfg),                  \
    (c, color, key, nc, cfg), (c, color, key, nc, cfg))                                                              \
  X(GetErrorString, const char*, (ncclResult_t r), (r), (r))                                                         \
  X(GetLastError, const char*, (ncclComm_t c), (c), (c))                                                             \
  X(CommGetAsyncError, ncclResult_t, (ncclComm_t c, ncclResult_t * r), (c, r), (c, r))                               \
  X(CommCount, ncclResult_t, (const ncclComm_t c, int* v), (c, v), (c, v))                                           \
  X(CommCuDevice, ncclResult_t, (const ncclComm_t c, int* v), (c, v), (c, v))                                        \
  X(CommUserRank, ncclResult_t, (const ncclComm_t c, int* v), (c, v), (c, v))                                        \
  X(MemAlloc, ncclResult_t, (void** p, size_t n), (p, n), (p, n))                                                    \
  X(MemFree, ncclResult_t, (void* p), (p), (p))                                                                      \
  X(CommRegister, ncclResult_t, (const ncclComm_t c, void* b, size_t n, void** h), (c, b, n, h), (c, b, n, h))       \
  X(CommDeregister, ncclResult_t, (const ncclComm_t c, void* h), (c, h), (c, h))                                     \
  X(CommWindowRegister, ncclResult_t, (ncclComm_t c, void* b, size_t n, ncclWindow_t* w, int flags),                 \
    (c, b, n, w, flags), (c, b, n, w, flags))                                                                        \
  X(CommWindowDeregister, ncclResult_t, (ncclComm_t c, ncclWindow_t w), (c, w), (c, w))                              \
  X(RedOpCreatePreMulSum, ncclResult_t,                                                                              \
    (ncclRedOp_t * op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t res, ncclComm_t c),                    \
    (op, scalar, dt, res, c), (op, scalar, dt, res, c))                                                              \
  X(RedOpDestroy, ncclResult_t, (ncclRedOp_t op, ncclComm_t c), (op, c), (op, c))                                    \
  X(Reduce, ncclResult_t,                                                                                            \
    (const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st), \
    (s, r, n, dt, op, root, c, st), ((void*)s, r, n, dt, op, root, c, st))                                           \
  X(Bcast, ncclResult_t, (void* b, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st),            \
    (b, n, dt, root, c, st), (b, n, dt, root, c, st))                                                                \
  X(Broadcast, ncclResult_t,                                                                                         \
    (const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st),                  \
    (s, r, n, dt, root, c, st), ((void*)s, r, n, dt, root, c, st))                                                   \
  X(AllReduce, ncclResult_t,                                                                                         \
    (const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),           \
    (s, r, n, dt, op, c, st), ((void*)s, r, n, dt, op, c, st))                                                       \
  X(ReduceScatter, ncclResult_t,                                                                                     \
    (const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),           \
    (s, r, n, dt, op, c, st), ((void*)s, r, n, dt, op, c, st))                                                       \
  X(AllGather, ncclResult_t, (const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st),   \
    (s, r, n, dt, c, st), ((void*)s, r, n, dt, c, st))                                                               \
  X(AlltoAll, ncclResult_t, (const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st),    \
    (s, r, n, dt, c, st), ((void*)s, r, n, dt, c, st))                                                               \
  X(Gather, ncclResult_t,                                                                                            \
    (const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st),                  \
    (s, r, n, dt, root, c, st), ((void*)s, r, n, dt, root, c, st))                                                   \
  X(Scatter, ncclResult_t,                                                                                           \
    (const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st),                  \
    (s, r, n, dt, root, c, st), ((void*)s, r, n, dt, root, c, st))                                                   \
  X(Send, ncclResult_t, (const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st),       \
    (s, n, dt, peer, c, st), ((void*)s, n, dt, peer, c, st))                                                         \
  X(Recv, ncclResult_t, (void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st),             \
    (r, n, dt, peer, c, st), (r, n, dt, peer, c, st))                                                                \
  X(GroupStart, ncclResult_t, (void), (), ())                                                                        \
  X(GroupEnd, ncclResult_t, (void), (), ())                                                                         \
  X(GroupSimulateEnd, ncclResult_t, (ncclSimInfo_t * si), (si), (si))

/* The real NCCL's entry points (NULL where it lacks one), set by fwd_open. */
#define NVLS_P_DECL(name, ret, params, args, goargs) extern __attribute__((visibility("hidden"))) ret(*p_##name) params;
NVLS_ENTRIES(NVLS_P_DECL)
#undef NVLS_P_DECL
/* ncclResetDebugInit returns nothing: outside the list (entry.c). */
extern __attribute__((visibility("hidden"))) void (*p_ResetDebugInit)(void);

/* The real NCCL's mapped address range, [nvls_real_lo, nvls_real_hi):
 * set once by fwd_open, before any call into it. */
extern __attribute__((visibility("hidden"))) uintptr_t nvls_real_lo, nvls_real_hi;

/* Calls the shim is making into the real NCCL on this thread (fwd_*): an
 * entry point the real NCCL tail-calls from one of them sees the shim as
 * its caller, yet is the real NCCL's call. */
extern __attribute__((visibility("hidden"), tls_model("initial-exec"))) __thread int nvls_in_real;
#endif
