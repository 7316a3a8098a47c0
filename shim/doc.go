//go:build cgo

// Command shim is libnccl-nvls.so: NCCL's C API (as of NCCL 2.28, the
// declarations in nccl.h here) over nvls's collectives, built with
//
//	go build -buildmode=c-shared -o libnccl-nvls.so ./shim   (make shim)
//
// It runs AllReduce, Broadcast (and Bcast), Reduce, AllGather and
// ReduceScatter on the GPUs of one node with nvls (package collectives),
// for the element types and operators nvls has, and forwards everything
// else (Send, Recv, AlltoAll, Gather, Scatter, CommSplit, PreMulSum, f64,
// int8, fp8, prod, avg, ...) to the real NCCL on a communicator it
// creates beside its own: the library NVLS_REAL_NCCL names, else
// libnccl.so.2 on the loader path, and never the shim itself. The real
// NCCL calls its own entry points (ncclCommGetAsyncError in every
// collective, ncclGetUniqueId in ncclCommInitAll, ...) through the PLT,
// which the loader binds to the shim's: so every ncclX the shim exports
// is a C function (entry.c) that runs the real NCCL's ncclX for a caller
// inside the real NCCL (or under the shim's own call into it) and the
// shim's Go side (nvlsGoX, abi.go) for everyone else.
// Each pncclX (NCCL's profiling alias) is the same function as ncclX.
//
// Inside a group the calls nvls runs are checked at the call and issued
// at the outermost ncclGroupEnd, as NCCL launches a group there;
// ncclGroupSimulateEnd issues none of them, handing them to the real
// NCCL's group instead, whose ncclGroupSimulateEnd estimates the whole
// group (without a real NCCL: ncclInvalidUsage, saying why).
// NVLS_DEBUG=INFO says for every call whether it ran here or was
// forwarded and why, and the counts at ncclCommDestroy.
//
// Ranks meet through the unique id (package team/sock: a rendezvous
// socket and a job token in its 128 bytes); no MPI. One process may drive
// several GPUs (ncclCommInitAll; a group's per-rank calls become one nvls
// call), or run one rank per process or thread (ncclCommInitRank).
//
// This is the one package of the module with cgo besides team/mpi. Built
// with -tags nvlssim it can also run on the simulated node (NVLS_SIM=1),
// and exports nvlsSim* helpers for the C tests; the default build links
// no simulator.
package main

func main() {}
