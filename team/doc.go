// Package team brings up a team of GPUs for the collectives: the ranks,
// their bootstrap, the transport choice and the symmetric workspace.
//
// # Bring-up
//
// New brings up a team of N GPUs driven by one process; NewRank brings up
// one rank of a team whose ranks are separate processes (team/mpi). Both
// run the same per-rank bring-up, driven by a Bootstrap (rank, size,
// all-gather, barrier, FD exchange); the in-process team runs it on one
// goroutine per rank with NewInProcess. Every step ends with an exchange
// of each rank's outcome, so that when one rank fails every rank stops at
// the same step and unwinds: no rank waits forever for a failed one.
//
//  1. Facts: each rank queries its device (VMM, multicast support, handle
//     types, SM count, allocation granularity) and reads its transport
//     request; all ranks all-gather the facts and decide identically.
//  2. Peer access between every pair (cuDeviceCanAccessPeer); the
//     multicast granularity, only when multicast was chosen.
//  3. Multicast only: rank 0 creates the multicast object (the team's one
//     object, never one per call); the others attach to it (in-process)
//     or import it from a POSIX FD; every rank adds its own device; an
//     exchange (the barrier) proves every device is added.
//  4. Each rank creates its workspace (kernels.SignalBytes + data bytes,
//     rounded up to the allocation and multicast granularities) with
//     cuMemCreate; multicast: binds it, then, after every rank bound,
//     maps the multicast alias (MC) with access for its device.
//  5. Each rank maps its own workspace (the UC alias), zeroes its signal
//     area, and maps every peer's workspace with access for its device
//     (handles shared by value in-process, as POSIX FDs across processes;
//     every received FD is closed once imported).
//
// Close tears down in reverse (multicast unmap, unbind, release; peer
// mappings, ranges, imported handles; own mapping, range, memory; workers
// and their contexts). A failure at any step unwinds whatever was done
// and returns an error naming the step, the rank and the device, wrapping
// the driver's error: for example
//
//	team: rank 2 (device 2): bind multicast memory: multicast: bind memory of device 2: cuMulticastBindMem: CUDA_ERROR_OUT_OF_MEMORY (2)
//
// # Transport choice and the off switch
//
// The transport is, in order of precedence: WithTransport; NVLS_TRANSPORT
// (auto|multicast|unicast); NCCL_NVLS_ENABLE=0, which turns multicast off;
// auto: multicast iff every device supports it. NCCL_NVLS_ENABLE=0 is the
// safety switch and wins over everything: asking for multicast (by option
// or environment) while it is set is an error wrapping
// cuda.ErrMulticastDisabled, and no cuMulticast* entry point is called.
// Asking for multicast where a device cannot do it is an error wrapping
// ErrMulticastUnsupported that names the device and why. A bad value of
// NVLS_TRANSPORT or NVLS_DEBUG is an *EnvError naming the variable and the
// allowed values, even where an option makes the variable moot. Across
// processes, every rank's request and switch are all-gathered: ranks
// that asked for different transports get ErrTransportConflict, and one
// rank with NCCL_NVLS_ENABLE=0 turns multicast off for all.
//
// # Logging
//
// The team logs with log/slog: the transport and why, every setup step
// and the memory footprint at INFO, every driver call at LevelTrace (the
// driver is wrapped in a tracing decorator only when the logger shows
// that level). WithLogger sets the logger; the default writes to stderr
// at the level NVLS_DEBUG names (WARN, INFO or TRACE; WARN when unset).
//
// # Contexts and threads
//
// CUDA's current context belongs to the calling OS thread, and goroutines
// move between threads. The rule of this package: every driver call for a
// device runs either on that device's worker (a goroutine locked to its OS
// thread with runtime.LockOSThread, on which the device's primary context
// was retained and made current when the team started) or on a goroutine
// that called runtime.LockOSThread and cuCtxSetCurrent itself. Team.Run
// hands a Job to every local rank's worker at once and waits for all of
// them; the collectives launch their kernels that way. A worker ends by
// making no context current and releasing the primary context.
//
// # Symmetric buffers
//
// Alloc hands out buffers from the data area of the workspace at the same
// offset on every rank (first fit, coalescing free list, 256-byte aligned),
// so that rank r's kernels reach rank q's copy at UCBases(r)[q] +
// kernels.SignalBytes + Offset(). Across processes every process must make
// the same Alloc and Free calls in the same order.
//
// # Broken state
//
// Fail records the first fatal error (a device-side timeout, say); from
// then on Err, Alloc, Run and the collectives return it (matching
// ErrBroken) until Close, which still frees everything.
package team
