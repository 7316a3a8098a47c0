/* The shim's C test, on the simulated node (NVLS_SIM=1, a shim built
 * with -tags nvlssim): init (ncclCommInitAll, and ncclCommInitRank from
 * one thread per rank), every collective nvls runs checked against a
 * reference computed here on fresh random data, a group call, forwarded
 * calls without a real NCCL, abort, a bad config, and bad unique ids
 * failing within their deadline. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl.h"

int nvlsSimSetDevice(int dev);
int nvlsSimMalloc(void** p, size_t n);
int nvlsSimFree(void* p);
int nvlsSimMemcpyHtoD(void* dst, const void* src, size_t n);
int nvlsSimMemcpyDtoH(void* dst, const void* src, size_t n);
int nvlsSimStreamCreate(cudaStream_t* s);
int nvlsSimStreamSynchronize(cudaStream_t s);
int nvlsSimStreamDestroy(cudaStream_t s);

#define N 4
static int failures;
#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (!(cond)) {                                              \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                             \
      fprintf(stderr, " (last error: %s)\n", ncclGetLastError(NULL)); \
      failures++;                                               \
    }                                                           \
  } while (0)
#define NCCL(call) CHECK((call) == ncclSuccess, "%s", #call)
#define SIM(call) CHECK((call) == 0, "%s", #call)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static unsigned seed;
static int32_t rnd(void) { return (int32_t)(rand_r(&seed) % 2001) - 1000; }

/* The reference of one element: op over every rank's value. */
static int64_t ref(int op, const int64_t* v) {
  int64_t r = v[0];
  for (int i = 1; i < N; i++) {
    if (op == ncclSum) r += v[i];
    if (op == ncclMin) r = v[i] < r ? v[i] : r;
    if (op == ncclMax) r = v[i] > r ? v[i] : r;
  }
  return r;
}

enum { AR, RS, AG, BC, RD };
static const char* names[] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce"};

/* run issues one collective over comms (one per device, one thread: a
 * group) on device buffers from ncclMemAlloc (team) or nvlsSimMalloc
 * (plain), int32 or float data, and checks every rank's result. */
static void run(ncclComm_t* comms, cudaStream_t* streams, int coll, int op, ncclDataType_t dt, size_t count,
                int team, int root) {
  size_t sendN = coll == RS ? count * N : count, recvN = coll == AG ? count * N : count;
  int32_t* host[N];
  void *send[N], *recv[N];
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    host[r] = malloc(sendN * 4);
    for (size_t i = 0; i < sendN; i++) {
      host[r][i] = rnd();
      if (dt == ncclFloat32) ((float*)host[r])[i] = (float)host[r][i];
    }
    if (team) {
      NCCL(ncclMemAlloc(&send[r], sendN * 4));
      NCCL(ncclMemAlloc(&recv[r], recvN * 4));
    } else {
      SIM(nvlsSimMalloc(&send[r], sendN * 4));
      SIM(nvlsSimMalloc(&recv[r], recvN * 4));
    }
    SIM(nvlsSimMemcpyHtoD(send[r], host[r], sendN * 4));
  }
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    ncclResult_t res = ncclSuccess;
    switch (coll) {
      case AR: res = ncclAllReduce(send[r], recv[r], count, dt, op, comms[r], streams[r]); break;
      case RS: res = ncclReduceScatter(send[r], recv[r], count, dt, op, comms[r], streams[r]); break;
      case AG: res = ncclAllGather(send[r], recv[r], count, dt, comms[r], streams[r]); break;
      case BC: res = ncclBroadcast(send[r], recv[r], count, dt, root, comms[r], streams[r]); break;
      case RD: res = ncclReduce(send[r], recv[r], count, dt, op, root, comms[r], streams[r]); break;
    }
    CHECK(res == ncclSuccess, "%s rank %d: %s", names[coll], r, ncclGetErrorString(res));
  }
  NCCL(ncclGroupEnd());
  int32_t* out = malloc(recvN * 4);
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamSynchronize(streams[r]));
    if (coll == RD && r != root) continue;
    SIM(nvlsSimMemcpyDtoH(out, recv[r], recvN * 4));
    int bad = 0;
    for (size_t i = 0; i < recvN && bad < 3; i++) {
      int64_t v[N], want;
      size_t src = coll == RS ? r * count + i : i;
      for (int q = 0; q < N; q++) v[q] = dt == ncclFloat32 ? (int64_t)((float*)host[q])[src] : host[q][src];
      if (coll == AG) want = dt == ncclFloat32 ? (int64_t)((float*)host[i / count])[i % count] : host[i / count][i % count];
      else if (coll == BC) want = v[root];
      else want = ref(op, v);
      int64_t got = dt == ncclFloat32 ? (int64_t)((float*)out)[i] : out[i];
      if (got != want) {
        bad++;
        CHECK(0, "%s %s op %d count %zu team %d rank %d [%zu]: got %lld want %lld", names[coll],
              dt == ncclFloat32 ? "f32" : "i32", op, count, team, r, i, (long long)got, (long long)want);
      }
    }
  }
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    if (team) {
      NCCL(ncclMemFree(send[r]));
      NCCL(ncclMemFree(recv[r]));
    } else {
      SIM(nvlsSimFree(send[r]));
      SIM(nvlsSimFree(recv[r]));
    }
    free(host[r]);
  }
  free(out);
}

/* sameAs checks that every rank's n int32 at bufs are want's (a
 * stream sync first), naming what. */
static void sameAs(void** bufs, cudaStream_t* streams, int32_t** want, size_t n, const char* what) {
  int32_t* out = malloc(n * 4);
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamSynchronize(streams[r]));
    SIM(nvlsSimMemcpyDtoH(out, bufs[r], n * 4));
    for (size_t i = 0; i < n; i++)
      if (out[i] != want[r][i]) {
        CHECK(0, "%s: rank %d [%zu] = %d, want %d", what, r, i, out[i], want[r][i]);
        break;
      }
  }
  free(out);
}

/* A group's calls that nvls runs start at the outermost ncclGroupEnd
 * (nccl.h: "nothing will be started on the CUDA stream until
 * ncclGroupEnd"), a call's argument error is its own result inside a
 * group too, and a group ended by ncclGroupSimulateEnd runs nothing:
 * without a real NCCL to estimate its calls, it says so. */
static void testGroupDefer(ncclComm_t* comms, cudaStream_t* streams) {
  enum { n = 3000 };
  void *send[N], *recv[N];
  int32_t *host[N], *pattern[N], *sum[N], *max[N];
  for (int r = 0; r < N; r++) {
    host[r] = malloc(n * 4), pattern[r] = malloc(n * 4), sum[r] = malloc(n * 4), max[r] = malloc(n * 4);
    for (size_t i = 0; i < n; i++) host[r][i] = rnd(), pattern[r][i] = -77777 - (int32_t)i;
  }
  for (int r = 0; r < N; r++)
    for (size_t i = 0; i < n; i++) {
      int64_t v[N];
      for (int q = 0; q < N; q++) v[q] = host[q][i];
      sum[r][i] = (int32_t)ref(ncclSum, v), max[r][i] = (int32_t)ref(ncclMax, v);
    }
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimMalloc(&send[r], n * 4));
    SIM(nvlsSimMalloc(&recv[r], n * 4));
    SIM(nvlsSimMemcpyHtoD(send[r], host[r], n * 4));
    SIM(nvlsSimMemcpyHtoD(recv[r], pattern[r], n * 4));
  }

  /* Simulated: nothing runs, and with no real NCCL the result says so. */
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCL(ncclAllReduce(send[r], recv[r], n, ncclInt32, ncclSum, comms[r], streams[r]));
  ncclResult_t res = ncclGroupSimulateEnd(&si);
  CHECK(res == ncclInvalidUsage, "a simulated group without a real NCCL: %d", res);
  CHECK(strstr(ncclGetLastError(NULL), "no real NCCL") != NULL, "the error says there is no real NCCL");
  CHECK(si.estimatedTime == NCCL_UNDEF_FLOAT, "the estimate changed to %g", si.estimatedTime);
  sameAs(recv, streams, pattern, n, "after ncclGroupSimulateEnd");
  /* A simInfo of no initializer: ncclInvalidArgument, the group ended. */
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCL(ncclAllReduce(send[r], recv[r], n, ncclInt32, ncclSum, comms[r], streams[r]));
  CHECK(ncclGroupSimulateEnd(&bad) == ncclInvalidArgument, "a simInfo without its magic");
  CHECK(strstr(ncclGetLastError(NULL), "NCCL_SIM_INFO_INITIALIZER") != NULL, "the error names the initializer");
  bad = (ncclSimInfo_t)NCCL_SIM_INFO_INITIALIZER;
  bad.size = 16, bad.version = 21903;
  NCCL(ncclGroupStart());
  CHECK(ncclGroupSimulateEnd(&bad) == ncclInvalidArgument, "a simInfo of NCCL 2.19");
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "the group is still open");
  sameAs(recv, streams, pattern, n, "after a failed ncclGroupSimulateEnd");
  /* An empty simulated group, and a NULL simInfo (an ncclGroupEnd). */
  NCCL(ncclGroupStart());
  NCCL(ncclGroupSimulateEnd(&si));
  NCCL(ncclGroupStart());
  NCCL(ncclGroupSimulateEnd(NULL));

  /* The next group runs; its argument errors come at the call, and its
   * calls start at the outermost ncclGroupEnd. */
  NCCL(ncclGroupStart());
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    res = ncclBroadcast(send[r], recv[r], n, ncclInt32, N, comms[r], streams[r]);
    CHECK(res == ncclInvalidArgument, "broadcast from root %d of %d ranks: %d", N, N, res);
    res = ncclReduce(send[r], recv[r], n, ncclInt32, ncclSum, -1, comms[r], streams[r]);
    CHECK(res == ncclInvalidArgument, "reduce to root -1: %d", res);
    res = ncclAllReduce(send[r], recv[r], n, (ncclDataType_t)ncclNumTypes, ncclSum, comms[r], streams[r]);
    CHECK(res == ncclInvalidArgument, "all-reduce of type %d: %d", ncclNumTypes, res);
    NCCL(ncclAllReduce(send[r], recv[r], n, ncclInt32, ncclSum, comms[r], streams[r]));
  }
  CHECK(strstr(ncclGetLastError(NULL), "invalid data type") != NULL, "the last error names the type");
  NCCL(ncclGroupEnd());
  sameAs(recv, streams, pattern, n, "before the outermost ncclGroupEnd");
  NCCL(ncclGroupEnd());
  sameAs(recv, streams, sum, n, "all-reduce sum of a group");
  /* In call order: the max over the sum, on the same streams. */
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    NCCL(ncclAllReduce(send[r], recv[r], n, ncclInt32, ncclMax, comms[r], streams[r]));
    NCCL(ncclAllReduce(recv[r], recv[r], n, ncclInt32, ncclSum, comms[r], streams[r]));
  }
  NCCL(ncclGroupEnd());
  for (int r = 0; r < N; r++)
    for (size_t i = 0; i < n; i++) max[r][i] *= N;
  sameAs(recv, streams, max, n, "max then sum in one group");
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimFree(send[r]));
    SIM(nvlsSimFree(recv[r]));
    free(host[r]), free(pattern[r]), free(sum[r]), free(max[r]);
  }
}

static void testInitAll(void) {
  ncclComm_t comms[N];
  cudaStream_t streams[N];
  NCCL(ncclCommInitAll(comms, N, NULL));
  for (int r = 0; r < N; r++) {
    int v;
    NCCL(ncclCommCount(comms[r], &v));
    CHECK(v == N, "count %d", v);
    NCCL(ncclCommUserRank(comms[r], &v));
    CHECK(v == r, "rank %d", v);
    NCCL(ncclCommCuDevice(comms[r], &v));
    CHECK(v == r, "device %d", v);
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamCreate(&streams[r]));
  }
  size_t counts[] = {1, 1000, 70000};
  int ops[] = {ncclSum, ncclMin, ncclMax};
  for (int c = 0; c < 3; c++)
    for (int team = 0; team < 2; team++) {
      for (int o = 0; o < 3; o++) {
        run(comms, streams, AR, ops[o], ncclInt32, counts[c], team, 0);
        run(comms, streams, RS, ops[o], ncclInt32, counts[c], team, 0);
        run(comms, streams, RD, ops[o], ncclInt32, counts[c], team, c % N);
      }
      run(comms, streams, AR, ncclSum, ncclFloat32, counts[c], team, 0);
      run(comms, streams, AG, ncclSum, ncclInt32, counts[c], team, 0);
      run(comms, streams, BC, ncclSum, ncclFloat32, counts[c], team, (c + 1) % N);
    }

  testGroupDefer(comms, streams);

  /* Forwarded without a real NCCL: an error that says so. */
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < N; r++) {
    res = ncclAllReduce(NULL, NULL, 8, ncclFloat64, ncclSum, comms[r], streams[r]);
    CHECK(res == ncclInvalidUsage, "f64 all-reduce: %d", res);
  }
  ncclGroupEnd();
  CHECK(strstr(ncclGetLastError(NULL), "forwarded to the real NCCL") != NULL, "last error names the forwarding");
  res = ncclSend(NULL, 8, ncclFloat32, 1, comms[0], streams[0]);
  CHECK(res == ncclInvalidUsage, "send: %d", res);

  ncclResult_t async;
  NCCL(ncclCommGetAsyncError(comms[0], &async));
  CHECK(async == ncclSuccess, "async %d", async);
  for (int r = 0; r < N; r++) NCCL(ncclCommFinalize(comms[r]));
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamDestroy(streams[r]));
    NCCL(ncclCommDestroy(comms[r]));
  }
  CHECK(ncclCommDestroy(comms[0]) == ncclInvalidArgument, "destroy twice");
}

/* One thread inits every rank inside a group, as nccl-tests -g N does
 * (ncclCommInitRankConfig per device between ncclGroupStart and
 * ncclGroupEnd: the inits complete at ncclGroupEnd), then runs
 * collectives and destroys the comms from the same thread. */
static void testGroupInit(void) {
  ncclUniqueId id;
  ncclComm_t comms[N];
  cudaStream_t streams[N];
  NCCL(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  double t0 = now();
  NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    NCCL(ncclCommInitRankConfig(&comms[r], N, id, r, &cfg));
  }
  NCCL(ncclGroupEnd());
  CHECK(now() - t0 < 30, "group init took %.1fs", now() - t0);
  for (int r = 0; r < N; r++) {
    int v;
    NCCL(ncclCommUserRank(comms[r], &v));
    CHECK(v == r, "rank %d", v);
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamCreate(&streams[r]));
  }
  run(comms, streams, AR, ncclSum, ncclFloat32, 1000, 1, 0);
  run(comms, streams, AR, ncclMax, ncclInt32, 70000, 0, 0);
  run(comms, streams, RS, ncclSum, ncclInt32, 1000, 1, 0);
  run(comms, streams, AG, ncclSum, ncclInt32, 1000, 0, 0);
  run(comms, streams, BC, ncclSum, ncclFloat32, 1000, 1, 2);
  run(comms, streams, RD, ncclMin, ncclInt32, 1000, 0, 3);
  /* nccl-tests frees its ncclMemAlloc buffers after ncclCommDestroy: the
   * memory outlives the communicator, as NCCL's does. */
  void* keep[N];
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    NCCL(ncclMemAlloc(&keep[r], 4096));
  }
  t0 = now();
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    SIM(nvlsSimStreamDestroy(streams[r]));
    NCCL(ncclCommDestroy(comms[r]));
  }
  CHECK(now() - t0 < 10, "destroy took %.1fs", now() - t0);
  for (int r = 0; r < N; r++) {
    SIM(nvlsSimSetDevice(r));
    NCCL(ncclMemFree(keep[r]));
  }
}

/* One thread per rank, ncclCommInitRank. */
static ncclUniqueId theID;
static int blocking;

static void* rankMain(void* arg) {
  int r = (int)(intptr_t)arg;
  SIM(nvlsSimSetDevice(r));
  ncclComm_t comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = blocking;
  /* The scalable init (PyTorch's) on odd ranks, one id for all. */
  ncclUniqueId ids[1] = {theID};
  ncclResult_t res = r % 2 ? ncclCommInitRankScalable(&comm, N, r, 1, ids, &cfg) : ncclCommInitRankConfig(&comm, N, theID, r, &cfg);
  if (!blocking) {
    CHECK(res == ncclInProgress || res == ncclSuccess, "non-blocking init: %d", res);
    ncclResult_t st = ncclInProgress;
    double t0 = now();
    while (st == ncclInProgress && now() - t0 < 60) ncclCommGetAsyncError(comm, &st);
    CHECK(st == ncclSuccess, "non-blocking init ended with %d", st);
  } else {
    CHECK(res == ncclSuccess, "init rank %d: %d", r, res);
  }
  cudaStream_t s;
  SIM(nvlsSimStreamCreate(&s));
  const size_t n = 5000;
  int32_t* buf;
  NCCL(ncclMemAlloc((void**)&buf, n * 4));
  int32_t* host = malloc(n * 4);
  for (size_t i = 0; i < n; i++) host[i] = (int32_t)(i * (r + 1));
  SIM(nvlsSimMemcpyHtoD(buf, host, n * 4));
  /* Even ranks call in a group: the call starts at ncclGroupEnd. */
  if (r % 2 == 0) NCCL(ncclGroupStart());
  NCCL(ncclAllReduce(buf, buf, n, ncclInt32, ncclSum, comm, s)); /* in place */
  if (r % 2 == 0) {
    int32_t* before = malloc(n * 4);
    SIM(nvlsSimStreamSynchronize(s));
    SIM(nvlsSimMemcpyDtoH(before, buf, n * 4));
    CHECK(memcmp(before, host, n * 4) == 0, "rank %d: the all-reduce ran before ncclGroupEnd", r);
    free(before);
    NCCL(ncclGroupEnd());
  }
  SIM(nvlsSimStreamSynchronize(s));
  SIM(nvlsSimMemcpyDtoH(host, buf, n * 4));
  for (size_t i = 0; i < n; i++) {
    if (host[i] != (int32_t)(i * (N * (N + 1) / 2))) {
      CHECK(0, "rank %d [%zu] = %d", r, i, host[i]);
      break;
    }
  }
  NCCL(ncclMemFree(buf));
  SIM(nvlsSimStreamDestroy(s));
  free(host);
  if (r == N - 1) {
    double t0 = now();
    NCCL(ncclCommAbort(comm));
    CHECK(now() - t0 < 5, "abort took %.1fs", now() - t0);
  } else {
    NCCL(ncclCommDestroy(comm));
  }
  return NULL;
}

static void testThreads(int block) {
  blocking = block;
  NCCL(ncclGetUniqueId(&theID));
  pthread_t th[N];
  for (int r = 0; r < N; r++) pthread_create(&th[r], NULL, rankMain, (void*)(intptr_t)r);
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
}

static void testBadIDs(void) {
  ncclComm_t comm;
  ncclUniqueId id;
  memset(&id, 0x5a, sizeof id);
  SIM(nvlsSimSetDevice(0));
  double t0 = now();
  CHECK(ncclCommInitRank(&comm, 2, id, 0) == ncclInvalidArgument, "garbage id");
  CHECK(strstr(ncclGetLastError(NULL), "not an nvls unique id") != NULL, "garbage id's error");
  NCCL(ncclGetUniqueId(&id));
  id.internal[20] ^= 0x7f; /* the token */
  CHECK(ncclCommInitRank(&comm, 2, id, 0) == ncclRemoteError, "wrong token");
  CHECK(strstr(ncclGetLastError(NULL), "wrong job token") != NULL, "wrong token's error");
  CHECK(now() - t0 < 2, "bad ids took %.1fs", now() - t0);
  /* A rank that never comes: an error by NVLS_SETUP_TIMEOUT (8s here). */
  NCCL(ncclGetUniqueId(&id));
  t0 = now();
  CHECK(ncclCommInitRank(&comm, 2, id, 0) == ncclRemoteError, "missing rank");
  double took = now() - t0;
  CHECK(took > 7 && took < 14, "missing rank took %.1fs", took);
  CHECK(strstr(ncclGetLastError(NULL), "did not") != NULL, "missing rank's error");
  /* Stale: that id's rendezvous gave up. */
  t0 = now();
  CHECK(ncclCommInitRank(&comm, 2, id, 1) == ncclRemoteError, "stale id");
  CHECK(now() - t0 < 2, "stale id took %.1fs", now() - t0);
}

static void testConfig(void) {
  ncclComm_t comm;
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.version = 22703;
  cfg.size = sizeof(cfg) - 8;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg) == ncclInvalidArgument, "2.27 config");
  CHECK(strstr(ncclGetLastError(NULL), "another layout") != NULL, "config error: %s", ncclGetLastError(NULL));
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg) == ncclInvalidArgument, "no magic");
  int v;
  NCCL(ncclGetVersion(&v));
  CHECK(v == NCCL_VERSION_CODE && v == 22803, "version %d", v);
}

int main(void) {
  seed = (unsigned)time(NULL) ^ (unsigned)clock();
  printf("seed %u\n", seed);
  testConfig();
  testInitAll();
  testGroupInit();
  testThreads(1);
  testThreads(0);
  testBadIDs();
  /* ncclResetDebugInit reads NVLS_DEBUG again, from the C environment:
   * the Go test looks for this init's INFO line, the only one. */
  setenv("NVLS_DEBUG", "INFO", 1);
  ncclResetDebugInit();
  ncclComm_t comms[2];
  NCCL(ncclCommInitAll(comms, 2, NULL));
  NCCL(ncclCommDestroy(comms[0]));
  NCCL(ncclCommDestroy(comms[1]));
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
