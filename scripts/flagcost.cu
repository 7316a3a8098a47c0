// flagcost.cu: what the 2-rank copy-engine pipeline's signals cost (issue
// 22; runs 73-74: the pipelined reduce took a fixed 40-46 us over S / 395
// GB/s at every size from 8 to 512 MiB). GPU 0's stream sends S bytes into
// GPU 1's memory as the peer does in collectives/ce.go (cePieces): 8
// pieces that halve (S/2, S/4 ... S/128, S/128), each followed by a
// signal into GPU 1's memory. Timed per schedule, from a gate kernel that
// the host opens once everything is queued to the stream's last work:
//   whole    one copy of S, no signal
//   pieces   the 8 pieces, no signal
//   copies   the 8 pieces, each with a 4-byte copy (nvls's flags now)
//   memops   the 8 pieces, each with cuStreamWriteValue32 (a stream
//            memory operation instead of a copy)
//   flags    the 8 signals alone, 4-byte copies
//   writes   the 8 signals alone, cuStreamWriteValue32
// Two GPUs, peer access on; no multicast and no kernel touches peer memory
// (DEVELOPERS.md's safety rule). The median over REPS is printed with the
// excess over "whole" and the cost a signal (over "pieces" where the
// signals go between pieces; the schedule's time over 8 where alone).
//
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -o flagcost scripts/flagcost.cu -lcuda
//   ./flagcost [MiB, default 128 [REPS, default 9]]
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "probe.h"  // CK, CU

#define PIECES 8



enum { WHOLE, PIECES_, COPIES, MEMOPS, FLAGS, WRITES, NSCHED };
static const char *names[NSCHED] = {"whole", "pieces", "copies", "memops", "flags", "writes"};

// start: where piece i of S bytes starts (S - S >> i; S past the last), as
// kabi.CEPieceStart cuts a count.
static size_t start(int i, size_t S) { return i == 0 ? 0 : i >= PIECES ? S : S - (S >> i); }

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 128;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "flagcost: %d GPU(s); it needs 2\n", n);
    return 1;
  }
  const size_t S = mib << 20;
  Gate open = gate_new();

  char *dst;        // GPU 1: the landing buffer
  unsigned *flags;  // GPU 1: a flag word a piece
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&dst, S));
  CK(cudaMalloc(&flags, PIECES * sizeof(unsigned)));
  CK(cudaMemset(flags, 0, PIECES * sizeof(unsigned)));
  CK(cudaSetDevice(0));
  int can = 0;
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (!can) {
    fprintf(stderr, "flagcost: GPU 0 cannot reach GPU 1\n");
    return 1;
  }
  CK(cudaDeviceEnablePeerAccess(1, 0));
  char *src;
  unsigned *seq;  // GPU 0: the word the flag copies send
  CK(cudaMalloc(&src, S));
  CK(cudaMalloc(&seq, sizeof(unsigned)));
  CK(cudaMemset(src, 1, S));
  CK(cudaMemset(seq, 7, sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  // Stream memory operations (v2) are on by default since CUDA 12: one
  // write tells whether this driver takes them on peer memory.
  const bool memops = cuStreamWriteValue32((CUstream)s, (CUdeviceptr)flags, 0, 0) == CUDA_SUCCESS;
  CK(cudaStreamSynchronize(s));
  printf("flagcost: GPU 0 -> GPU 1, %zu MiB in %d halving pieces, %d reps, stream memory operations %s\n", mib,
         PIECES, reps, memops ? "supported" : "NOT supported");

  float base = 0, pieces = 0;
  for (int sched = 0; sched < NSCHED; sched++) {
    if ((sched == MEMOPS || sched == WRITES) && !memops) continue;
    std::vector<float> ms;
    for (int rep = 0; rep < reps; rep++) {
      open.set(0);
      gate<<<1, 1, 0, s>>>(open.dev);
      CK(cudaGetLastError());
      CK(cudaEventRecord(t0, s));
      if (sched == WHOLE) CK(cudaMemcpyAsync(dst, src, S, cudaMemcpyDeviceToDevice, s));
      for (int i = 0; sched != WHOLE && i < PIECES; i++) {
        if (sched != FLAGS && sched != WRITES) {
          size_t lo = start(i, S), hi = start(i + 1, S);
          CK(cudaMemcpyAsync(dst + lo, src + lo, hi - lo, cudaMemcpyDeviceToDevice, s));
        }
        if (sched == COPIES || sched == FLAGS)
          CK(cudaMemcpyAsync(flags + i, seq, sizeof(unsigned), cudaMemcpyDeviceToDevice, s));
        if (sched == MEMOPS || sched == WRITES)
          CU(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(flags + i), (cuuint32_t)(rep + 1), 0));
      }
      CK(cudaEventRecord(t1, s));
      open.set(1);
      CK(cudaStreamSynchronize(s));
      float a = 0;
      CK(cudaEventElapsedTime(&a, t0, t1));
      ms.push_back(a * 1e3f);
    }
    std::sort(ms.begin(), ms.end());
    float med = ms[ms.size() / 2];
    if (sched == WHOLE) base = med;
    if (sched == PIECES_) pieces = med;
    // A signal: beside the pieces, what it adds to them; alone, its share.
    const bool alone = sched == FLAGS || sched == WRITES;
    const float signal = sched < COPIES ? 0 : (alone ? med : med - pieces) / PIECES;
    printf("%-7s %9.1f us  over whole %7.1f us  a signal %5.2f us  (min %.1f, max %.1f)\n", names[sched], med,
           alone ? 0 : med - base, signal, ms.front(), ms.back());
  }
  return 0;
}
