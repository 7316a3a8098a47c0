// A stand-in for libnccl.so.2 that records what it was called with, so that
// the Go binding's argument passing (including the 128-byte ncclUniqueId
// passed by value) can be checked on a machine without NCCL or a GPU.
// Built by lib_test.go with the system C compiler. -DFAKE_VERSION=N sets
// what ncclGetVersion says (default 2.28.3); -DFAKE_NO_WINDOWS leaves out
// the memory windows of NCCL 2.27.3 (an older NCCL).
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#ifndef FAKE_VERSION
#define FAKE_VERSION 22803
#endif

typedef struct { char internal[128]; } ncclUniqueId;
typedef void* ncclComm_t;
typedef void* cudaStream_t;

static uint64_t last[8];
static int group_depth;
static int group_calls;
static int async_err;
static uint64_t id_sum;
static int id_first, id_last;

int ncclGetVersion(int* v) { *v = FAKE_VERSION; return 0; }

int ncclGetUniqueId(ncclUniqueId* id) {
  for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7 + 3);
  return 0;
}

int ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (ndev <= 0 || ndev > 8) return 4;
  for (int i = 0; i < ndev; i++) comms[i] = (ncclComm_t)(uintptr_t)(0x1000 + devlist[i]);
  last[0] = (uint64_t)ndev;
  return 0;
}

int ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  id_sum = 0;
  for (int i = 0; i < 128; i++) id_sum += (unsigned char)id.internal[i] * (uint64_t)(i + 1);
  id_first = (unsigned char)id.internal[0];
  id_last = (unsigned char)id.internal[127];
  last[0] = (uint64_t)nranks;
  last[1] = (uint64_t)rank;
  *comm = (ncclComm_t)(uintptr_t)(0x2000 + rank);
  return 0;
}

int ncclCommDestroy(ncclComm_t comm) {
  uintptr_t c = (uintptr_t)comm;
  if (c < 0x1000 || c >= 0x3000) return 4;
  last[0] = c;
  return 0;
}

int ncclCommGetAsyncError(ncclComm_t comm, int* r) { (void)comm; *r = async_err; return 0; }

const char* ncclGetErrorString(int r) {
  switch (r) {
  case 0: return "no error";
  case 4: return "invalid argument (fake)";
  case 5: return "invalid usage (fake)";
  default: return "unknown (fake)";
  }
}

static void windows_at_group_end(void);

int ncclGroupStart(void) { group_depth++; group_calls++; return 0; }
int ncclGroupEnd(void) {
  if (group_depth <= 0) return 5;
  group_depth--;
  if (group_depth == 0) windows_at_group_end();
  return 0;
}

int ncclAllReduce(const void* send, void* recv, size_t count, int dt, int op, ncclComm_t comm, cudaStream_t s) {
  last[0] = (uint64_t)(uintptr_t)send; last[1] = (uint64_t)(uintptr_t)recv; last[2] = count;
  last[3] = (uint64_t)dt; last[4] = (uint64_t)op; last[5] = (uint64_t)(uintptr_t)comm; last[6] = (uint64_t)(uintptr_t)s;
  if (dt < 0 || dt > 9) return 4;
  return 0;
}

int ncclBroadcast(const void* send, void* recv, size_t count, int dt, int root, ncclComm_t comm, cudaStream_t s) {
  last[0] = (uint64_t)(uintptr_t)send; last[1] = (uint64_t)(uintptr_t)recv; last[2] = count;
  last[3] = (uint64_t)dt; last[4] = (uint64_t)root; last[5] = (uint64_t)(uintptr_t)comm; last[6] = (uint64_t)(uintptr_t)s;
  return 0;
}

int ncclReduceScatter(const void* send, void* recv, size_t count, int dt, int op, ncclComm_t comm, cudaStream_t s) {
  last[0] = (uint64_t)(uintptr_t)send; last[1] = (uint64_t)(uintptr_t)recv; last[2] = count;
  last[3] = (uint64_t)dt; last[4] = (uint64_t)op; last[5] = (uint64_t)(uintptr_t)comm; last[6] = (uint64_t)(uintptr_t)s;
  last[7] = 1;
  return 0;
}

int ncclAllGather(const void* send, void* recv, size_t count, int dt, ncclComm_t comm, cudaStream_t s) {
  last[0] = (uint64_t)(uintptr_t)send; last[1] = (uint64_t)(uintptr_t)recv; last[2] = count;
  last[3] = (uint64_t)dt; last[4] = (uint64_t)(uintptr_t)comm; last[5] = (uint64_t)(uintptr_t)s;
  last[6] = 0; last[7] = 2;
  return 0;
}

int ncclReduce(const void* send, void* recv, size_t count, int dt, int op, int root, ncclComm_t comm, cudaStream_t s) {
  last[0] = (uint64_t)(uintptr_t)send; last[1] = (uint64_t)(uintptr_t)recv; last[2] = count;
  last[3] = (uint64_t)dt; last[4] = (uint64_t)op; last[5] = (uint64_t)root; last[6] = (uint64_t)(uintptr_t)comm;
  last[7] = (uint64_t)(uintptr_t)s;
  return 0;
}
// ncclMemAlloc (NCCL 2.19): host memory stands in for the device's.
int ncclMemAlloc(void** ptr, size_t size) {
  if (size == 0) return 4;
  *ptr = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  last[0] = (uint64_t)size;
  return *ptr ? 0 : 1;
}
int ncclMemFree(void* ptr) { free(ptr); last[0] = (uint64_t)(uintptr_t)ptr; return 0; }

#ifndef FAKE_NO_WINDOWS
// The memory windows, as NCCL 2.28 and later behave: inside a group the
// window is written when the group ends. reg[] records every registration
// (comm, buf, size, flags); windows are 0x5000 + the registration's index,
// and registered_nothing makes them 0 (NCCL's silent no-op).
typedef void* ncclWindow_t;
static uint64_t reg[64][4];
static int nreg, registered_nothing, live_windows;
static ncclWindow_t* pending[64];
static int npending;

static ncclWindow_t window_of(int i) { return registered_nothing ? 0 : (ncclWindow_t)(uintptr_t)(0x5000 + i); }

static void windows_at_group_end(void) {
  for (int i = 0; i < npending; i++) {
    *pending[i] = window_of(nreg - npending + i);
    if (*pending[i]) live_windows++;
  }
  npending = 0;
}

int ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  if (nreg == 64 || size == 0) return 4;
  reg[nreg][0] = (uint64_t)(uintptr_t)comm; reg[nreg][1] = (uint64_t)(uintptr_t)buff;
  reg[nreg][2] = (uint64_t)size; reg[nreg][3] = (uint64_t)flags;
  *win = 0;
  if (group_depth > 0) {
    pending[npending++] = win;
  } else {
    *win = window_of(nreg);
    if (*win) live_windows++;
  }
  nreg++;
  return 0;
}

int ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  uintptr_t w = (uintptr_t)win;
  (void)comm;
  if (w < 0x5000 || w >= 0x5000 + (uintptr_t)nreg) return 4;
  live_windows--;
  last[0] = w;
  return 0;
}

void fake_reg(int i, uint64_t* out) { memcpy(out, reg[i], sizeof reg[i]); }
int fake_nreg(void) { return nreg; }
int fake_live_windows(void) { return live_windows; }
void fake_set_registered_nothing(int v) { registered_nothing = v; }
#else
static void windows_at_group_end(void) {}
#endif

// Test hooks.
void fake_last(uint64_t* out) { memcpy(out, last, sizeof last); }
void fake_id(uint64_t* sum, int* first, int* lastb) { *sum = id_sum; *first = id_first; *lastb = id_last; }
int fake_group_depth(void) { return group_depth; }
void fake_set_async(int r) { async_err = r; }
