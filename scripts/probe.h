// probe.h: what the standalone GPU probes in scripts/ (llprobe.cu,
// cepattern.cu, flagcost.cu, smpattern.cu) share: CK and CU, which exit
// with the file, line, call and message when a CUDA runtime call (CK) or
// driver call (CU) fails; the gate that starts every GPU's queued work
// together; peer access between the GPUs of one process.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

#define CU(x)                                                                          \
  do {                                                                                 \
    CUresult r_ = (x);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                          \
      const char *m_ = "";                                                             \
      cuGetErrorString(r_, &m_);                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, m_);                  \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

// gate: spins until the host sets *open (mapped host memory). A probe
// enqueues it first on every stream it times and opens it (Gate::set)
// once everything is queued, so that enqueueing is not timed.
__global__ void gate(volatile int *open) {
  while (*open == 0) {
  }
}

// Gate is the mapped host word the gates spin on: host is its host
// address, dev what gate takes.
struct Gate {
  int *host, *dev;
  void set(int v) { *(volatile int *)host = v; }
};

static Gate gate_new() {
  Gate g;
  CK(cudaHostAlloc(&g.host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(&g.dev, g.host, 0));
  g.set(0);
  return g;
}

// peers_on turns on peer access from every GPU of 0..n-1 to every other,
// or exits naming prog and the first pair that cannot reach each other.
static void peers_on(const char *prog, int n) {
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    for (int p = 0; p < n; p++) {
      if (p == g) continue;
      int can = 0;
      CK(cudaDeviceCanAccessPeer(&can, g, p));
      if (!can) {
        fprintf(stderr, "%s: GPU %d cannot reach GPU %d\n", prog, g, p);
        exit(1);
      }
      CK(cudaDeviceEnablePeerAccess(p, 0));
    }
  }
}
