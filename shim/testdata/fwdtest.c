/* The shim's forwarding, on the simulated node, against a stand-in for
 * the real NCCL (fakenccl.c, which counts its calls, rejects any
 * communicator not its own and, as NCCL does, calls its own entry
 * points):
 *   fwdtest fake   NVLS_REAL_NCCL and FAKE_NCCL name the stand-in: the
 *                  calls nvls does not run reach it, on its own
 *                  communicators; those nvls runs never do; its calls to
 *                  its own entry points, which the loader binds to the
 *                  shim's, come back to it.
 *   fwdtest self   the real NCCL the shim finds is the shim itself
 *                  (NVLS_REAL_NCCL names it, or a libnccl.so.2 link to it
 *                  on the loader path): forwarded calls fail, saying so,
 *                  and nothing recurses. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

int nvlsSimSetDevice(int dev);
int nvlsSimMalloc(void** p, size_t n);
int nvlsSimFree(void* p);
int nvlsSimStreamCreate(cudaStream_t* s);
int nvlsSimStreamSynchronize(cudaStream_t s);
int nvlsSimStreamDestroy(cudaStream_t s);

#define N 4
static int failures;
#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, " (last error: %s)\n", ncclGetLastError(NULL));   \
      failures++;                                                       \
    }                                                                   \
  } while (0)
#define NCCL(call) CHECK((call) == ncclSuccess, "%s", #call)
#define SIM(call) CHECK((call) == 0, "%s", #call)

static int (*fake)(const char*);
/* expect checks that the stand-in's count of name moved by want since
 * the last look. */
static int seen[128];
static const char* seenNames[128];
static void expect(const char* name, int want, int line) {
  int i = 0;
  while (seenNames[i] != NULL && strcmp(seenNames[i], name) != 0) i++;
  seenNames[i] = name;
  int now = fake(name);
  if (now - seen[i] != want) {
    fprintf(stderr, "FAIL line %d: the real NCCL's %s ran %d time(s), want %d\n", line, name, now - seen[i], want);
    failures++;
  }
  seen[i] = now;
}
#define EXPECT(name, want) expect(name, want, __LINE__)
/* settle takes the stand-in's count of name as it is, unchecked. */
static void settle(const char* name) {
  int i = 0;
  while (seenNames[i] != NULL && strcmp(seenNames[i], name) != 0) i++;
  seenNames[i] = name;
  seen[i] = fake(name);
}

static void setup(ncclComm_t* comms, cudaStream_t* streams, void** bufs) {
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamCreate(&streams[r]));
    SIM(nvlsSimMalloc(&bufs[r], 4096));
  }
  (void)comms;
}

static void teardown(ncclComm_t* comms, cudaStream_t* streams, void** bufs) {
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamSynchronize(streams[r]));
    SIM(nvlsSimStreamDestroy(streams[r]));
    SIM(nvlsSimFree(bufs[r]));
    NCCL(ncclCommDestroy(comms[r]));
  }
}

/* allReduce issues an all-reduce on every rank in a group. */
static void allReduce(ncclComm_t* comms, cudaStream_t* streams, void** bufs, ncclDataType_t dt, ncclRedOp_t* ops) {
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCL(ncclAllReduce(bufs[r], bufs[r], 100, dt, ops[r], comms[r], streams[r]));
  NCCL(ncclGroupEnd());
}

static void testFake(void) {
  const char* path = getenv("FAKE_NCCL");
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  fake = h ? (int (*)(const char*))dlsym(h, "fakeNcclCalls") : NULL;
  if (fake == NULL) {
    fprintf(stderr, "FAIL: no stand-in NCCL (FAKE_NCCL=%s): %s\n", path ? path : "", dlerror());
    exit(1);
  }
  ncclComm_t comms[N];
  cudaStream_t streams[N];
  void* bufs[N];
  ncclRedOp_t sum[N] = {ncclSum, ncclSum, ncclSum, ncclSum}, avg[N] = {ncclAvg, ncclAvg, ncclAvg, ncclAvg}, pre[N];

  NCCL(ncclCommInitAll(comms, N, NULL));
  EXPECT("ncclCommInitAll", 1);
  /* Its ncclCommInitAll called its own ncclGetUniqueId (and got its own
   * id), ncclGroupStart/End and, a communicator each, ncclMemAlloc,
   * ncclCommRegister and ncclCommWindowRegister: all came back to it. */
  EXPECT("ncclGetUniqueId", 1);
  EXPECT("self:ncclGetUniqueId", 1);
  EXPECT("self:ncclGroupStart", 1);
  EXPECT("self:ncclGroupEnd", 1);
  EXPECT("self:ncclMemAlloc", N);
  EXPECT("self:ncclCommRegister", N);
  EXPECT("self:ncclCommWindowRegister", N);
  CHECK(fake("mem") == N && fake("regs") == N && fake("wins") == N,
        "the real NCCL holds %d scratch buffers, %d registrations, %d windows, want %d each", fake("mem"),
        fake("regs"), fake("wins"), N);
  setup(comms, streams, bufs);

  /* The real NCCL used directly (a program that dlopens it and calls
   * through dlsym): its calls to its own entry points come back to it
   * too. */
  ncclResult_t (*initAll)(ncclComm_t*, int, const int*) = (ncclResult_t(*)(ncclComm_t*, int, const int*))dlsym(h, "ncclCommInitAll");
  ncclResult_t (*bcast)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) =
      (ncclResult_t(*)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))dlsym(h, "ncclBcast");
  ncclResult_t (*destroy)(ncclComm_t) = (ncclResult_t(*)(ncclComm_t))dlsym(h, "ncclCommDestroy");
  CHECK(initAll != NULL && bcast != NULL && destroy != NULL, "the stand-in lacks ncclCommInitAll, ncclBcast or ncclCommDestroy");
  if (initAll != NULL && bcast != NULL && destroy != NULL) {
    ncclComm_t own[2];
    NCCL(initAll(own, 2, NULL));
    EXPECT("ncclCommInitAll", 1);
    EXPECT("ncclGetUniqueId", 1);
    EXPECT("self:ncclGetUniqueId", 1);
    EXPECT("self:ncclMemAlloc", 2);
    NCCL(bcast(bufs[0], 10, ncclFloat32, 0, own[0], streams[0]));
    EXPECT("ncclBcast", 1);
    EXPECT("ncclBroadcast", 1);
    EXPECT("self:ncclBroadcast", 1);
    EXPECT("self:ncclCommGetAsyncError", 1);
    NCCL(destroy(own[0]));
    NCCL(destroy(own[1]));
    EXPECT("ncclCommDestroy", 2);
    EXPECT("self:ncclCommWindowDeregister", 2);
    EXPECT("self:ncclCommDeregister", 2);
    EXPECT("self:ncclMemFree", 2);
  }

  /* Runs here: the real NCCL sees none of it. */
  allReduce(comms, streams, bufs, ncclFloat32, sum);
  EXPECT("ncclAllReduce", 0);
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCL(ncclBroadcast(bufs[r], bufs[r], 100, ncclFloat64, 1, comms[r], streams[r]));
  NCCL(ncclGroupEnd());
  EXPECT("ncclBroadcast", 0);

  /* Forwarded: a type or operator nvls does not reduce, point to point,
   * all-to-all, a PreMulSum operator and the collectives that use it. */
  allReduce(comms, streams, bufs, ncclFloat64, sum);
  EXPECT("ncclAllReduce", N);
  EXPECT("self:ncclCommGetAsyncError", N); /* as NCCL's ncclEnqueueCheck */
  allReduce(comms, streams, bufs, ncclFloat32, avg);
  EXPECT("ncclAllReduce", N);
  CHECK(fake("lastop") == ncclAvg, "the real NCCL got op %d, want ncclAvg", fake("lastop"));
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL(ncclReduce(bufs[r], bufs[r], 10, ncclInt8, ncclSum, 0, comms[r], streams[r]));
    NCCL(ncclReduceScatter(bufs[r], bufs[r], 10, ncclFloat32, ncclProd, comms[r], streams[r]));
  }
  NCCL(ncclGroupEnd());
  EXPECT("ncclReduce", N);
  EXPECT("ncclReduceScatter", N);
  float scalar = 0.5f;
  for (int r = 0; r < N; r++)
    NCCL(ncclRedOpCreatePreMulSum(&pre[r], &scalar, ncclFloat32, ncclScalarHostImmediate, comms[r]));
  EXPECT("ncclRedOpCreatePreMulSum", N);
  allReduce(comms, streams, bufs, ncclFloat32, pre);
  EXPECT("ncclAllReduce", N);
  CHECK(fake("lastop") == (int)pre[N - 1], "the real NCCL got op %d, want the PreMulSum op %d", fake("lastop"), pre[N - 1]);
  for (int r = 0; r < N; r++) NCCL(ncclRedOpDestroy(pre[r], comms[r]));
  EXPECT("ncclRedOpDestroy", N);
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL(ncclSend(bufs[r], 10, ncclFloat32, (r + 1) % N, comms[r], streams[r]));
    NCCL(ncclRecv(bufs[r], 10, ncclFloat32, (r + N - 1) % N, comms[r], streams[r]));
    NCCL(ncclAlltoAll(bufs[r], bufs[r], 4, ncclFloat32, comms[r], streams[r]));
  }
  NCCL(ncclGroupEnd());
  EXPECT("ncclSend", N);
  EXPECT("ncclRecv", N);
  EXPECT("ncclAlltoAll", N);
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL(ncclGather(bufs[r], bufs[r], 4, ncclFloat32, 0, comms[r], streams[r]));
    NCCL(ncclScatter(bufs[r], bufs[r], 4, ncclFloat32, 0, comms[r], streams[r]));
  }
  NCCL(ncclGroupEnd());
  EXPECT("ncclGather", N);
  EXPECT("ncclScatter", N);
  CHECK(fake("groupdepth") == 0, "the real NCCL's group depth is %d after ncclGroupEnd", fake("groupdepth"));

  /* ncclGroupSimulateEnd: the group's calls that nvls runs reach the real
   * NCCL only there, into its open group beside the ones forwarded
   * anyway, on its own communicators, and its estimate comes back. */
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  settle("ncclGroupEnd");
  NCCL(ncclGroupStart());
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL(ncclAllReduce(bufs[r], bufs[r], 100, ncclFloat32, ncclSum, comms[r], streams[r]));
    NCCL(ncclBroadcast(bufs[r], bufs[r], 100, ncclFloat32, 2, comms[r], streams[r]));
    NCCL(ncclAllReduce(bufs[r], bufs[r], 100, ncclFloat64, ncclSum, comms[r], streams[r]));
  }
  NCCL(ncclGroupSimulateEnd(&si)); /* the inner level: nothing yet */
  EXPECT("ncclAllReduce", N);
  EXPECT("ncclBroadcast", 0);
  EXPECT("ncclGroupEnd", 1); /* an inner ncclGroupSimulateEnd is an ncclGroupEnd */
  CHECK(si.estimatedTime == NCCL_UNDEF_FLOAT, "the inner ncclGroupSimulateEnd set the estimate to %g", si.estimatedTime);
  NCCL(ncclGroupSimulateEnd(&si));
  EXPECT("ncclAllReduce", N);
  EXPECT("ncclBroadcast", N);
  EXPECT("ncclGroupSimulateEnd", 1);
  CHECK(fake("simcalls") == 3 * N, "the real NCCL's simulated group held %d calls, want %d", fake("simcalls"), 3 * N);
  CHECK(si.estimatedTime == 12.5f * 3 * N, "the estimate is %g, want the real NCCL's %g", si.estimatedTime, 12.5f * 3 * N);
  CHECK(fake("groupdepth") == 0, "the real NCCL's group depth is %d after ncclGroupSimulateEnd", fake("groupdepth"));
  /* A bad simInfo: ncclInvalidArgument, and the group is over, here and
   * in the real NCCL, none of its calls run. */
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCL(ncclAllReduce(bufs[r], bufs[r], 100, ncclFloat32, ncclSum, comms[r], streams[r]));
  CHECK(ncclGroupSimulateEnd(&bad) == ncclInvalidArgument, "a simInfo without its magic");
  CHECK(strstr(ncclGetLastError(NULL), "NCCL_SIM_INFO_INITIALIZER") != NULL, "the error names NCCL_SIM_INFO_INITIALIZER");
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "the group is still open");
  EXPECT("ncclAllReduce", 0);
  EXPECT("ncclGroupSimulateEnd", 1);
  EXPECT("ncclGroupEnd", 0);
  CHECK(fake("groupdepth") == 0, "the real NCCL's group depth is %d", fake("groupdepth"));
  /* The next group runs as before. */
  allReduce(comms, streams, bufs, ncclFloat32, sum);
  EXPECT("ncclAllReduce", 0);
  allReduce(comms, streams, bufs, ncclFloat64, sum);
  EXPECT("ncclAllReduce", N);

  /* pncclX, the profiling alias, is the shim's ncclX, routed the same. */
  static const char* apis[] = {"GetVersion", "GetUniqueId", "CommInitRank", "CommInitRankConfig", "CommShrink",
      "CommInitRankScalable", "CommInitAll", "CommFinalize", "CommDestroy", "CommAbort", "CommSplit",
      "GetErrorString", "GetLastError", "CommGetAsyncError", "CommCount", "CommCuDevice", "CommUserRank",
      "MemAlloc", "MemFree", "CommRegister", "CommDeregister", "CommWindowRegister", "CommWindowDeregister",
      "RedOpCreatePreMulSum", "RedOpDestroy", "Reduce", "Bcast", "Broadcast", "AllReduce", "ReduceScatter",
      "AllGather", "AlltoAll", "Gather", "Scatter", "Send", "Recv", "GroupStart", "GroupEnd", "GroupSimulateEnd",
      "ResetDebugInit"};
  Dl_info shimInfo, info;
  CHECK(dladdr((void*)ncclAllReduce, &shimInfo) && strstr(shimInfo.dli_fname, "libnccl-nvls") != NULL,
        "ncclAllReduce is not the shim's");
  for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++) {
    char n[64], p[64];
    snprintf(n, sizeof n, "nccl%s", apis[i]);
    snprintf(p, sizeof p, "pnccl%s", apis[i]);
    void *nf = dlsym(RTLD_DEFAULT, n), *pf = dlsym(RTLD_DEFAULT, p);
    CHECK(nf != NULL && pf == nf && dladdr(pf, &info) && info.dli_fbase == shimInfo.dli_fbase,
          "%s (%p) is not the shim's %s (%p)", p, pf, n, nf);
  }
  NCCL(pncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL(pncclAllReduce(bufs[r], bufs[r], 100, ncclFloat32, ncclSum, comms[r], streams[r]));
    NCCL(pncclAllReduce(bufs[r], bufs[r], 100, ncclFloat64, ncclSum, comms[r], streams[r]));
  }
  NCCL(pncclGroupEnd());
  EXPECT("ncclAllReduce", N);
  CHECK(fake("groupdepth") == 0, "the real NCCL's group depth is %d after pncclGroupEnd", fake("groupdepth"));
  /* ncclResetDebugInit reaches the real NCCL. */
  ncclResetDebugInit();
  EXPECT("ncclResetDebugInit", 1);

  /* A split communicator is the real NCCL's: everything on it goes there. */
  ncclComm_t sub;
  SIM(nvlsSimSetDevice(0));
  NCCL(ncclCommSplit(comms[0], 0, 7, &sub, NULL));
  EXPECT("ncclCommSplit", 1);
  int v = -1;
  NCCL(ncclCommUserRank(sub, &v));
  CHECK(v == 7, "the split comm's rank %d, want the real NCCL's 7", v);
  NCCL(ncclAllReduce(bufs[0], bufs[0], 100, ncclFloat32, ncclSum, sub, streams[0]));
  EXPECT("ncclAllReduce", 1);
  NCCL(ncclCommDestroy(sub));
  EXPECT("ncclCommDestroy", 1);
  /* So is a shrunk one (PyTorch links ncclCommShrink). */
  int excl[1] = {N - 1};
  NCCL(ncclCommShrink(comms[0], excl, 1, &sub, NULL, 0));
  EXPECT("ncclCommShrink", 1);
  NCCL(ncclCommCount(sub, &v));
  CHECK(v == N - 1, "the shrunk comm has %d ranks, want the real NCCL's %d", v, N - 1);
  /* The stand-in's ncclCommAbort is a sibling call of its
   * ncclCommDestroy: the shim's own call into it is the caller. */
  NCCL(ncclCommAbort(sub));
  EXPECT("ncclCommAbort", 1);
  EXPECT("ncclCommDestroy", 1);

  teardown(comms, streams, bufs);
  EXPECT("ncclCommDestroy", N);

  /* One thread inits every rank in a group (nccl-tests -g N): the real
   * communicators come from one real unique id, a rank each. */
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  EXPECT("ncclGetUniqueId", 0); /* the shim's own id; the real one comes at init */
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    NCCL(ncclCommInitRank(&comms[r], N, id, r));
  }
  NCCL(ncclGroupEnd());
  EXPECT("ncclGetUniqueId", 1);
  EXPECT("ncclCommInitRank", N);
  CHECK(fake("groupdepth") == 0, "the real NCCL's group depth is %d after ncclGroupEnd", fake("groupdepth"));
  setup(comms, streams, bufs);
  allReduce(comms, streams, bufs, ncclFloat32, sum);
  EXPECT("ncclAllReduce", 0);
  allReduce(comms, streams, bufs, ncclFloat64, sum);
  EXPECT("ncclAllReduce", N);
  NCCL(ncclSend(bufs[0], 10, ncclFloat32, 1, comms[0], streams[0]));
  EXPECT("ncclSend", 1);
  teardown(comms, streams, bufs);
  EXPECT("ncclCommDestroy", N);
  CHECK(fake("badcomm") == 0, "the real NCCL got %d communicator(s) not its own", fake("badcomm"));
  /* Every call the real NCCL made to its own entry points reached it. */
  CHECK(fake("made") > 0 && fake("self") == fake("made"), "of the real NCCL's %d calls to its own entry points, %d came back to it",
        fake("made"), fake("self"));
  CHECK(fake("mem") == 0 && fake("regs") == 0 && fake("wins") == 0,
        "the real NCCL still holds %d scratch buffers, %d registrations, %d windows", fake("mem"), fake("regs"),
        fake("wins"));
}

static void testSelf(void) {
  ncclComm_t comms[N];
  cudaStream_t streams[N];
  void* bufs[N];
  NCCL(ncclCommInitAll(comms, N, NULL));
  setup(comms, streams, bufs);
  ncclResult_t res = ncclSend(bufs[0], 10, ncclFloat32, 1, comms[0], streams[0]);
  CHECK(res == ncclInvalidUsage, "send with the shim as the real NCCL: %d", res);
  CHECK(strstr(ncclGetLastError(NULL), "libnccl-nvls itself") != NULL, "the error names the shim");
  allReduce(comms, streams, bufs, ncclFloat32, (ncclRedOp_t[N]){ncclSum, ncclSum, ncclSum, ncclSum});
  /* No real NCCL to estimate a simulated group's calls: they are
   * dropped, and the result says why. */
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCL(ncclAllReduce(bufs[r], bufs[r], 100, ncclFloat32, ncclSum, comms[r], streams[r]));
  res = ncclGroupSimulateEnd(&si);
  CHECK(res == ncclInvalidUsage, "simulated group with the shim as the real NCCL: %d", res);
  CHECK(strstr(ncclGetLastError(NULL), "no real NCCL") != NULL, "the error says there is no real NCCL");
  CHECK(si.estimatedTime == NCCL_UNDEF_FLOAT, "the estimate changed to %g", si.estimatedTime);
  teardown(comms, streams, bufs);
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "fake") != 0 && strcmp(argv[1], "self") != 0)) {
    fprintf(stderr, "usage: fwdtest fake|self\n");
    return 2;
  }
  if (strcmp(argv[1], "fake") == 0) testFake();
  else testSelf();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
