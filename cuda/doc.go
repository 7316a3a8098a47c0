// Package cuda is the CUDA driver API as nvls uses it: the Driver
// interface every layer above programs against, its types and error
// values, and Lib, the real binding of libcuda.so.1.
//
// Lib loads the driver at run time through purego, so building needs no
// CUDA toolkit and no cgo. It does so on Linux; the package builds on
// macOS and Windows too (for cuda/sim), where Open returns an error
// matching ErrNoDriver. Entry points come from cuGetProcAddress_v2,
// each at the CUDA version of the ABI its wrapper calls (entrypoints.go).
// Most programs share one Lib per process through Load.
//
// Errors: a failed call returns *Error (the entry point, the CUresult and
// the driver's name for it); errors.Is matches it against the sentinels
// (ErrOutOfMemory, ErrNotReady, ...). Without a driver every call returns
// an error matching ErrNoDriver; an entry point missing from an older
// driver gives ErrNotSupported, not a crash. Each error names its entry
// point once: callers add their own context, not that name.
//
// The off switch: with NCCL_NVLS_ENABLE=0 in the environment (or a value
// of it that is not an integer as NCCL reads it: never "on"),
// Lib.MulticastCreate returns ErrMulticastDisabled without calling the
// driver.
//
// The hot calls (LaunchKernel, EventRecord, StreamWaitEvent, the async
// copies, GraphLaunch) are one purego.SyscallN each and allocate nothing
// beyond its argument slice.
//
// Package cuda/sim implements Driver as a simulated NVSwitch node. How the
// binding works, and how to add a driver call: docs/binding.md.
package cuda
