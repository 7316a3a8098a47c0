// smpattern.cu: the SMs' rate over NVLink under the link patterns of the
// reduce and reduce-scatter designs, every GPU of the node at once (issue
// 22; runs 117-118: at 2 ranks the root pulling the peer's whole send ran
// 365-370 GB/s where the two-shot's mix ran 345; at 4 ranks the reduce
// runs 289 GB/s into the root and the reduce-scatter's loads 327). One
// process, peer access on, one stream a GPU; plain peer loads and stores
// by kernels, no multicast (DEVELOPERS.md's safety rule).
//
// Each GPU g holds A_g (its send), B_g and C_g, S bytes each. Root 0;
// the non-roots are w = 1 .. n-1, slice w of S/(n-1) bytes (reduce) or
// slice g of S/n (reduce-scatter). Every kernel reads its sources and
// stores their sum (integer adds), so a local source costs HBM as a
// reduce's own send does. The patterns:
//   ring      every GPU stores A_g into B_(g+1): NCCL's ring, S a link
//   pull      the root alone loads slice w of A_w from every non-root w
//             and adds its own A_0's: S into the root from n - 1 peers at
//             once, the others idle (at 2 GPUs the one-shot reduce, run
//             117)
//   tree      pull, the root loading the non-roots' partial sums B_w
//             instead, while each non-root w loads slice w of every other
//             non-root's A and stores the sum into its own B_w (the root's
//             send never crosses a link): the root's inbound S, every
//             non-root's outbound S, as responses to loads only
//   twoshot   every non-root w loads slice w of every A (the root's too)
//             and stores the sum into C_0: nvls's reduce from 3 ranks
//   rspull    every GPU loads slice g of every A into B_g: the
//             reduce-scatter by loads ((n-1)/n S in and out a GPU)
//   rspush    every GPU stores slice q of A_g into slot g of GPU q's B:
//             the reduce-scatter's traffic by stores (the local sum not
//             included)
// All of it is enqueued behind a gate kernel on every stream (a spin on
// mapped host memory) that the host opens once everything is queued.
// Printed per pattern and grid: the slowest GPU's time from its gate to
// its kernel's end (events on its own stream), the median over REPS, and
// the rate of the bytes that define the pattern: S / time for ring, pull,
// tree and twoshot (into the root), (n - 1) / n S / time for rspull and
// rspush (into each GPU).
//
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -o smpattern scripts/smpattern.cu
//   ./smpattern [MiB, default 256 [REPS, default 7]]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "probe.h"  // CK

#define MAXG 8
#define MAXSRC MAXG
#define MAXSEG MAXG

// Seg: dst[i] = the sum of src[0..nsrc)[i], n16 vectors of 16 bytes.
struct Seg {
  const int4 *src[MAXSRC];
  int nsrc;
  int4 *dst;
  size_t n16;
};

// Job: one GPU's segments, block b working on segment b % nseg.
struct Job {
  Seg seg[MAXSEG];
  int nseg;
};

__global__ void __launch_bounds__(512) k_job(const Job j) {
  const Seg &s = j.seg[blockIdx.x % j.nseg];
  const size_t blocks = gridDim.x / j.nseg, b = blockIdx.x / j.nseg;
  for (size_t i = b * blockDim.x + threadIdx.x; i < s.n16; i += blocks * blockDim.x) {
    int4 v = s.src[0][i];
    for (int k = 1; k < s.nsrc; k++) {
      const int4 x = s.src[k][i];
      v.x += x.x, v.y += x.y, v.z += x.z, v.w += x.w;
    }
    s.dst[i] = v;
  }
}

enum { RING, PULL, TREE, TWOSHOT, RSPULL, RSPUSH, NPAT };
static const char *names[NPAT] = {"ring", "pull", "tree", "twoshot", "rspull", "rspush"};

// jobs fills jobs[g] for pattern pat over n GPUs' buffers.
static void build(int pat, int n, size_t S, const std::vector<char *> &A, const std::vector<char *> &B,
                  const std::vector<char *> &C, std::vector<Job> &jobs) {
  const size_t wsl = S / (n - 1) / 16 * 16, gsl = S / n / 16 * 16;  // a non-root's slice, a reduce-scatter slice
  for (int g = 0; g < n; g++) {
    Job &j = jobs[g];
    j = Job{};
    auto seg = [&](int4 *dst, size_t bytes) -> Seg & {
      Seg &s = j.seg[j.nseg++];
      s.dst = dst, s.n16 = bytes / 16;
      return s;
    };
    auto src = [](Seg &s, const char *p) { s.src[s.nsrc++] = (const int4 *)p; };
    switch (pat) {
      case RING: {
        Seg &s = seg((int4 *)B[(g + 1) % n], S);
        src(s, A[g]);
        break;
      }
      case PULL:
      case TREE:
        if (g == 0) {
          for (int w = 1; w < n; w++) {
            const size_t o = (w - 1) * wsl;
            Seg &s = seg((int4 *)(C[0] + o), wsl);
            src(s, (pat == PULL ? A[w] : B[w]) + o);
            src(s, A[0] + o);
          }
        } else if (pat == TREE) {
          const size_t o = (g - 1) * wsl;
          Seg &s = seg((int4 *)(B[g] + o), wsl);
          src(s, A[g] + o);
          for (int x = 1; x < n; x++)
            if (x != g) src(s, A[x] + o);
        }
        break;
      case TWOSHOT:
        if (g != 0) {
          const size_t o = (g - 1) * wsl;
          Seg &s = seg((int4 *)(C[0] + o), wsl);
          src(s, A[g] + o);
          for (int x = 0; x < n; x++)
            if (x != g) src(s, A[x] + o);
        }
        break;
      case RSPULL: {
        const size_t o = g * gsl;
        Seg &s = seg((int4 *)(B[g] + o), gsl);
        src(s, A[g] + o);
        for (int x = 0; x < n; x++)
          if (x != g) src(s, A[x] + o);
        break;
      }
      case RSPUSH:
        for (int q = 0; q < n; q++)
          if (q != g) {
            Seg &s = seg((int4 *)(B[q] + g * gsl), gsl);
            src(s, A[g] + q * gsl);
          }
        break;
    }
  }
}

int main(int argc, char **argv) {
  const size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 256;
  const int reps = argc > 2 ? atoi(argv[2]) : 7;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "smpattern: %d GPU(s); it needs 2 or more\n", n);
    return 1;
  }
  n = std::min(n, MAXG);
  const size_t S = mib << 20;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  Gate open = gate_new();

  std::vector<char *> A(n), B(n), C(n);
  std::vector<cudaStream_t> st(n);
  std::vector<cudaEvent_t> t0(n), t1(n);
  peers_on("smpattern", n);
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&A[g], S));
    CK(cudaMalloc(&B[g], S));
    CK(cudaMalloc(&C[g], S));
    CK(cudaMemset(A[g], g + 1, S));
    CK(cudaMemset(B[g], 0, S));
    CK(cudaMemset(C[g], 0, S));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&t0[g]));
    CK(cudaEventCreate(&t1[g]));
  }
  printf("smpattern: %d GPUs, S = %zu MiB, %d reps, %d SMs, blocks of 512 threads\n", n, mib, reps, sms);

  std::vector<Job> jobs(n);
  for (int pat = 0; pat < NPAT; pat++) {
    build(pat, n, S, A, B, C, jobs);
    for (int grid : {sms, 2 * sms}) {
      std::vector<float> ms;
      for (int rep = 0; rep < reps + 1; rep++) {  // the first untimed
        open.set(0);
        for (int g = 0; g < n; g++) {
          CK(cudaSetDevice(g));
          gate<<<1, 1, 0, st[g]>>>(open.dev);
          CK(cudaGetLastError());
          CK(cudaEventRecord(t0[g], st[g]));
          if (jobs[g].nseg > 0) {
            const int blocks = std::max(grid / jobs[g].nseg, 1) * jobs[g].nseg;
            k_job<<<blocks, 512, 0, st[g]>>>(jobs[g]);
            CK(cudaGetLastError());
          }
          CK(cudaEventRecord(t1[g], st[g]));
        }
        open.set(1);
        float worst = 0;
        for (int g = 0; g < n; g++) {
          CK(cudaSetDevice(g));
          CK(cudaStreamSynchronize(st[g]));
          float a = 0;
          CK(cudaEventElapsedTime(&a, t0[g], t1[g]));
          worst = std::max(worst, a);
        }
        if (rep > 0) ms.push_back(worst);
      }
      std::sort(ms.begin(), ms.end());
      const float med = ms[ms.size() / 2];
      const double bytes = (pat == RSPULL || pat == RSPUSH) ? (double)(n - 1) / n * S : (double)S;
      printf("%-8s grid %3d  %8.1f us  %6.1f GB/s  (min %.1f, max %.1f us)\n", names[pat], grid, med * 1e3,
             bytes / (med * 1e-3) / 1e9, ms.front() * 1e3, ms.back() * 1e3);
      fflush(stdout);
    }
  }
  return 0;
}
