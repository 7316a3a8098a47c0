/* A stand-in for the real libnccl.so.2, for the shim's forwarding test
 * (fwdtest.c): NCCL's entry points that the shim forwards to, each
 * counting its calls and checking that the communicator it gets is one
 * of its own (made by its ncclCommInitRank, ncclCommInitAll or
 * ncclCommSplit), never the shim's.
 *
 * Like the real NCCL it calls its own exported entry points: collectives
 * and queries check ncclCommGetAsyncError, ncclCommInitAll takes an id
 * from ncclGetUniqueId inside ncclGroupStart/End, every communicator
 * holds ncclMemAlloc'd scratch registered with ncclCommRegister and
 * ncclCommWindowRegister, ncclBcast calls ncclBroadcast, and
 * ncclCommAbort tail-calls ncclCommDestroy. Built with cc -fPIC
 * -fsemantic-interposition -shared -O2, those calls go through the PLT,
 * so with the shim loaded first the loader binds them to the shim's
 * entry points, which must hand them back here. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NVLS_SHIM_NO_CUDA_RUNTIME 1
#include "../nccl.h"

#define FAKE_MAGIC 0xfa4e0c0du
#define REG_MAGIC 0x4e6e0c0du
struct reg {
  unsigned magic;
  ncclComm_t comm;
  void* buff;
};
struct ncclComm {
  unsigned magic;
  int rank, nranks, dev;
  void* scratch;
  void* reg;
  ncclWindow_t win;
};

enum { C_GETVERSION, C_GETUNIQUEID, C_INITRANK, C_INITALL, C_DESTROY, C_ABORT, C_FINALIZE, C_SPLIT, C_SHRINK, C_GROUPSTART,
       C_GROUPEND, C_ALLREDUCE, C_BROADCAST, C_BCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER, C_ALLTOALL, C_GATHER,
       C_SCATTER, C_SEND, C_RECV, C_PREMULSUM, C_REDOPDESTROY, C_COUNT, C_USERRANK, C_CUDEVICE, C_ASYNCERROR,
       C_MEMALLOC, C_MEMFREE, C_REGISTER, C_DEREGISTER, C_WINREGISTER, C_WINDEREGISTER, C_SIMEND, C_RESETDEBUG, C_N };
static const char* names[C_N] = {
    "ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitAll", "ncclCommDestroy", "ncclCommAbort",
    "ncclCommFinalize", "ncclCommSplit", "ncclCommShrink", "ncclGroupStart", "ncclGroupEnd", "ncclAllReduce",
    "ncclBroadcast", "ncclBcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclGather",
    "ncclScatter", "ncclSend", "ncclRecv", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclCommCount",
    "ncclCommUserRank", "ncclCommCuDevice", "ncclCommGetAsyncError", "ncclMemAlloc", "ncclMemFree",
    "ncclCommRegister", "ncclCommDeregister", "ncclCommWindowRegister", "ncclCommWindowDeregister",
    "ncclGroupSimulateEnd", "ncclResetDebugInit"};
static int calls[C_N], selfCalls[C_N];
static int badComms, groupDepth, made, mem, regs, wins, inGroup, simCalls;
static ncclRedOp_t lastOp = (ncclRedOp_t)-1;

static int load(int* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void add(int* p, int d) { __atomic_add_fetch(p, d, __ATOMIC_SEQ_CST); }

/* fakeNcclCalls: how often name was called (-1: not an entry point here);
 * "self:name": how often by this library's own code; "made": the calls
 * this library made to its own entry points (besides ncclCommAbort's tail
 * call), "self": those that came back here; "badcomm": calls given a
 * communicator that is not this library's; "groupdepth": the group
 * nesting now; "lastop": the last reduction op; "mem", "regs", "wins":
 * scratch buffers, registrations and windows live; "simcalls": the
 * collectives and point-to-point calls of the last group that
 * ncclGroupSimulateEnd ended. */
int fakeNcclCalls(const char* name) {
  if (strcmp(name, "badcomm") == 0) return load(&badComms);
  if (strcmp(name, "groupdepth") == 0) return load(&groupDepth);
  if (strcmp(name, "lastop") == 0) return (int)lastOp;
  if (strcmp(name, "made") == 0) return load(&made);
  if (strcmp(name, "mem") == 0) return load(&mem);
  if (strcmp(name, "regs") == 0) return load(&regs);
  if (strcmp(name, "wins") == 0) return load(&wins);
  if (strcmp(name, "simcalls") == 0) return load(&simCalls);
  if (strcmp(name, "self") == 0) {
    int n = 0;
    for (int i = 0; i < C_N; i++) n += load(&selfCalls[i]);
    return n;
  }
  int self = strncmp(name, "self:", 5) == 0;
  for (int i = 0; i < C_N; i++)
    if (strcmp(names[i], name + (self ? 5 : 0)) == 0) return load(self ? &selfCalls[i] : &calls[i]);
  return -1;
}

/* fromHere: whether the return address ra lies in this library. */
static int fromHere(void* ra) {
  Dl_info me, caller;
  return dladdr((void*)fakeNcclCalls, &me) && dladdr(ra, &caller) && me.dli_fbase == caller.dli_fbase;
}
/* ENTER counts a call of the entry point it opens, and whether this
 * library's own code made it. */
#define ENTER(c)                                                 \
  do {                                                           \
    add(&calls[c], 1);                                           \
    if (fromHere(__builtin_return_address(0))) add(&selfCalls[c], 1); \
  } while (0)
/* SELF(call) calls one of this library's own entry points, counted. */
#define SELF(call) (add(&made, 1), (call))
/* CHECK makes a call of SELF's, never a sibling call (the barrier):
 * the entry point called sees this library as its caller. */
#define CHECK(call)                   \
  do {                                \
    ncclResult_t r_ = SELF(call);     \
    __asm__ volatile("" ::: "memory"); \
    if (r_ != ncclSuccess) return r_; \
  } while (0)

static ncclResult_t mine(ncclComm_t c) {
  if (c == NULL || c->magic != FAKE_MAGIC) {
    add(&badComms, 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
/* ready checks c and its asynchronous error, as NCCL's
 * ncclCommEnsureReady does, through ncclCommGetAsyncError. */
static ncclResult_t ready(ncclComm_t c) {
  ncclResult_t r = mine(c), async = ncclInternalError;
  if (r != ncclSuccess) return r;
  CHECK(ncclCommGetAsyncError(c, &async));
  return async;
}
/* newComm makes a communicator with its scratch buffer, registered. */
static ncclResult_t newComm(ncclComm_t* out, int rank, int nranks, int dev) {
  ncclComm_t c = calloc(1, sizeof *c);
  c->magic = FAKE_MAGIC;
  c->rank = rank, c->nranks = nranks, c->dev = dev;
  *out = c;
  CHECK(ncclMemAlloc(&c->scratch, 4096));
  CHECK(ncclCommRegister(c, c->scratch, 4096, &c->reg));
  CHECK(ncclCommWindowRegister(c, c->scratch, 4096, &c->win, NCCL_WIN_DEFAULT));
  return ncclSuccess;
}
static ncclResult_t freeComm(ncclComm_t c) {
  ncclResult_t r = mine(c);
  if (r != ncclSuccess) return r;
  CHECK(ncclCommWindowDeregister(c, c->win));
  CHECK(ncclCommDeregister(c, c->reg));
  CHECK(ncclMemFree(c->scratch));
  c->magic = 0;
  free(c);
  return ncclSuccess;
}

ncclResult_t ncclGetVersion(int* v) { ENTER(C_GETVERSION); *v = 22803; return ncclSuccess; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  ENTER(C_GETUNIQUEID);
  memset(id, 'F', sizeof *id);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* c, int n, ncclUniqueId id, int r) {
  ENTER(C_INITRANK);
  if (id.internal[0] != 'F' || id.internal[NCCL_UNIQUE_ID_BYTES - 1] != 'F') return ncclInvalidArgument;
  return newComm(c, r, n, r);
}
ncclResult_t ncclCommInitAll(ncclComm_t* c, int n, const int* devs) {
  ENTER(C_INITALL);
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  if (id.internal[0] != 'F' || id.internal[NCCL_UNIQUE_ID_BYTES - 1] != 'F') return ncclInternalError;
  CHECK(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    ncclResult_t r = newComm(&c[i], i, n, devs ? devs[i] : i);
    if (r != ncclSuccess) return r;
  }
  CHECK(ncclGroupEnd());
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
  ENTER(C_DESTROY);
  return freeComm(c);
}
/* A sibling call (gcc -O2, or musttail): the shim sees its own
 * fwd_CommAbort as the caller of ncclCommDestroy. */
#if defined(__has_attribute)
#if __has_attribute(musttail)
#define TAIL __attribute__((musttail))
#endif
#endif
#ifndef TAIL
#define TAIL
#endif
ncclResult_t ncclCommAbort(ncclComm_t c) {
  ENTER(C_ABORT);
  TAIL return ncclCommDestroy(c);
}
ncclResult_t ncclCommFinalize(ncclComm_t c) { ENTER(C_FINALIZE); return ready(c); }
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t* nc, ncclConfig_t* cfg) {
  (void)color, (void)cfg;
  ENTER(C_SPLIT);
  ncclResult_t r = ready(c);
  if (r != ncclSuccess) return r;
  return newComm(nc, key, 1, c->dev);
}
ncclResult_t ncclCommShrink(ncclComm_t c, int* excl, int nexcl, ncclComm_t* nc, ncclConfig_t* cfg, int flags) {
  (void)excl, (void)cfg, (void)flags;
  ENTER(C_SHRINK);
  ncclResult_t r = ready(c);
  if (r != ncclSuccess) return r;
  return newComm(nc, c->rank, c->nranks - nexcl, c->dev);
}
const char* ncclGetLastError(ncclComm_t c) { (void)c; return "fake NCCL's last error"; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* r) {
  ENTER(C_ASYNCERROR);
  *r = ncclSuccess;
  return mine(c);
}
ncclResult_t ncclCommCount(ncclComm_t c, int* v) { ENTER(C_COUNT); ncclResult_t r = ready(c); if (!r) *v = c->nranks; return r; }
ncclResult_t ncclCommUserRank(ncclComm_t c, int* v) { ENTER(C_USERRANK); ncclResult_t r = ready(c); if (!r) *v = c->rank; return r; }
ncclResult_t ncclCommCuDevice(ncclComm_t c, int* v) { ENTER(C_CUDEVICE); ncclResult_t r = ready(c); if (!r) *v = c->dev; return r; }
ncclResult_t ncclMemAlloc(void** p, size_t n) {
  ENTER(C_MEMALLOC);
  *p = malloc(n);
  add(&mem, 1);
  return ncclSuccess;
}
ncclResult_t ncclMemFree(void* p) {
  ENTER(C_MEMFREE);
  free(p);
  add(&mem, -1);
  return ncclSuccess;
}
ncclResult_t ncclCommRegister(const ncclComm_t c, void* b, size_t n, void** h) {
  (void)n;
  ENTER(C_REGISTER);
  ncclResult_t r = mine(c);
  if (r != ncclSuccess) return r;
  struct reg* g = malloc(sizeof *g);
  g->magic = REG_MAGIC, g->comm = c, g->buff = b;
  *h = g;
  add(&regs, 1);
  return ncclSuccess;
}
ncclResult_t ncclCommDeregister(const ncclComm_t c, void* h) {
  ENTER(C_DEREGISTER);
  ncclResult_t r = mine(c);
  struct reg* g = h;
  if (r != ncclSuccess) return r;
  if (g == NULL || g->magic != REG_MAGIC || g->comm != c) return ncclInvalidArgument;
  g->magic = 0;
  free(g);
  add(&regs, -1);
  return ncclSuccess;
}
ncclResult_t ncclCommWindowRegister(ncclComm_t c, void* b, size_t n, ncclWindow_t* w, int flags) {
  (void)b, (void)n, (void)flags;
  ENTER(C_WINREGISTER);
  ncclResult_t r = mine(c);
  if (r != ncclSuccess) return r;
  *w = (ncclWindow_t)c; /* one window a communicator */
  add(&wins, 1);
  return ncclSuccess;
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t c, ncclWindow_t w) {
  ENTER(C_WINDEREGISTER);
  ncclResult_t r = mine(c);
  if (r != ncclSuccess) return r;
  if (w != (ncclWindow_t)c) return ncclInvalidArgument;
  add(&wins, -1);
  return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) { ENTER(C_GROUPSTART); add(&groupDepth, 1); return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
  ENTER(C_GROUPEND);
  if (load(&groupDepth) == 0) return ncclInvalidUsage;
  if (__atomic_sub_fetch(&groupDepth, 1, __ATOMIC_SEQ_CST) == 0) __atomic_store_n(&inGroup, 0, __ATOMIC_SEQ_CST);
  return ncclSuccess;
}
/* Its estimate is FAKE_SIM_US a call of the group (NCCL checks the magic
 * alone, and copies back size bytes at most). */
#define FAKE_SIM_US 12.5f
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* si) {
  ENTER(C_SIMEND);
  if (load(&groupDepth) == 0) return ncclInvalidUsage;
  if (__atomic_sub_fetch(&groupDepth, 1, __ATOMIC_SEQ_CST) > 0) return ncclSuccess;
  int n = __atomic_exchange_n(&inGroup, 0, __ATOMIC_SEQ_CST);
  if (si == NULL) return ncclSuccess;
  if (si->magic != 0x74685283) return ncclInvalidArgument;
  __atomic_store_n(&simCalls, n, __ATOMIC_SEQ_CST);
  si->estimatedTime = FAKE_SIM_US * n;
  return ncclSuccess;
}
void ncclResetDebugInit(void) { ENTER(C_RESETDEBUG); }
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t res,
                                      ncclComm_t c) {
  (void)scalar, (void)dt, (void)res;
  ENTER(C_PREMULSUM);
  *op = (ncclRedOp_t)(ncclNumOps + 3);
  return ready(c);
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) { (void)op; ENTER(C_REDOPDESTROY); return ready(c); }
#define COLL(C, op)                             \
  ENTER(C);                                     \
  lastOp = op;                                  \
  if (load(&groupDepth) > 0) add(&inGroup, 1); \
  return ready(c)
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
ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  ENTER(C_BCAST);
  CHECK(ncclBroadcast(b, b, n, dt, root, c, st));
  return ncclSuccess;
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
ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)root, (void)st;
  COLL(C_GATHER, ncclSum);
}
ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)dt, (void)root, (void)st;
  COLL(C_SCATTER, ncclSum);
}
ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)n, (void)dt, (void)peer, (void)st;
  COLL(C_SEND, ncclSum);
}
ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)r, (void)n, (void)dt, (void)peer, (void)st;
  COLL(C_RECV, ncclSum);
}
