// probe.h: what the standalone GPU probes in scripts/ (llprobe.cu,
// cepattern.cu, flagcost.cu) share: CK and CU, which exit with the file,
// line, call and message when a CUDA runtime call (CK) or driver call (CU)
// fails.
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
