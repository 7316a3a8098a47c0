/* A stand-in for the real libnccl.so.2, for the shim's forwarding test
 * (fwdtest.c): NCCL's entry points that the shim forwards to, each
 * counting its calls and checking that the communicator it gets is one
 * of its own (made by its ncclCommInitRank, ncclCommInitAll or
 * ncclCommSplit), never the shim's. Built with cc -shared. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NVLS_SHIM_NO_PROTOTYPES 1
#define NVLS_SHIM_NO_CUDA_RUNTIME 1
#include "../nccl.h"

#define FAKE_MAGIC 0xfa4e0c0du
struct ncclComm {
  unsigned magic;
  int rank, nranks, dev;
};

enum { C_GETVERSION, C_GETUNIQUEID, C_INITRANK, C_INITALL, C_DESTROY, C_ABORT, C_FINALIZE, C_SPLIT, C_SHRINK, C_GROUPSTART,
       C_GROUPEND, C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER, C_ALLTOALL, C_SEND, C_RECV,
       C_PREMULSUM, C_REDOPDESTROY, C_COUNT, C_USERRANK, C_CUDEVICE, C_N };
static const char* names[C_N] = {"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitAll",
                                 "ncclCommDestroy", "ncclCommAbort", "ncclCommFinalize", "ncclCommSplit", "ncclCommShrink",
                                 "ncclGroupStart", "ncclGroupEnd", "ncclAllReduce", "ncclBroadcast", "ncclReduce",
                                 "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclSend", "ncclRecv",
                                 "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclCommCount",
                                 "ncclCommUserRank", "ncclCommCuDevice"};
static int calls[C_N];
static int badComms, groupDepth;
static ncclRedOp_t lastOp = (ncclRedOp_t)-1;

/* fakeNcclCalls: how often name was called (-1: not an entry point here);
 * "badcomm": calls given a communicator that is not this library's;
 * "groupdepth": the group nesting now; "lastop": the last reduction op. */
int fakeNcclCalls(const char* name) {
  if (strcmp(name, "badcomm") == 0) return badComms;
  if (strcmp(name, "groupdepth") == 0) return groupDepth;
  if (strcmp(name, "lastop") == 0) return (int)lastOp;
  for (int i = 0; i < C_N; i++)
    if (strcmp(names[i], name) == 0) return __atomic_load_n(&calls[i], __ATOMIC_SEQ_CST);
  return -1;
}

static void count(int c) { __atomic_add_fetch(&calls[c], 1, __ATOMIC_SEQ_CST); }
static ncclResult_t mine(ncclComm_t c) {
  if (c == NULL || c->magic != FAKE_MAGIC) {
    __atomic_add_fetch(&badComms, 1, __ATOMIC_SEQ_CST);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
static ncclComm_t newComm(int rank, int nranks, int dev) {
  ncclComm_t c = calloc(1, sizeof *c);
  c->magic = FAKE_MAGIC;
  c->rank = rank, c->nranks = nranks, c->dev = dev;
  return c;
}

ncclResult_t ncclGetVersion(int* v) { count(C_GETVERSION); *v = 22803; return ncclSuccess; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  count(C_GETUNIQUEID);
  memset(id, 'F', sizeof *id);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* c, int n, ncclUniqueId id, int r) {
  count(C_INITRANK);
  if (id.internal[0] != 'F' || id.internal[NCCL_UNIQUE_ID_BYTES - 1] != 'F') return ncclInvalidArgument;
  *c = newComm(r, n, r);
  return ncclSuccess;
}
ncclResult_t ncclCommInitAll(ncclComm_t* c, int n, const int* devs) {
  count(C_INITALL);
  for (int i = 0; i < n; i++) c[i] = newComm(i, n, devs ? devs[i] : i);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
  count(C_DESTROY);
  ncclResult_t r = mine(c);
  if (r == ncclSuccess) c->magic = 0, free(c);
  return r;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { count(C_ABORT); ncclResult_t r = mine(c); if (r == ncclSuccess) c->magic = 0, free(c); return r; }
ncclResult_t ncclCommFinalize(ncclComm_t c) { count(C_FINALIZE); return mine(c); }
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t* nc, ncclConfig_t* cfg) {
  (void)color, (void)cfg;
  count(C_SPLIT);
  ncclResult_t r = mine(c);
  if (r == ncclSuccess) *nc = newComm(key, 1, c->dev);
  return r;
}
ncclResult_t ncclCommShrink(ncclComm_t c, int* excl, int nexcl, ncclComm_t* nc, ncclConfig_t* cfg, int flags) {
  (void)excl, (void)cfg, (void)flags;
  count(C_SHRINK);
  ncclResult_t r = mine(c);
  if (r == ncclSuccess) *nc = newComm(c->rank, c->nranks - nexcl, c->dev);
  return r;
}
const char* ncclGetLastError(ncclComm_t c) { (void)c; return "fake NCCL's last error"; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* r) { *r = ncclSuccess; return mine(c); }
ncclResult_t ncclCommCount(ncclComm_t c, int* v) { count(C_COUNT); ncclResult_t r = mine(c); if (!r) *v = c->nranks; return r; }
ncclResult_t ncclCommUserRank(ncclComm_t c, int* v) { count(C_USERRANK); ncclResult_t r = mine(c); if (!r) *v = c->rank; return r; }
ncclResult_t ncclCommCuDevice(ncclComm_t c, int* v) { count(C_CUDEVICE); ncclResult_t r = mine(c); if (!r) *v = c->dev; return r; }
ncclResult_t ncclGroupStart(void) { count(C_GROUPSTART); groupDepth++; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
  count(C_GROUPEND);
  if (groupDepth == 0) return ncclInvalidUsage;
  groupDepth--;
  return ncclSuccess;
}
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t res,
                                      ncclComm_t c) {
  (void)scalar, (void)dt, (void)res;
  count(C_PREMULSUM);
  *op = (ncclRedOp_t)(ncclNumOps + 3);
  return mine(c);
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) { (void)op; count(C_REDOPDESTROY); return mine(c); }
#define COLL(C, op) \
  count(C);         \
  lastOp = op;      \
  return mine(c)
ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)st;
  COLL(C_ALLREDUCE, op);
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)root, (void)st;
  COLL(C_BROADCAST, ncclSum);
}
ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)root, (void)st;
  COLL(C_REDUCE, op);
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)st;
  COLL(C_ALLGATHER, ncclSum);
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)st;
  COLL(C_REDUCESCATTER, op);
}
ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)st;
  COLL(C_ALLTOALL, ncclSum);
}
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)n, (void)dt, (void)peer, (void)st;
  COLL(C_SEND, ncclSum);
}
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)r, (void)n, (void)dt, (void)peer, (void)st;
  COLL(C_RECV, ncclSum);
}
