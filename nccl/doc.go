// Package nccl binds NVIDIA's NCCL (libnccl.so.2), loaded at run time
// through purego, so that building needs neither the NCCL headers nor cgo
// (CGO_ENABLED=0 builds it). It is what nvls-bench compares against: the
// same collectives on the same device buffers, in the same process.
//
// Open loads the library; on a machine without it, and on other systems
// than Linux, Open returns an error that matches ErrNoNCCL. The binding covers what a benchmark needs:
// ncclGetVersion, ncclGetUniqueId, ncclCommInitAll (one process driving
// every GPU), ncclCommInitRank (one process per GPU), ncclCommDestroy,
// ncclGroupStart/ncclGroupEnd, ncclAllReduce, ncclBroadcast,
// ncclReduceScatter, ncclAllGather, ncclReduce, ncclCommGetAsyncError and
// ncclGetErrorString. Failed calls return *Error
// carrying the ncclResult_t and NCCL's text for it.
//
// NCCL 2.27.3's symmetric memory (ncclMemAlloc, ncclCommWindowRegister
// with NCCL_WIN_COLL_SYMMETRIC, ncclCommWindowDeregister, ncclMemFree) is
// bound where the loaded library has it: Symmetric probes for it, and on
// an older NCCL those calls return an error matching ErrNotAvailable.
//
// NCCL works on the CUDA runtime's current device, which is per OS thread:
// a caller that drives several GPUs from one process locks its goroutine
// to its thread (runtime.LockOSThread), issues every GPU's call between
// GroupStart and GroupEnd, and makes that GPU's primary context current
// before each call.
//
// The hot calls (the collectives, GroupStart, GroupEnd) go through
// purego.SyscallN and allocate nothing; the setup calls use RegisterFunc.
//
// The environment variable NCCL_NVLS_ENABLE is NCCL's own NVLink SHARP
// switch; this package neither reads nor sets it (NVLSSetting reports it).
package nccl
