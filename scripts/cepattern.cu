// cepattern.cu: the copy engines' rate under the schedules of nvls's
// copy-engine paths, every GPU of the node copying at once (issue 22; run
// 66: exp/cers's reduce-scatter half took about 1.35 ms at 4 GPUs where
// its copies alone, at run 62's 390-395 GB/s, would take 1.02). One
// process, peer access on, a copy stream and a side stream per GPU, no
// multicast and no peer loads or stores by kernels (DEVELOPERS.md's
// safety rule): only cudaMemcpyAsync between GPUs and, in one schedule, a
// kernel that reads and writes the GPU's own memory.
//
// Each GPU g has a slice of S bytes to send to every peer (next rank
// first, as nvls orders its copies). The schedules:
//   whole    one copy of S a peer (the all-gather half)
//   pieces   the same bytes in PIECES pieces a peer, piece i to every peer
//            before piece i + 1 (exp/cers's reduce-scatter half)
//   sync     pieces, and after piece i the side stream of every GPU waits
//            for every GPU's piece i (events across devices), as a
//            barrier a piece on the side stream would; the copies do not
//            wait
//   hbm      sync, and then on the side stream a kernel that reads
//            nranks x S/8 and writes S/8 of the GPU's own memory, as
//            exp/cers's local reduce of a piece
// All of it is enqueued behind a gate kernel on every copy stream (a spin
// on mapped host memory), which the host opens once everything is queued,
// so that enqueueing is not timed. Printed per schedule: the slowest
// GPU's time from its gate to its last copy or kernel (events on its own
// streams), the median over REPS, and the egress rate (nranks - 1) x S /
// time.
//
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -o cepattern scripts/cepattern.cu
//   ./cepattern [MiB a slice, default 128 [REPS, default 5 [PIECES, default 8]]]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "probe.h"  // CK

#define MAXG 8

// hbm: reads k buffers of n16 vectors of the GPU's own memory and writes
// their sum into the first, as a local reduce of k sources does.
__global__ void hbm(int4 *base, size_t n16, int k) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
    int4 s = base[i];
    for (int j = 1; j < k; j++) {
      int4 v = base[(size_t)j * n16 + i];
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    base[i] = s;
  }
}

enum { WHOLE, PIECES_, SYNC, HBM, NSCHED };
static const char *names[NSCHED] = {"whole", "pieces", "sync", "hbm"};

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 128;
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  const int pieces = argc > 3 ? atoi(argv[3]) : 8;  // PIECES
  if (pieces < 1 || pieces > 64) {
    fprintf(stderr, "cepattern: %d pieces; want 1 to 64\n", pieces);
    return 1;
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "cepattern: %d GPU(s); it needs 2 or more\n", n);
    return 1;
  }
  n = std::min(n, MAXG);
  const size_t S = mib << 20, piece = S / pieces;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  Gate open = gate_new();

  std::vector<char *> src(n), dst(n), scratch(n);
  std::vector<cudaStream_t> cs(n), ss(n);
  std::vector<cudaEvent_t> t0(n), t1(n), t2(n);
  std::vector<std::vector<cudaEvent_t>> done(n, std::vector<cudaEvent_t>(pieces));
  peers_on("cepattern", n);
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&src[g], S));
    CK(cudaMalloc(&dst[g], (size_t)n * S));  // slot p: what GPU p sent
    CK(cudaMalloc(&scratch[g], (size_t)n * piece));
    CK(cudaMemset(src[g], g + 1, S));
    CK(cudaMemset(scratch[g], 0, (size_t)n * piece));
    CK(cudaStreamCreateWithFlags(&cs[g], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&ss[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&t0[g]));
    CK(cudaEventCreate(&t1[g]));
    CK(cudaEventCreate(&t2[g]));
    for (int i = 0; i < pieces; i++) CK(cudaEventCreateWithFlags(&done[g][i], cudaEventDisableTiming));
  }
  printf("cepattern: %d GPUs, slices of %zu MiB (%d pieces of %zu MiB), %d reps, %d SMs\n", n, mib, pieces,
         piece >> 20, reps, sms);

  for (int sched = 0; sched < NSCHED; sched++) {
    std::vector<float> ms;
    for (int rep = 0; rep < reps; rep++) {
      open.set(0);
      for (int g = 0; g < n; g++) {
        CK(cudaSetDevice(g));
        gate<<<1, 1, 0, cs[g]>>>(open.dev);
        CK(cudaGetLastError());
        CK(cudaEventRecord(t0[g], cs[g]));
        CK(cudaStreamWaitEvent(ss[g], t0[g], 0));
      }
      // The copies, GPU by GPU (each GPU's stream in its own order).
      for (int g = 0; g < n; g++) {
        CK(cudaSetDevice(g));
        if (sched == WHOLE) {
          for (int j = 1; j < n; j++) {
            int p = (g + j) % n;
            CK(cudaMemcpyAsync(dst[p] + (size_t)g * S, src[g], S, cudaMemcpyDeviceToDevice, cs[g]));
          }
        } else {
          for (int i = 0; i < pieces; i++) {
            for (int j = 1; j < n; j++) {
              int p = (g + j) % n;
              CK(cudaMemcpyAsync(dst[p] + (size_t)g * S + i * piece, src[g] + i * piece, piece, cudaMemcpyDeviceToDevice,
                                 cs[g]));
            }
            CK(cudaEventRecord(done[g][i], cs[g]));
          }
        }
        CK(cudaEventRecord(t1[g], cs[g]));
      }
      // The side streams: a wait for every GPU's piece i, and the kernel.
      if (sched == SYNC || sched == HBM)
        for (int g = 0; g < n; g++) {
          CK(cudaSetDevice(g));
          for (int i = 0; i < pieces; i++) {
            for (int q = 0; q < n; q++) CK(cudaStreamWaitEvent(ss[g], done[q][i], 0));
            if (sched == HBM) {
              hbm<<<sms, 512, 0, ss[g]>>>((int4 *)scratch[g], piece / 16, n);
              CK(cudaGetLastError());
            }
          }
        }
      for (int g = 0; g < n; g++) {
        CK(cudaSetDevice(g));
        CK(cudaEventRecord(t2[g], ss[g]));
      }
      open.set(1);
      float worst = 0;
      for (int g = 0; g < n; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
        float a = 0, b = 0;
        CK(cudaEventElapsedTime(&a, t0[g], t1[g]));
        CK(cudaEventElapsedTime(&b, t0[g], t2[g]));
        worst = std::max(worst, std::max(a, b));
      }
      ms.push_back(worst);
    }
    std::sort(ms.begin(), ms.end());
    float med = ms[ms.size() / 2];
    printf("%-7s %8.1f us  %6.1f GB/s a GPU's egress  (min %.1f, max %.1f us)\n", names[sched], med * 1e3,
           (double)(n - 1) * S / (med * 1e-3) / 1e9, ms.front() * 1e3, ms.back() * 1e3);
  }
  return 0;
}
