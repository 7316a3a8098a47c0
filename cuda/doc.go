// Package cuda is the CUDA driver API as nvls uses it: the Driver
// interface that every layer above programs against, its types and error
// values, and the real binding of libcuda.so.1.
//
// The real binding (Open) loads libcuda.so.1 at run time through purego, so
// building needs no CUDA toolkit and no cgo. Entry points are taken with
// cuGetProcAddress_v2, each at the CUDA version where its current ABI
// appeared; an entry point the driver lacks gives ErrNotSupported, and a
// machine without a driver gives ErrNoDriver. Failed calls return *Error,
// carrying the CUresult and the driver's name for it; errors.Is matches
// them against the sentinels (ErrOutOfMemory, ErrNotReady, ...).
//
// Most programs share one binding per process through Load; Open loads the
// library again. A Lib that was not loaded (nil, zero, closed) answers every
// call with ErrNoDriver instead of panicking. The hot calls (LaunchKernel,
// EventRecord, StreamWaitEvent, the async copies, GraphLaunch) cost one
// purego.SyscallN each and allocate nothing beyond SyscallN's own argument
// slice (and, for a launch, its one-element kernelParams array).
//
// The off switch: with NCCL_NVLS_ENABLE=0 in the environment the real
// binding's MulticastCreate returns ErrMulticastDisabled without calling
// the driver.
//
// Package cuda/sim implements the same Driver as a simulated NVSwitch node.
package cuda
