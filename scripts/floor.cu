// floor.cu: what a C program gets on this GPU for the waits that bound a
// synchronous collective (issue 14, docs/sync.md), with no Go in the way.
// Built and run on the GPU machine (no multicast, no multimem):
//
//   nvcc -O2 -arch=sm_90 -o floor scripts/floor.cu -lcuda && ./floor
//
// Each line is the mean over -n iterations (after a warm-up) of one
// enqueue and its wait, in microseconds, and over the memset floor of the
// same run (a 4-byte cuMemsetD32Async and a cuStreamQuery spin).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe.h"  // CK, CU

struct params160 {
  unsigned long long w[20];
};

__global__ void empty() {}
__global__ void empty_params(params160 p) {
  if (p.w[19] == 12345) p.w[0] = 1;  // never true: keeps the parameter
}

// flag_host: the last thing the kernel does is store seq into mapped host
// memory (system scope), as a collective's done word would.
__global__ void flag_host(volatile unsigned* host, unsigned seq) {
  __threadfence_system();
  *host = seq;
}

// handshake: rank r of n publishes seq in its flag, then waits until every
// rank's flag reaches seq: the least a 2- or 4-rank collective does.
__global__ void handshake(volatile unsigned* flags, int r, int n, unsigned seq) {
  if (threadIdx.x != 0) return;
  __threadfence();
  flags[r * 32] = seq;
  for (int k = 0; k < n; k++)
    while ((int)(flags[k * 32] - seq) < 0) {
    }
}

// handshake_all: one launch doing the handshake of n ranks (a fused launch
// for ranks that share a GPU and a context).
__global__ void handshake_all(volatile unsigned* flags, int n, unsigned seq) {
  if (threadIdx.x >= n) return;
  flags[threadIdx.x * 32] = seq;
  __syncthreads();
}

static double now_us() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void spin(CUstream s) {
  CUresult r;
  while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY) {
  }
  CU(r);
}

static int iters = 20000;
static double floor_us;

static void report(const char* name, double t0, double t1) {
  double us = (t1 - t0) / iters;
  if (floor_us == 0) floor_us = us;
  printf("%-44s %8.2f us  %5.2f x floor\n", name, us, us / floor_us);
}

#define BENCH(name, ...)                                 \
  do {                                                   \
    for (int i = 0; i < iters / 10; i++) { __VA_ARGS__ } \
    double t0_ = now_us();                               \
    for (int i = 0; i < iters; i++) { __VA_ARGS__ }      \
    report(name, t0_, now_us());                         \
  } while (0)

static const char* empty_ptx =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry nvls_empty()\n{\n\tret;\n}\n";

int main(int argc, char** argv) {
  if (argc > 2 && strcmp(argv[1], "-n") == 0) iters = atoi(argv[2]);
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CUstream s[4];
  for (int i = 0; i < 4; i++) CU(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
  CUdeviceptr d4, d8a, d8b, flags;
  CU(cuMemAlloc(&d4, 4));
  CU(cuMemAlloc(&d8a, 8));
  CU(cuMemAlloc(&d8b, 8));
  CU(cuMemAlloc(&flags, 4 * 128));
  CU(cuMemsetD32(flags, 0, 4 * 32));
  unsigned* host;
  CK(cudaHostAlloc((void**)&host, 4096, cudaHostAllocMapped));
  unsigned* dhost;
  CK(cudaHostGetDevicePointer((void**)&dhost, host, 0));
  CUmodule mod;
  CUfunction fn;
  CU(cuModuleLoadData(&mod, empty_ptx));
  CU(cuModuleGetFunction(&fn, mod, "nvls_empty"));
  params160 p;
  memset(&p, 0, sizeof p);
  CUevent ev[4];
  for (int i = 0; i < 4; i++) CU(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));
  unsigned seq = 0;
  volatile unsigned* vh = host;

  printf("iterations %d per line\n", iters);
  BENCH("floor: memsetD32 4 B + query spin", {
    CU(cuMemsetD32Async(d4, i, 1, s[0]));
    spin(s[0]);
  });
  BENCH("memsetD32 4 B + cuStreamSynchronize", {
    CU(cuMemsetD32Async(d4, i, 1, s[0]));
    CU(cuStreamSynchronize(s[0]));
  });
  BENCH("memcpy D2D 8 B + query spin", {
    CU(cuMemcpyDtoDAsync(d8b, d8a, 8, s[0]));
    spin(s[0]);
  });
  BENCH("cuStreamWriteValue32 + query spin", {
    CU(cuStreamWriteValue32(s[0], d4, i, 0));
    spin(s[0]);
  });
  BENCH("empty<<<1,32>>> + query spin", {
    empty<<<1, 32, 0, (cudaStream_t)s[0]>>>();
    spin(s[0]);
  });
  BENCH("empty (cuLaunchKernel, PTX) + query spin", {
    CU(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s[0], NULL, NULL));
    spin(s[0]);
  });
  BENCH("empty, 160-byte param + query spin", {
    empty_params<<<1, 32, 0, (cudaStream_t)s[0]>>>(p);
    spin(s[0]);
  });
  BENCH("empty<<<66,512>>> + query spin", {
    empty<<<66, 512, 0, (cudaStream_t)s[0]>>>();
    spin(s[0]);
  });
  BENCH("empty + event record + event query spin", {
    empty<<<1, 32, 0, (cudaStream_t)s[0]>>>();
    CU(cuEventRecord(ev[0], s[0]));
    CUresult r;
    while ((r = cuEventQuery(ev[0])) == CUDA_ERROR_NOT_READY) {
    }
    CU(r);
  });
  double t_flag = 0;
  BENCH("flag to host: until the flag is seen", {
    ++seq;
    double a = now_us();
    flag_host<<<1, 1, 0, (cudaStream_t)s[0]>>>(dhost, seq);
    while (*vh != seq) {
    }
    t_flag += now_us() - a;
    spin(s[0]);
  });
  printf("%-44s %8.2f us  %5.2f x floor\n", "  (of which until the flag)", t_flag / (iters + iters / 10),
         t_flag / (iters + iters / 10) / floor_us);
  for (int n = 2; n <= 4; n += 2) {
    char name[64];
    snprintf(name, sizeof name, "%d streams, empty each + spin all", n);
    BENCH(name, {
      for (int r = 0; r < n; r++) empty<<<1, 32, 0, (cudaStream_t)s[r]>>>();
      for (int r = 0; r < n; r++) spin(s[r]);
    });
    snprintf(name, sizeof name, "%d streams, handshake each + spin all", n);
    BENCH(name, {
      ++seq;
      for (int r = 0; r < n; r++)
        handshake<<<1, 32, 0, (cudaStream_t)s[r]>>>((volatile unsigned*)flags, r, n, seq);
      for (int r = 0; r < n; r++) spin(s[r]);
    });
    snprintf(name, sizeof name, "%d streams, one fused launch + events", n);
    BENCH(name, {
      ++seq;
      for (int r = 1; r < n; r++) {
        CU(cuEventRecord(ev[r], s[r]));
        CU(cuStreamWaitEvent(s[0], ev[r], 0));
      }
      handshake_all<<<1, 32, 0, (cudaStream_t)s[0]>>>((volatile unsigned*)flags, n, seq);
      CU(cuEventRecord(ev[0], s[0]));
      for (int r = 1; r < n; r++) CU(cuStreamWaitEvent(s[r], ev[0], 0));
      for (int r = 0; r < n; r++) spin(s[r]);
    });
  }
  // The launch alone: back to back, one wait at the end.
  {
    int n = iters;
    double t0 = now_us();
    for (int i = 0; i < n; i++) empty<<<1, 32, 0, (cudaStream_t)s[0]>>>();
    double t1 = now_us();
    spin(s[0]);
    double t2 = now_us();
    printf("%-44s %8.2f us (host), %.2f us per kernel on the GPU\n", "empty launch alone, back to back",
           (t1 - t0) / n, (t2 - t0) / n);
    t0 = now_us();
    for (int i = 0; i < n; i++) CU(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s[0], NULL, NULL));
    t1 = now_us();
    spin(s[0]);
    t2 = now_us();
    printf("%-44s %8.2f us (host), %.2f us per kernel on the GPU\n", "cuLaunchKernel alone, back to back",
           (t1 - t0) / n, (t2 - t0) / n);
  }
  return 0;
}
