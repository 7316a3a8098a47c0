/* The real NCCL, loaded beside the shim: its entry points and calls
 * through them (forward.c). */
#ifndef NVLS_FORWARD_H_
#define NVLS_FORWARD_H_
#define NVLS_SHIM_NO_PROTOTYPES 1
#define NVLS_SHIM_NO_CUDA_RUNTIME 1
#include "nccl.h"

/* fwd_open loads path; 0 on success, else why in err (errlen bytes). */
int fwd_open(const char* path, char* err, int errlen);
int fwd_loaded(void);
const char* fwd_path(void);

ncclResult_t fwd_GetVersion(int* v);
ncclResult_t fwd_GetUniqueId(ncclUniqueId* id);
ncclResult_t fwd_CommInitRank(ncclComm_t* c, int n, ncclUniqueId* id, int r);
ncclResult_t fwd_CommInitAll(ncclComm_t* c, int n, const int* devs);
ncclResult_t fwd_CommDestroy(ncclComm_t c);
ncclResult_t fwd_CommAbort(ncclComm_t c);
ncclResult_t fwd_CommFinalize(ncclComm_t c);
ncclResult_t fwd_CommSplit(ncclComm_t c, int color, int key, ncclComm_t* nc, ncclConfig_t* cfg);
ncclResult_t fwd_CommShrink(ncclComm_t c, int* excl, int nexcl, ncclComm_t* nc, ncclConfig_t* cfg, int flags);
const char* fwd_GetLastError(ncclComm_t c);
ncclResult_t fwd_CommGetAsyncError(ncclComm_t c, ncclResult_t* r);
ncclResult_t fwd_CommCount(ncclComm_t c, int* v);
ncclResult_t fwd_CommUserRank(ncclComm_t c, int* v);
ncclResult_t fwd_CommCuDevice(ncclComm_t c, int* v);
ncclResult_t fwd_GroupStart(void);
ncclResult_t fwd_GroupEnd(void);
int fwd_hasGroupSimulateEnd(void);
ncclResult_t fwd_GroupSimulateEnd(ncclSimInfo_t* si);
void fwd_ResetDebugInit(void);
ncclResult_t fwd_RedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t res, ncclComm_t c);
ncclResult_t fwd_RedOpDestroy(ncclRedOp_t op, ncclComm_t c);
ncclResult_t fwd_AllReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_Broadcast(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_Reduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_AllGather(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_ReduceScatter(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_AlltoAll(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_Gather(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_Scatter(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_Send(const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st);
ncclResult_t fwd_Recv(void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st);

/* The last error text the shim reports (ncclGetLastError). */
void nvls_set_last_error(const char* msg);
const char* nvls_last_error(void);
#endif
