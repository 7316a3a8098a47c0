// llprobe.cu: the floor of a small collective between two GPUs, with no
// nvls in the way (issue 22: where the time of an 8-byte all-reduce goes).
// Two processes (fork), one GPU each, as nvls-bench-mpi runs; each
// cudaMallocs a word pair, and the two map each other's through CUDA IPC.
// Per configuration, each process captures N launches of one kernel into
// a graph and replays it REPS times; before each replay the processes meet
// on a pipe, so their replays start within a few microseconds of each
// other. Printed per process: the median over the replays of the time per
// kernel (CUDA events around the replay, divided by N), and for ping the
// mean time inside the kernel from its first instruction after the wait
// to seeing the peer's word (%globaltimer, thread 0).
//
// Kernels (every one starts with griddepcontrol.wait, as nvls's do):
//   empty  nothing more: the kernel boundary of a graph, the floor F
//   ping   thread 0 stores its epoch into the peer's word (st.relaxed.sys)
//          and polls its own until the peer's epoch arrives: one exchange,
//          what an LL all-reduce of one line needs at least
//   line   the same with LL's 16-byte lines (stored to both GPUs)
//   linex  line with the loads and stores nvls's LL kernel makes around it
//   line168  line with a 168-byte parameter, nvls_params' size
//   nvls   nvls's own LL all-reduce kernel of 8 bytes (f32 sum, 2
//          elements), loaded from the unicast PTX (PTX, default
//          ptx/allreduce_uc.ptx) and launched as collectives does (grid 1,
//          32 threads, its params built here over workspaces of cudaMalloc
//          memory mapped through IPC); its result is checked
// each launched with and without programmatic stream serialization (pdl),
// with blocks of 32 and 512 threads. No multicast, no multimem: unicast
// peer stores only (DEVELOPERS.md's safety rule).
//
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -Ikernels -o llprobe scripts/llprobe.cu -lcuda
//   ./llprobe [REPS [PTX [nvls|bw|piece]]]  (nvls: only the nvls kernel;
//                                      bw: only runBW's link bandwidths:
//                                      copy engines, SM copies, TMA copies,
//                                      and copy engine and SMs at once;
//                                      piece: only runPiece's, SM pushes
//                                      in pieces as the ring reduce's)
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NVLS_MULTICAST 0
#include "nvls.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "probe.h"  // CK, CU

struct Args {
  unsigned *own;                 // [0]: the word the peer writes; [1]: this GPU's epoch (see k_line)
  unsigned *peer;                // the peer's [0]
  unsigned long long *inside;    // [0]: sum of in-kernel times (ns), [1]: count
};

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void k_empty(Args a) { pdl_wait(); }

__global__ void k_ping(Args a) {
  pdl_wait();
  if (threadIdx.x != 0) return;
  unsigned long long t0 = gtime();
  unsigned e = a.own[1] + 1;
  a.own[1] = e;
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(a.peer), "r"(e) : "memory");
  unsigned v;
  do {
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(a.own) : "memory");
  } while ((int)(v - e) < 0);
  unsigned long long t1 = gtime();
  a.inside[0] += t1 - t0;
  a.inside[1] += 1;
}

// line: as LL does it, one 16-byte line {data, e, data, e} stored into the
// own and the peer's area (st.volatile.v4), then the own area's peer line
// polled (ld.volatile.v4) until both flags are e or later. own[4..7]: the line the
// peer writes, own[8..11] the own one, own[1] the epoch.
__device__ __forceinline__ void line_exchange(const Args &a, unsigned e) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%1,%2};" ::"l"(a.peer + 4), "r"(e * 3u), "r"(e) : "memory");
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%1,%2};" ::"l"(a.own + 8), "r"(e * 3u), "r"(e) : "memory");
  unsigned d0, f0, d1, f1;
  do {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                 : "l"(a.own + 4)
                 : "memory");
  } while ((int)(f0 - e) < 0 || (int)(f1 - e) < 0);  // a later epoch: the peer is a call ahead (one slot, no parities)
}

__global__ void k_line(Args a) {
  pdl_wait();
  if (threadIdx.x != 0) return;
  unsigned long long t0 = gtime();
  unsigned e = a.own[1] + 1;
  a.own[1] = e;
  line_exchange(a, e);
  unsigned long long t1 = gtime();
  a.inside[0] += t1 - t0;
  a.inside[1] += 1;
}

// linex: line with what nvls's LL kernel does around it: the epoch and the
// team-failed word loaded with ld.relaxed.sys, the payload loaded from
// memory, the result stored, and the epoch stored after a __syncthreads.
__global__ void k_linex(Args a) {
  pdl_wait();
  unsigned long long t0 = gtime();
  unsigned e = 0, failed = 0, v = 0;
  if (threadIdx.x == 0) {
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(e) : "l"(a.own + 1) : "memory");
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(failed) : "l"(a.own + 2) : "memory");
    v = a.own[3];
    e += 1;
    if (failed == 0) line_exchange(a, e);
    a.own[16] = v + e;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a.own[1] = e;
    unsigned long long t1 = gtime();
    a.inside[0] += t1 - t0;
    a.inside[1] += 1;
  }
}

// copy: SM copy of n16 16-byte vectors from src to dst (either may be the
// peer's, through IPC), grid-stride.
__global__ void k_copy(const int4 *src, int4 *dst, size_t n16) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

// piece: the ring reduce's store pattern without its waits. Block b
// pushes pieces b, b + grid, ... of piece16 vectors from src to dst (the
// peer's), in chunks of blockDim x V vectors (a thread's V loads issued
// together, then its V stores: reduce.cu's reduce_push), and after each
// piece, once the block is done with it, thread 0 fences
// (fence.acq_rel.sys, if fence) and stores the piece's number into the
// block's flag word (the peer's): what the ring pays a piece besides the
// bytes.
template <int V>
__global__ void k_piece(const int4 *src, int4 *dst, size_t n16, size_t piece16, int fence, unsigned *flag) {
  const size_t chunk = (size_t)blockDim.x * V;
  unsigned k = 0;
  for (size_t a = blockIdx.x * piece16; a < n16; a += gridDim.x * piece16, k++) {
    const size_t m = n16 - a < piece16 ? n16 - a : piece16;
    for (size_t c0 = 0; c0 < m; c0 += chunk) {
      nvls_vec x[V];
#pragma unroll
      for (int j = 0; j < V; j++) {
        const size_t v = c0 + threadIdx.x + (size_t)j * blockDim.x;
        if (v < m) x[j] = ld_own_v4((u64)(src + a + v));
      }
#pragma unroll
      for (int j = 0; j < V; j++) {
        const size_t v = c0 + threadIdx.x + (size_t)j * blockDim.x;
        if (v < m) st_v4((u64)(dst + a + v), x[j]);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (fence) asm volatile("fence.acq_rel.sys;" ::: "memory");
      asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(flag + blockIdx.x), "r"(k + 1) : "memory");
    }
  }
}

// tma_copy: the bulk-copy (TMA) engine's copy of n bytes (a multiple of
// TMA_CHUNK) from src to dst, either of them the peer's: thread 0 of each
// block moves chunks blockIdx.x, + gridDim.x, ... through TMA_STAGES
// shared-memory slots, each chunk loaded by cp.async.bulk (global ->
// shared, completing on the slot's mbarrier) and stored by cp.async.bulk
// (shared -> global, one bulk group a chunk), with TMA_STAGES - 1 loads
// ahead of the store in flight. issue 22's "bulk (TMA) copies for peer
// traffic": do they cross the link faster than the SMs' stores (368 GB/s
// at 2 GPUs, run 41) or the copy engines (395)?
#define TMA_CHUNK (16u << 10)
#define TMA_STAGES 4  // 64 KiB of dynamic shared memory a block (static is capped at 48 KiB)
__device__ __forceinline__ unsigned probe_smem(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void tma_load(unsigned slot, const char *src, unsigned bytes, unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(slot), "l"(src),
               "r"(bytes), "r"(bar)
               : "memory");
}

__device__ __forceinline__ void tma_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}

__global__ void k_tma_copy(const char *src, char *dst, size_t n) {
  extern __shared__ __align__(128) char buf[][TMA_CHUNK];  // TMA_STAGES slots
  __shared__ __align__(8) unsigned long long bars[TMA_STAGES];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < TMA_STAGES; i++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(probe_smem(&bars[i])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const size_t chunks = n / TMA_CHUNK;
  const size_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;  // this block's chunks
  auto at = [&](size_t i) { return (blockIdx.x + i * gridDim.x) * (size_t)TMA_CHUNK; };
  for (size_t i = 0; i < mine && i < TMA_STAGES - 1; i++)
    tma_load(probe_smem(buf[i % TMA_STAGES]), src + at(i), TMA_CHUNK, probe_smem(&bars[i % TMA_STAGES]));
  for (size_t i = 0; i < mine; i++) {
    const unsigned slot = i % TMA_STAGES;
    tma_wait(probe_smem(&bars[slot]), (unsigned)(i / TMA_STAGES) & 1);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + at(i)), "r"(probe_smem(buf[slot])),
                 "r"(TMA_CHUNK)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    const size_t next = i + TMA_STAGES - 1;  // into the slot of store i - 1, once that store has read it
    if (next < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      tma_load(probe_smem(buf[next % TMA_STAGES]), src + at(next), TMA_CHUNK, probe_smem(&bars[next % TMA_STAGES]));
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Big: Args padded to nvls_params' 168 bytes, for k_line168 (does the
// parameter's size cost a launch anything?).
struct Big {
  Args a;
  unsigned long long pad[18];
};
static_assert(sizeof(Big) == 168, "Big is nvls_params' size");

__global__ void k_line168(Big b) {
  pdl_wait();
  if (threadIdx.x != 0) return;
  unsigned long long t0 = gtime();
  unsigned e = b.a.own[1] + 1;
  b.a.own[1] = e;
  line_exchange(b.a, e);
  unsigned long long t1 = gtime();
  b.a.inside[0] += t1 - t0 + b.pad[17];
  b.a.inside[1] += 1;
}

static int rd_all(int fd, void *p, size_t n) {
  char *c = (char *)p;
  while (n > 0) {
    ssize_t k = read(fd, c, n);
    if (k <= 0) return -1;
    c += k, n -= (size_t)k;
  }
  return 0;
}

static int wr_all(int fd, const void *p, size_t n) {
  const char *c = (const char *)p;
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k <= 0) return -1;
    c += k, n -= (size_t)k;
  }
  return 0;
}

// meet: both processes pass here before either goes on.
static void meet(int rfd, int wfd) {
  char b = 1;
  if (wr_all(wfd, &b, 1) || rd_all(rfd, &b, 1)) {
    fprintf(stderr, "llprobe: the other process is gone\n");
    exit(1);
  }
}

// timeGraph replays graph x reps times (after 5 untimed), meeting the
// other process before each, and returns the sorted times per kernel.
static std::vector<float> timeGraph(cudaGraphExec_t x, cudaStream_t s, int n, int reps, int rfd, int wfd,
                                    unsigned long long *inside) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> per;
  for (int r = -5; r < reps; r++) {
    if (r == 0 && inside) CK(cudaMemsetAsync(inside, 0, 16, s));
    CK(cudaStreamSynchronize(s));
    meet(rfd, wfd);
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(x, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 0) per.push_back(ms * 1000.0f / n);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(per.begin(), per.end());
  return per;
}

static void report(int rank, const char *k, int threads, int pdl, int n, const std::vector<float> &per) {
  printf("rank %d %-5s threads %3d pdl %d n %3d: %6.2f us/kernel (p10 %6.2f, p90 %6.2f)", rank, k, threads, pdl, n,
         per[per.size() / 2], per[per.size() / 10], per[per.size() * 9 / 10]);
}

// runNVLS times nvls's LL all-reduce kernel from the PTX at path.
static void runNVLS(int rank, int rfd, int wfd, int reps, const char *path, cudaStream_t s) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "llprobe: %s: cannot open\n", path);
    exit(1);
  }
  std::vector<char> img;
  char buf[65536];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0) img.insert(img.end(), buf, buf + k);
  fclose(f);
  img.push_back(0);
  CUmodule mod;
  CUfunction fn;
  CU(cuModuleLoadData(&mod, img.data()));
  CU(cuModuleGetFunction(&fn, mod, "nvls_allreduce_ll_f32_sum"));
  // Each rank's workspace: the signal area, then the LL area.
  const size_t wsBytes = NVLS_SIGNAL_BYTES + 64 * 1024;
  char *ws;
  float *send, *recv;
  CK(cudaMalloc(&ws, wsBytes));
  CK(cudaMemset(ws, 0, wsBytes));
  CK(cudaMalloc(&send, 16));
  CK(cudaMalloc(&recv, 16));
  float in[2] = {1.0f + rank, 10.0f * (1 + rank)};
  CK(cudaMemcpy(send, in, sizeof in, cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t mine, theirs;
  CK(cudaIpcGetMemHandle(&mine, ws));
  if (wr_all(wfd, &mine, sizeof mine) || rd_all(rfd, &theirs, sizeof theirs)) exit(1);
  char *peer;
  CK(cudaIpcOpenMemHandle((void **)&peer, theirs, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaDeviceSynchronize());
  meet(rfd, wfd);
  struct nvls_params p;
  memset(&p, 0, sizeof p);
  p.uc[rank] = (u64)ws;
  p.uc[1 - rank] = (u64)peer;
  p.send = (u64)send;
  p.recv = (u64)recv;
  p.ll_area = NVLS_SIGNAL_BYTES;
  p.count = 2;
  p.call_count = 2;
  p.elem_bytes = 4;
  p.ll_lines = 64;
  p.rank = rank;
  p.nranks = 2;
  p.opcode = NVLS_OP_ALLREDUCE;
  p.flags = NVLS_FLAG_ABS_PTRS;
  p.check = 0x2a5;
  for (int pdl = 0; pdl < 2; pdl++)
    for (int n : {20, 100}) {
      CUlaunchAttribute attr;
      memset(&attr, 0, sizeof attr);
      attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig cfg;
      memset(&cfg, 0, sizeof cfg);
      cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
      cfg.hStream = (CUstream)s;
      cfg.attrs = pdl ? &attr : nullptr, cfg.numAttrs = pdl ? 1 : 0;
      void *params[] = {&p};
      cudaGraph_t g;
      cudaGraphExec_t x;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < n; i++) CU(cuLaunchKernelEx(&cfg, fn, params, nullptr));
      CK(cudaStreamEndCapture(s, &g));
      CK(cudaGraphInstantiate(&x, g, 0));
      CK(cudaMemset(recv, 0, 16));
      std::vector<float> per = timeGraph(x, s, n, reps, rfd, wfd, nullptr);
      float out[2];
      CK(cudaMemcpy(out, recv, sizeof out, cudaMemcpyDeviceToHost));
      report(rank, "nvls", 32, pdl, n, per);
      printf("  result %s (%g %g)\n", out[0] == 3.0f && out[1] == 30.0f ? "right" : "WRONG", out[0], out[1]);
      fflush(stdout);
      CK(cudaGraphExecDestroy(x));
      CK(cudaGraphDestroy(g));
      meet(rfd, wfd);
    }
  CK(cudaIpcCloseMemHandle(peer));
  CU(cuModuleUnload(mod));
}

// runBW measures how fast 512 MiB crosses the link one way and both ways:
// the copy engines (cudaMemcpyAsync to or from the peer's memory, on 1
// and on 4 streams of a quarter each) against the SMs (k_copy, pushing
// stores or pulling loads, 132 x 4 blocks of 512 threads) and the
// bulk-copy engines (k_tma_copy, 132 to 528 blocks; their bytes checked).
// GB/s = 2^29 bytes / the median of 10 timed runs (after 2). The "mix"
// tests split the bytes between the copy engine and an SM copy at once;
// for mix 2 each rank prints the time of its own part.
static void runBW(int rank, int rfd, int wfd) {
  const size_t n = 512u << 20;
  char *src, *dst;
  CK(cudaMalloc(&src, n));
  CK(cudaMalloc(&dst, n));
  CK(cudaMemset(src, rank + 1, n));
  cudaIpcMemHandle_t h[2], ph[2];
  CK(cudaIpcGetMemHandle(&h[0], src));
  CK(cudaIpcGetMemHandle(&h[1], dst));
  if (wr_all(wfd, h, sizeof h) || rd_all(rfd, ph, sizeof ph)) exit(1);
  char *psrc, *pdst;
  CK(cudaIpcOpenMemHandle((void **)&psrc, ph[0], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&pdst, ph[1], cudaIpcMemLazyEnablePeerAccess));
  cudaStream_t st[4];
  for (auto &x : st) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, done[4];
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (auto &x : done) CK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
  CK(cudaFuncSetAttribute(k_tma_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, TMA_STAGES * TMA_CHUNK));
  CK(cudaDeviceSynchronize());
  struct Test {
    const char *name;
    int both;     // both ranks copy at once (else rank 0 alone)
    int engine;   // 1: copy engine, 0: SM kernel, 2: bulk-copy (TMA) kernel
    int push;     // 1: own -> peer, 0: peer -> own
    int streams;  // copy engine: streams of n / streams bytes each
    int blocks;   // SM kernel: its grid (0: 132 x 4)
    // mix: two carriers at once over rank 0 -> rank 1, the copy engine
    // taking ce_pct percent of the bytes (one stream) and an SM copy
    // (blocks) the rest: 1, both on rank 0 (CE push + SM push, timed
    // together); 2, rank 0's CE push beside rank 1's SM pull (each rank
    // times its own part; the pair's rate is n / the slower).
    int mix;
    int ce_pct;
  } tests[] = {
      {"ce push 1 stream", 0, 1, 1, 1}, {"ce push 4 streams", 0, 1, 1, 4}, {"ce pull 1 stream", 0, 1, 0, 1},
      {"ce pull 4 streams", 0, 1, 0, 4}, {"sm push", 0, 0, 1, 1},           {"sm pull", 0, 0, 0, 1},
      {"ce push 4 streams, both ways", 1, 1, 1, 4}, {"sm push, both ways", 1, 0, 1, 1},
      // nvls's grids: at most the SM count (132 on H100 and H200)
      {"sm push 132 blocks", 0, 0, 1, 1, 132}, {"sm pull 132 blocks", 0, 0, 0, 1, 132},
      // TMA: one issuing thread a block, 64 KiB of slots a block
      {"tma push 132 blocks", 0, 2, 1, 1, 132}, {"tma pull 132 blocks", 0, 2, 0, 1, 132},
      {"tma push 264 blocks", 0, 2, 1, 1, 264}, {"tma pull 264 blocks", 0, 2, 0, 1, 264},
      {"tma push 528 blocks", 0, 2, 1, 1, 528}, {"tma push 264 blocks, both ways", 1, 2, 1, 1, 264},
      // Two carriers on one direction: does the link carry more than the
      // copy engine's 395 GB/s alone?
      {"mix ce 90% + sm push 32 blocks", 0, 1, 1, 1, 32, 1, 90}, {"mix ce 80% + sm push 32 blocks", 0, 1, 1, 1, 32, 1, 80},
      {"mix ce 80% + sm push 132 blocks", 0, 1, 1, 1, 132, 1, 80}, {"mix ce 70% + sm push 132 blocks", 0, 1, 1, 1, 132, 1, 70},
      {"mix ce 50% + sm push 132 blocks", 0, 1, 1, 1, 132, 1, 50}, {"mix ce 90% + sm pull 32 blocks", 1, 1, 1, 1, 32, 2, 90},
      {"mix ce 80% + sm pull 132 blocks", 1, 1, 1, 1, 132, 2, 80}, {"mix ce 50% + sm pull 132 blocks", 1, 1, 1, 1, 132, 2, 50},
  };
  for (const Test &t : tests) {
    const bool active = t.both || rank == 0;
    // Whose dst the copies fill: the peer's (push), rank 0's own (pull),
    // both (both ways). Zeroed before a TMA test and checked after it:
    // rank r's src holds r + 1 in every byte.
    const bool filled = t.both || (t.push ? rank == 1 : rank == 0);
    if (t.engine == 2) {
      CK(cudaMemset(dst, 0, n));
      CK(cudaDeviceSynchronize());
      meet(rfd, wfd);
    }
    std::vector<float> ms;
    for (int r = -2; r < 10; r++) {
      meet(rfd, wfd);
      if (!active) continue;
      char *from = t.push ? src : psrc, *to = t.push ? pdst : dst;
      CK(cudaEventRecord(e0, st[0]));
      const size_t ce = n / 100 * t.ce_pct / (1 << 20) * (1 << 20);  // whole MiB
      if (t.mix == 1 || (t.mix == 2 && rank == 0)) {
        // rank 0: the CE's share pushed on st[0]; for mix 1 the SMs' share
        // pushed on st[1] at once, joined back into st[0].
        CK(cudaMemcpyAsync(pdst, src, ce, cudaMemcpyDeviceToDevice, st[0]));
        if (t.mix == 1) {
          CK(cudaStreamWaitEvent(st[1], e0, 0));
          k_copy<<<t.blocks, 512, 0, st[1]>>>((const int4 *)(src + ce), (int4 *)(pdst + ce), (n - ce) / 16);
          CK(cudaGetLastError());
          CK(cudaEventRecord(done[1], st[1]));
          CK(cudaStreamWaitEvent(st[0], done[1], 0));
        }
      } else if (t.mix == 2) {
        // rank 1: the SMs' share pulled from rank 0's src into its dst.
        k_copy<<<t.blocks, 512, 0, st[0]>>>((const int4 *)(psrc + ce), (int4 *)(dst + ce), (n - ce) / 16);
        CK(cudaGetLastError());
      } else if (t.engine == 1) {
        const size_t part = n / t.streams;
        for (int i = 1; i < t.streams; i++) CK(cudaStreamWaitEvent(st[i], e0, 0));
        for (int i = 0; i < t.streams; i++) CK(cudaMemcpyAsync(to + i * part, from + i * part, part, cudaMemcpyDeviceToDevice, st[i]));
        for (int i = 1; i < t.streams; i++) {
          CK(cudaEventRecord(done[i], st[i]));
          CK(cudaStreamWaitEvent(st[0], done[i], 0));
        }
      } else if (t.engine == 2) {
        k_tma_copy<<<t.blocks, 32, TMA_STAGES * TMA_CHUNK, st[0]>>>(from, to, n);
        CK(cudaGetLastError());
      } else {
        k_copy<<<t.blocks ? t.blocks : 132 * 4, 512, 0, st[0]>>>((const int4 *)from, (int4 *)to, n / 16);
        CK(cudaGetLastError());
      }
      CK(cudaEventRecord(e1, st[0]));
      CK(cudaEventSynchronize(e1));
      float x;
      CK(cudaEventElapsedTime(&x, e0, e1));
      if (r >= 0) ms.push_back(x);
    }
    if (active) {
      std::sort(ms.begin(), ms.end());
      printf("rank %d bw %-30s %7.1f GB/s (%8.1f us)\n", rank, t.name, n / (ms[ms.size() / 2] * 1e-3) / 1e9, ms[ms.size() / 2] * 1e3);
      fflush(stdout);
    }
    if (t.engine == 2) {
      meet(rfd, wfd);  // every copy of this test has finished
      if (filled) {
        std::vector<char> back(n);
        CK(cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost));
        const char want = (char)(2 - rank);
        const size_t bad = std::count_if(back.begin(), back.end(), [want](char c) { return c != want; });
        printf("rank %d bw %-30s check: %s (%zu of %zu bytes wrong)\n", rank, t.name, bad ? "WRONG" : "right", bad, n);
        fflush(stdout);
      }
      meet(rfd, wfd);
    }
  }
  CK(cudaIpcCloseMemHandle(psrc));
  CK(cudaIpcCloseMemHandle(pdst));
}

// runPiece measures k_piece's rate one way (rank 0 pushing into rank
// 1) and both ways at once (as the ring's middle ranks store and take),
// over grids, piece sizes, vectors a thread and with or without the
// fence a piece: 512 MiB less 1 MiB (the flag words, at the end of the
// peer's dst), GB/s from the median of 10 timed runs (after 2), blocks
// of 512 threads. As runBW's "sm push" rows, but for the ring's shape.
static void runPiece(int rank, int rfd, int wfd) {
  const size_t n = 512u << 20, body = n - (1u << 20);
  char *src, *dst;
  CK(cudaMalloc(&src, n));
  CK(cudaMalloc(&dst, n));
  CK(cudaMemset(src, rank + 1, n));
  cudaIpcMemHandle_t h, ph;
  CK(cudaIpcGetMemHandle(&h, dst));
  if (wr_all(wfd, &h, sizeof h) || rd_all(rfd, &ph, sizeof ph)) exit(1);
  char *pdst;
  CK(cudaIpcOpenMemHandle((void **)&pdst, ph, cudaIpcMemLazyEnablePeerAccess));
  unsigned *flag = (unsigned *)(pdst + body);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaDeviceSynchronize());
  struct Test {
    int both, blocks, piece_kib, vecs, fence;
  } tests[] = {
      {0, 16, 128, 4, 0}, {0, 32, 128, 4, 0}, {0, 64, 128, 4, 0}, {0, 127, 128, 4, 0},
      {0, 16, 128, 4, 1}, {0, 32, 128, 4, 1}, {0, 64, 128, 4, 1}, {0, 127, 128, 4, 1},
      {0, 16, 128, 8, 1}, {0, 32, 128, 8, 1}, {0, 64, 128, 8, 1}, {0, 127, 128, 8, 1},
      {0, 32, 32, 4, 1},  {0, 64, 32, 4, 1},  {0, 127, 32, 4, 1}, {0, 16, 512, 4, 1},
      {0, 32, 512, 4, 1}, {0, 64, 512, 8, 1},
      {1, 32, 128, 4, 1}, {1, 64, 128, 4, 1}, {1, 127, 128, 4, 1}, {1, 32, 128, 8, 1},
      {1, 64, 128, 8, 1}, {1, 127, 128, 8, 1},
  };
  for (const Test &t : tests) {
    const bool active = t.both || rank == 0;
    const size_t piece16 = (size_t)t.piece_kib * 1024 / 16;
    std::vector<float> ms;
    for (int r = -2; r < 10; r++) {
      meet(rfd, wfd);
      if (!active) continue;
      CK(cudaEventRecord(e0, st));
      if (t.vecs == 8)
        k_piece<8><<<t.blocks, 512, 0, st>>>((const int4 *)src, (int4 *)pdst, body / 16, piece16, t.fence, flag);
      else
        k_piece<4><<<t.blocks, 512, 0, st>>>((const int4 *)src, (int4 *)pdst, body / 16, piece16, t.fence, flag);
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float x;
      CK(cudaEventElapsedTime(&x, e0, e1));
      if (r >= 0) ms.push_back(x);
    }
    if (active) {
      std::sort(ms.begin(), ms.end());
      const float med = ms[ms.size() / 2];
      printf("rank %d piece %-9s blocks %3d piece %3d KiB vecs %d fence %d %7.1f GB/s (%8.1f us)\n", rank, t.both ? "both ways" : "one way",
             t.blocks, t.piece_kib, t.vecs, t.fence, body / (med * 1e-3) / 1e9, med * 1e3);
      fflush(stdout);
    }
  }
  meet(rfd, wfd);
  CK(cudaIpcCloseMemHandle(pdst));
}

static void run(int rank, int rfd, int wfd, int reps, const char *ptxPath, const char *only) {
  CK(cudaSetDevice(rank));
  unsigned *own;
  unsigned long long *inside;
  CK(cudaMalloc(&own, 256));
  CK(cudaMemset(own, 0, 256));
  CK(cudaMalloc(&inside, 16));
  cudaIpcMemHandle_t mine, theirs;
  CK(cudaIpcGetMemHandle(&mine, own));
  if (wr_all(wfd, &mine, sizeof mine) || rd_all(rfd, &theirs, sizeof theirs)) exit(1);
  unsigned *peer;
  CK(cudaIpcOpenMemHandle((void **)&peer, theirs, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaDeviceSynchronize());
  meet(rfd, wfd);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Args a = {own, peer, inside};
  if (only != nullptr && strcmp(only, "bw") == 0) {
    CK(cudaIpcCloseMemHandle(peer));
    runBW(rank, rfd, wfd);
    return;
  }
  if (only != nullptr && strcmp(only, "piece") == 0) {
    CK(cudaIpcCloseMemHandle(peer));
    runPiece(rank, rfd, wfd);
    return;
  }
  if (only != nullptr && strcmp(only, "nvls") == 0) {
    CK(cudaIpcCloseMemHandle(peer));
    runNVLS(rank, rfd, wfd, reps, ptxPath, s);
    return;
  }
  const char *kname[] = {"empty", "ping", "line", "linex", "line168"};
  void (*kfn[])(Args) = {k_empty, k_ping, k_line, k_linex, nullptr};
  Big big = {};
  big.a = a;
  for (int k = 0; k < 5; k++)
    for (int threads : {32, 512})
      for (int pdl = 0; pdl < 2; pdl++)
        for (int n : {20, 100}) {
          cudaLaunchAttribute attr;
          attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr.val.programmaticStreamSerializationAllowed = 1;
          cudaLaunchConfig_t cfg = {};
          cfg.gridDim = dim3(1), cfg.blockDim = dim3(threads), cfg.stream = s;
          cfg.attrs = pdl ? &attr : nullptr, cfg.numAttrs = pdl ? 1 : 0;
          cudaGraph_t g;
          cudaGraphExec_t x;
          CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < n; i++) {
            if (kfn[k] != nullptr)
              CK(cudaLaunchKernelEx(&cfg, kfn[k], a));
            else
              CK(cudaLaunchKernelEx(&cfg, k_line168, big));
          }
          CK(cudaStreamEndCapture(s, &g));
          CK(cudaGraphInstantiate(&x, g, 0));
          std::vector<float> per = timeGraph(x, s, n, reps, rfd, wfd, k >= 1 ? inside : nullptr);
          unsigned long long in[2];
          CK(cudaMemcpy(in, inside, 16, cudaMemcpyDeviceToHost));
          report(rank, kname[k], threads, pdl, n, per);
          if (k >= 1 && in[1] > 0) printf("  inside %5.2f us", in[0] / 1e3 / in[1]);
          printf("\n");
          fflush(stdout);
          CK(cudaGraphExecDestroy(x));
          CK(cudaGraphDestroy(g));
          meet(rfd, wfd);
        }
  CK(cudaIpcCloseMemHandle(peer));
  runNVLS(rank, rfd, wfd, reps, ptxPath, s);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  const char *ptxPath = argc > 2 ? argv[2] : "ptx/allreduce_uc.ptx";
  const char *only = argc > 3 ? argv[3] : nullptr;
  int up[2], down[2];  // up: child -> parent, down: parent -> child
  if (pipe(up) || pipe(down)) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    run(1, down[0], up[1], reps, ptxPath, only);
    return 0;
  }
  run(0, up[0], down[1], reps, ptxPath, only);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
