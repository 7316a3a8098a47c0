/* NCCL's entry points, as the shim exports them: each routes its call by
 * its caller. The real NCCL calls its own entry points (ncclEnqueueCheck
 * calls ncclCommGetAsyncError, ncclCommInitAll ncclGetUniqueId, ncclBcast
 * ncclBroadcast, ...) through the PLT, and with the shim loaded first the
 * loader binds those calls to the shim's: a call from inside the real
 * NCCL, or made while the shim is calling into it on this thread (a tail
 * call leaves the shim as the caller), goes back to the real NCCL; every
 * other call, and any the real NCCL has no entry point for, to the shim's
 * Go side (nvlsGo* in abi.go). Each pncclX, NCCL's profiling alias, is
 * the same function as ncclX. */
#define NVLS_SHIM_NO_CUDA_RUNTIME 1
#include "nccl.h" /* the prototypes, which the definitions here must match */

#include "_cgo_export.h"
#include "entries.h"

/* fromReal: whether ra, a return address, is the real NCCL's call. */
static inline int fromReal(void* ra) {
  uintptr_t a = (uintptr_t)ra;
  return (a >= __atomic_load_n(&nvls_real_lo, __ATOMIC_RELAXED) &&
          a < __atomic_load_n(&nvls_real_hi, __ATOMIC_ACQUIRE)) ||
         nvls_in_real > 0;
}

#define ENTRY(name, ret, params, args, goargs)                                 \
  __attribute__((visibility("default"), noinline)) ret nccl##name params {   \
    if (fromReal(__builtin_return_address(0))) {                              \
      ret(*real) params = __atomic_load_n(&p_##name, __ATOMIC_RELAXED);       \
      if (real != NULL) return real args;                                     \
    }                                                                         \
    return nvlsGo##name goargs;                                               \
  }
NVLS_ENTRIES(ENTRY)

/* ncclResetDebugInit (deprecated in NCCL, which exports it still): the
 * real NCCL's for its own calls, else the Go side, which passes it on. */
__attribute__((visibility("default"), noinline)) void ncclResetDebugInit(void) {
  if (fromReal(__builtin_return_address(0))) {
    void (*real)(void) = __atomic_load_n(&p_ResetDebugInit, __ATOMIC_RELAXED);
    if (real != NULL) {
      real();
      return;
    }
  }
  nvlsGoResetDebugInit();
}

/* pncclX: an alias of ncclX, the same code (so routed the same way). */
#define ALIAS(name, ret, params, args, goargs) \
  __attribute__((visibility("default"), alias("nccl" #name))) ret pnccl##name params;
NVLS_ENTRIES(ALIAS)
ALIAS(ResetDebugInit, void, (void), (), ())
#undef ALIAS
