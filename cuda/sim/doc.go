// Package sim is a simulated NVSwitch node behind the cuda.Driver
// interface, so that every layer above package cuda runs in CI, where
// there is no GPU.
//
// New(Config) returns a Node with N devices (default 4, "Simulated H200",
// 132 SMs, 1 GiB each, multicast and POSIX FD handles supported, every
// pair of devices peer-capable). Each Config field can be varied by tests.
//
// # What it models
//
//   - Devices and their primary contexts (retain/release refcount). The
//     current context is per OS thread (keyed by gettid), as in the real
//     driver: callers lock their goroutine to its thread. Calls that need
//     a current context fail with CUDA_ERROR_INVALID_CONTEXT without one.
//     Every call but cuInit and cuDriverGetVersion fails with
//     CUDA_ERROR_NOT_INITIALIZED before Init.
//   - A virtual address space from 0x7f00_0000_0000: reservations,
//     physical allocations (backed lazily, charged to their device's
//     memory), mappings, per-device access rights. Releasing a handle that
//     is still mapped is allowed; the memory goes with its last mapping,
//     bind or open exported FD.
//   - Multicast objects with the driver's ordering rules: every device is
//     added before any bind or mapping of the object (the driver blocks
//     there; the simulator fails fast with CUDA_ERROR_ILLEGAL_STATE), one
//     bind per device, unbind matching the bind, a node-wide limit on
//     objects.
//   - Streams (one goroutine each, in order; the legacy default stream
//     synchronizes with blocking streams), events, stream capture into
//     graphs and graph replay.
//   - Modules: ModuleLoadData reads the .entry names of PTX text and
//     resolves each against RegisterKernel; a launch runs the registered
//     KernelFunc on the stream's goroutine with a Memory that enforces the
//     launching device's access rights. A kernel error breaks its context
//     (sticky, like an illegal-address fault) until the primary context is
//     released to zero.
//   - Fault injection (FailAt, FailNth), a call log (Calls), resource
//     accounting (Live, CheckNoLeaks), and test oracles that bypass access
//     rights (ReadDevice, WriteDevice, Memory).
//
// # Limits
//
//   - Timing is wall-clock time of Go code, not hardware time: event
//     elapsed times and benchmark numbers on the simulator mean nothing
//     about a GPU.
//   - Memory ordering is sequentially consistent (every access takes a
//     lock), stronger than the GPU's; a missing fence will not show up
//     here. Kernels run as one Go call per launch, not as parallel threads.
//   - Access rights are kept per mapping: cuMemSetAccess must cover whole
//     mappings.
//   - cuMemAlloc memory is reachable from every device (the real driver
//     needs peer access enabled for other devices); managed memory does
//     not migrate (prefetch only orders itself on the stream).
//   - Copies and memsets may not touch a multicast mapping.
//   - CU_STREAM_PER_THREAD is treated as the legacy default stream.
//     Capture is sequential: streams that join a capture (by waiting on an
//     event recorded in it) have their work recorded in one order.
//   - An exported POSIX FD is a real unlinked temporary file; the node
//     recognises it and its dups in this process by inode. FDs from
//     another process (or node) cannot be imported. The node notices that
//     an exported FD was closed when it sweeps (Live, CheckNoLeaks,
//     MemGetInfo, cuMemCreate, cuMemAlloc, export).
//   - The current context is keyed by OS thread id; a thread that ends
//     while a context is current leaves its entry behind, and a new
//     thread given the same id by the kernel would inherit it. Unlock or
//     CtxSetCurrent(0) before letting a locked goroutine end.
//   - The simulator does not look at NCCL_NVLS_ENABLE; the real binding
//     and package team do.
package sim
