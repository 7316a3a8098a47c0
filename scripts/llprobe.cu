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
// each launched with and without programmatic stream serialization (pdl),
// with blocks of 32 and 512 threads. No multicast, no multimem: unicast
// peer stores only (DEVELOPERS.md's safety rule).
//
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -o llprobe scripts/llprobe.cu && ./llprobe [REPS]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

struct Args {
  unsigned *own;                 // [0]: the word the peer writes; [1]: this GPU's epoch
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

static void run(int rank, int rfd, int wfd, int reps) {
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
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  Args a = {own, peer, inside};
  const char *kname[] = {"empty", "ping"};
  void (*kfn[])(Args) = {k_empty, k_ping};
  for (int k = 0; k < 2; k++)
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
          for (int i = 0; i < n; i++) CK(cudaLaunchKernelEx(&cfg, kfn[k], a));
          CK(cudaStreamEndCapture(s, &g));
          CK(cudaGraphInstantiate(&x, g, 0));
          std::vector<float> per;
          for (int r = -5; r < reps; r++) {  // 5 warm-up replays
            if (r == 0) CK(cudaMemsetAsync(inside, 0, 16, s));
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
          unsigned long long in[2];
          CK(cudaMemcpy(in, inside, 16, cudaMemcpyDeviceToHost));
          std::sort(per.begin(), per.end());
          printf("rank %d %-5s threads %3d pdl %d n %3d: %6.2f us/kernel (p10 %6.2f, p90 %6.2f)", rank, kname[k], threads,
                 pdl, n, per[per.size() / 2], per[per.size() / 10], per[per.size() * 9 / 10]);
          if (k == 1 && in[1] > 0) printf("  inside %5.2f us", in[0] / 1e3 / in[1]);
          printf("\n");
          fflush(stdout);
          CK(cudaGraphExecDestroy(x));
          CK(cudaGraphDestroy(g));
          meet(rfd, wfd);
        }
  CK(cudaIpcCloseMemHandle(peer));
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  int up[2], down[2];  // up: child -> parent, down: parent -> child
  if (pipe(up) || pipe(down)) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    run(1, down[0], up[1], reps);
    return 0;
  }
  run(0, up[0], down[1], reps);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
