#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "entries.h"

/* Only the shim exports this: a library that has it is the shim, never
 * the real NCCL. */
__attribute__((visibility("default"))) const char nvlsShimIdentity[] = "libnccl-nvls";

static void* lib;
static char libPath[4096];

#define DEF(name, ret, params, args, goargs) ret(*p_##name) params;
NVLS_ENTRIES(DEF)
#undef DEF
void (*p_ResetDebugInit)(void);
uintptr_t nvls_real_lo, nvls_real_hi;
__thread int nvls_in_real;

/* span finds the object holding want among the loaded ones and records
 * the span of its PT_LOAD segments (the loader reserves it whole). */
struct spanArg {
  uintptr_t want, lo, hi;
};
static int span(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct spanArg* a = data;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  int has = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t b = info->dlpi_addr + ph->p_vaddr, e = b + ph->p_memsz;
    if (b < lo) lo = b;
    if (e > hi) hi = e;
    if (a->want >= b && a->want < e) has = 1;
  }
  if (!has) return 0;
  a->lo = lo, a->hi = hi;
  return 1;
}

static void unload(void* h) {
#define CLEAR(name, ret, params, args, goargs) p_##name = NULL;
  NVLS_ENTRIES(CLEAR)
#undef CLEAR
  p_ResetDebugInit = NULL;
  dlclose(h);
}

int fwd_open(const char* path, char* err, int errlen) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(err, errlen, "dlopen %s: %s", path, dlerror());
    return -1;
  }
  if (dlsym(h, "nvlsShimIdentity") != NULL) {
    snprintf(err, errlen, "%s is libnccl-nvls itself (it exports nvlsShimIdentity), not the real NCCL", path);
    dlclose(h);
    return -1;
  }
  void* mine = dlsym(RTLD_DEFAULT, "nvlsShimIdentity");
  Dl_info self, other;
  void* theirs = dlsym(h, "ncclAllReduce");
  if (theirs != NULL && mine != NULL && dladdr(mine, &self) && dladdr(theirs, &other) &&
      self.dli_fname != NULL && other.dli_fname != NULL && strcmp(self.dli_fname, other.dli_fname) == 0) {
    snprintf(err, errlen, "%s resolves to libnccl-nvls itself (%s), not the real NCCL", path, self.dli_fname);
    dlclose(h);
    return -1;
  }
#define LOAD(name, ret, params, args, goargs) p_##name = (ret(*) params)dlsym(h, "nccl" #name);
  NVLS_ENTRIES(LOAD)
#undef LOAD
  p_ResetDebugInit = (void (*)(void))dlsym(h, "ncclResetDebugInit");
  if (p_GetVersion == NULL || p_GetUniqueId == NULL || p_CommInitRank == NULL || p_CommInitAll == NULL ||
      p_CommDestroy == NULL || p_GroupStart == NULL || p_GroupEnd == NULL) {
    snprintf(err, errlen, "%s lacks NCCL's basic entry points (ncclGetVersion, ncclCommInitRank, ...)", path);
    unload(h);
    return -1;
  }
  /* Where the real NCCL lies: its calls to its own entry points (which
   * the loader binds to the shim's) go back to it (entry.c). */
  struct spanArg a = {(uintptr_t)p_GetVersion, 0, 0};
  if (dl_iterate_phdr(span, &a) == 0) {
    snprintf(err, errlen, "%s: its ncclGetVersion at %p is in no loaded object", path, (void*)p_GetVersion);
    unload(h);
    return -1;
  }
  __atomic_store_n(&nvls_real_lo, a.lo, __ATOMIC_RELAXED);
  __atomic_store_n(&nvls_real_hi, a.hi, __ATOMIC_RELEASE);
  lib = h;
  if (theirs != NULL && dladdr(theirs, &other) && other.dli_fname != NULL) {
    snprintf(libPath, sizeof libPath, "%s", other.dli_fname);
  } else {
    snprintf(libPath, sizeof libPath, "%s", path);
  }
  return 0;
}

int fwd_loaded(void) { return lib != NULL; }
const char* fwd_path(void) { return libPath; }

/* A missing entry point is ncclInvalidUsage: the real NCCL is too old. */
#define MISSING(name)                                                             \
  if (p_##name == NULL) {                                                         \
    nvls_set_last_error("libnccl-nvls: the real NCCL has no nccl" #name);         \
    return ncclInvalidUsage;                                                      \
  }

/* CALL calls the real NCCL's name, counting it in nvls_in_real. */
#define CALL(name, ...)                   \
  {                                       \
    __typeof__(p_##name(__VA_ARGS__)) r_; \
    nvls_in_real++;                       \
    r_ = p_##name(__VA_ARGS__);           \
    nvls_in_real--;                       \
    return r_;                            \
  }

ncclResult_t fwd_GetVersion(int* v) { MISSING(GetVersion) CALL(GetVersion, v) }
ncclResult_t fwd_GetUniqueId(ncclUniqueId* id) { MISSING(GetUniqueId) CALL(GetUniqueId, id) }
ncclResult_t fwd_CommInitRank(ncclComm_t* c, int n, ncclUniqueId* id, int r) {
  MISSING(CommInitRank) CALL(CommInitRank, c, n, *id, r)
}
ncclResult_t fwd_CommInitAll(ncclComm_t* c, int n, const int* devs) { MISSING(CommInitAll) CALL(CommInitAll, c, n, devs) }
ncclResult_t fwd_CommDestroy(ncclComm_t c) { MISSING(CommDestroy) CALL(CommDestroy, c) }
ncclResult_t fwd_CommAbort(ncclComm_t c) { MISSING(CommAbort) CALL(CommAbort, c) }
ncclResult_t fwd_CommFinalize(ncclComm_t c) { MISSING(CommFinalize) CALL(CommFinalize, c) }
ncclResult_t fwd_CommSplit(ncclComm_t c, int color, int key, ncclComm_t* nc, ncclConfig_t* cfg) {
  MISSING(CommSplit) CALL(CommSplit, c, color, key, nc, cfg)
}
ncclResult_t fwd_CommShrink(ncclComm_t c, int* excl, int nexcl, ncclComm_t* nc, ncclConfig_t* cfg, int flags) {
  MISSING(CommShrink) CALL(CommShrink, c, excl, nexcl, nc, cfg, flags)
}
const char* fwd_GetLastError(ncclComm_t c) {
  if (p_GetLastError == NULL) return "";
  CALL(GetLastError, c)
}
ncclResult_t fwd_CommGetAsyncError(ncclComm_t c, ncclResult_t* r) {
  MISSING(CommGetAsyncError) CALL(CommGetAsyncError, c, r)
}
ncclResult_t fwd_CommCount(ncclComm_t c, int* v) { MISSING(CommCount) CALL(CommCount, c, v) }
ncclResult_t fwd_CommUserRank(ncclComm_t c, int* v) { MISSING(CommUserRank) CALL(CommUserRank, c, v) }
ncclResult_t fwd_CommCuDevice(ncclComm_t c, int* v) { MISSING(CommCuDevice) CALL(CommCuDevice, c, v) }
ncclResult_t fwd_GroupStart(void) { MISSING(GroupStart) CALL(GroupStart, ) }
ncclResult_t fwd_GroupEnd(void) { MISSING(GroupEnd) CALL(GroupEnd, ) }
int fwd_hasGroupSimulateEnd(void) { return p_GroupSimulateEnd != NULL; }
ncclResult_t fwd_GroupSimulateEnd(ncclSimInfo_t* si) { MISSING(GroupSimulateEnd) CALL(GroupSimulateEnd, si) }
void fwd_ResetDebugInit(void) {
  if (p_ResetDebugInit == NULL) return;
  nvls_in_real++;
  p_ResetDebugInit();
  nvls_in_real--;
}
ncclResult_t fwd_RedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t res,
                                      ncclComm_t c) {
  MISSING(RedOpCreatePreMulSum) CALL(RedOpCreatePreMulSum, op, scalar, dt, res, c)
}
ncclResult_t fwd_RedOpDestroy(ncclRedOp_t op, ncclComm_t c) { MISSING(RedOpDestroy) CALL(RedOpDestroy, op, c) }
ncclResult_t fwd_AllReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  MISSING(AllReduce) CALL(AllReduce, s, r, n, dt, op, c, st)
}
ncclResult_t fwd_Broadcast(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t st) {
  MISSING(Broadcast) CALL(Broadcast, s, r, n, dt, root, c, st)
}
ncclResult_t fwd_Reduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
  MISSING(Reduce) CALL(Reduce, s, r, n, dt, op, root, c, st)
}
ncclResult_t fwd_AllGather(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  MISSING(AllGather) CALL(AllGather, s, r, n, dt, c, st)
}
ncclResult_t fwd_ReduceScatter(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  MISSING(ReduceScatter) CALL(ReduceScatter, s, r, n, dt, op, c, st)
}
ncclResult_t fwd_AlltoAll(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  MISSING(AlltoAll) CALL(AlltoAll, s, r, n, dt, c, st)
}
ncclResult_t fwd_Gather(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  MISSING(Gather) CALL(Gather, s, r, n, dt, root, c, st)
}
ncclResult_t fwd_Scatter(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  MISSING(Scatter) CALL(Scatter, s, r, n, dt, root, c, st)
}
ncclResult_t fwd_Send(const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  MISSING(Send) CALL(Send, s, n, dt, peer, c, st)
}
ncclResult_t fwd_Recv(void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  MISSING(Recv) CALL(Recv, r, n, dt, peer, c, st)
}

static pthread_mutex_t errMu = PTHREAD_MUTEX_INITIALIZER;
static char lastErr[2048];

void nvls_set_last_error(const char* msg) {
  pthread_mutex_lock(&errMu);
  snprintf(lastErr, sizeof lastErr, "%s", msg);
  pthread_mutex_unlock(&errMu);
}

const char* nvls_last_error(void) { return lastErr; }
