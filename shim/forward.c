#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "forward.h"

/* Only the shim exports this: a library that has it is the shim, never
 * the real NCCL. */
__attribute__((visibility("default"))) const char nvlsShimIdentity[] = "libnccl-nvls";

static void* lib;
static char libPath[4096];

#define ENTRIES(X)                                                                                             \
  X(GetVersion, ncclResult_t, (int*))                                                                          \
  X(GetUniqueId, ncclResult_t, (ncclUniqueId*))                                                                \
  X(CommInitRank, ncclResult_t, (ncclComm_t*, int, ncclUniqueId, int))                                         \
  X(CommInitAll, ncclResult_t, (ncclComm_t*, int, const int*))                                                 \
  X(CommDestroy, ncclResult_t, (ncclComm_t))                                                                   \
  X(CommAbort, ncclResult_t, (ncclComm_t))                                                                     \
  X(CommFinalize, ncclResult_t, (ncclComm_t))                                                                  \
  X(CommSplit, ncclResult_t, (ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*))                               \
  X(CommShrink, ncclResult_t, (ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int))                          \
  X(GetLastError, const char*, (ncclComm_t))                                                                   \
  X(CommGetAsyncError, ncclResult_t, (ncclComm_t, ncclResult_t*))                                              \
  X(CommCount, ncclResult_t, (ncclComm_t, int*))                                                              \
  X(CommUserRank, ncclResult_t, (ncclComm_t, int*))                                                           \
  X(CommCuDevice, ncclResult_t, (ncclComm_t, int*))                                                           \
  X(GroupStart, ncclResult_t, (void))                                                                          \
  X(GroupEnd, ncclResult_t, (void))                                                                            \
  X(RedOpCreatePreMulSum, ncclResult_t, (ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t)) \
  X(RedOpDestroy, ncclResult_t, (ncclRedOp_t, ncclComm_t))                                                     \
  X(AllReduce, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)) \
  X(Broadcast, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))     \
  X(Reduce, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t)) \
  X(AllGather, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))          \
  X(ReduceScatter, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)) \
  X(AlltoAll, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))           \
  X(Gather, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))        \
  X(Scatter, ncclResult_t, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))       \
  X(Send, ncclResult_t, (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                 \
  X(Recv, ncclResult_t, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

#define DECL(name, ret, args) static ret(*p_##name) args;
ENTRIES(DECL)

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
#define LOAD(name, ret, args) p_##name = (ret(*) args)dlsym(h, "nccl" #name);
  ENTRIES(LOAD)
  if (p_GetVersion == NULL || p_GetUniqueId == NULL || p_CommInitRank == NULL || p_CommInitAll == NULL ||
      p_CommDestroy == NULL || p_GroupStart == NULL || p_GroupEnd == NULL) {
    snprintf(err, errlen, "%s lacks NCCL's basic entry points (ncclGetVersion, ncclCommInitRank, ...)", path);
    dlclose(h);
    return -1;
  }
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

ncclResult_t fwd_GetVersion(int* v) { MISSING(GetVersion) return p_GetVersion(v); }
ncclResult_t fwd_GetUniqueId(ncclUniqueId* id) { MISSING(GetUniqueId) return p_GetUniqueId(id); }
ncclResult_t fwd_CommInitRank(ncclComm_t* c, int n, ncclUniqueId* id, int r) {
  MISSING(CommInitRank) return p_CommInitRank(c, n, *id, r);
}
ncclResult_t fwd_CommInitAll(ncclComm_t* c, int n, const int* devs) { MISSING(CommInitAll) return p_CommInitAll(c, n, devs); }
ncclResult_t fwd_CommDestroy(ncclComm_t c) { MISSING(CommDestroy) return p_CommDestroy(c); }
ncclResult_t fwd_CommAbort(ncclComm_t c) { MISSING(CommAbort) return p_CommAbort(c); }
ncclResult_t fwd_CommFinalize(ncclComm_t c) { MISSING(CommFinalize) return p_CommFinalize(c); }
ncclResult_t fwd_CommSplit(ncclComm_t c, int color, int key, ncclComm_t* nc, ncclConfig_t* cfg) {
  MISSING(CommSplit) return p_CommSplit(c, color, key, nc, cfg);
}
ncclResult_t fwd_CommShrink(ncclComm_t c, int* excl, int nexcl, ncclComm_t* nc, ncclConfig_t* cfg, int flags) {
  MISSING(CommShrink) return p_CommShrink(c, excl, nexcl, nc, cfg, flags);
}
const char* fwd_GetLastError(ncclComm_t c) { return p_GetLastError == NULL ? "" : p_GetLastError(c); }
ncclResult_t fwd_CommGetAsyncError(ncclComm_t c, ncclResult_t* r) {
  MISSING(CommGetAsyncError) return p_CommGetAsyncError(c, r);
}
ncclResult_t fwd_CommCount(ncclComm_t c, int* v) { MISSING(CommCount) return p_CommCount(c, v); }
ncclResult_t fwd_CommUserRank(ncclComm_t c, int* v) { MISSING(CommUserRank) return p_CommUserRank(c, v); }
ncclResult_t fwd_CommCuDevice(ncclComm_t c, int* v) { MISSING(CommCuDevice) return p_CommCuDevice(c, v); }
ncclResult_t fwd_GroupStart(void) { MISSING(GroupStart) return p_GroupStart(); }
ncclResult_t fwd_GroupEnd(void) { MISSING(GroupEnd) return p_GroupEnd(); }
ncclResult_t fwd_RedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t res,
                                      ncclComm_t c) {
  MISSING(RedOpCreatePreMulSum) return p_RedOpCreatePreMulSum(op, scalar, dt, res, c);
}
ncclResult_t fwd_RedOpDestroy(ncclRedOp_t op, ncclComm_t c) { MISSING(RedOpDestroy) return p_RedOpDestroy(op, c); }
ncclResult_t fwd_AllReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  MISSING(AllReduce) return p_AllReduce(s, r, n, dt, op, c, st);
}
ncclResult_t fwd_Broadcast(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t st) {
  MISSING(Broadcast) return p_Broadcast(s, r, n, dt, root, c, st);
}
ncclResult_t fwd_Reduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
  MISSING(Reduce) return p_Reduce(s, r, n, dt, op, root, c, st);
}
ncclResult_t fwd_AllGather(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  MISSING(AllGather) return p_AllGather(s, r, n, dt, c, st);
}
ncclResult_t fwd_ReduceScatter(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  MISSING(ReduceScatter) return p_ReduceScatter(s, r, n, dt, op, c, st);
}
ncclResult_t fwd_AlltoAll(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  MISSING(AlltoAll) return p_AlltoAll(s, r, n, dt, c, st);
}
ncclResult_t fwd_Gather(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  MISSING(Gather) return p_Gather(s, r, n, dt, root, c, st);
}
ncclResult_t fwd_Scatter(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  MISSING(Scatter) return p_Scatter(s, r, n, dt, root, c, st);
}
ncclResult_t fwd_Send(const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  MISSING(Send) return p_Send(s, n, dt, peer, c, st);
}
ncclResult_t fwd_Recv(void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  MISSING(Recv) return p_Recv(r, n, dt, peer, c, st);
}

static pthread_mutex_t errMu = PTHREAD_MUTEX_INITIALIZER;
static char lastErr[2048];

void nvls_set_last_error(const char* msg) {
  pthread_mutex_lock(&errMu);
  snprintf(lastErr, sizeof lastErr, "%s", msg);
  pthread_mutex_unlock(&errMu);
}

const char* nvls_last_error(void) { return lastErr; }
