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
//  2. Peer access between every pair of distinct devices
//     (cuDeviceCanAccessPeer; ranks that share a device need none); the
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
//	team: rank 1 (device 1): create workspace memory: vmm: create 2097152 bytes on device 1: cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (2)
//
// The other ranks stop at the same step (their own error is a
// *PeerError, or in New a closed bootstrap; New returns the failing
// rank's).
//
// # Fabric failures and the unicast fallback
//
// Some driver errors of the multicast part of the bring-up (the multicast
// granularity, create, share, add, bind and map steps) mean that the
// NVSwitch fabric cannot serve multicast now, not that the team is wrong:
// CUDA_ERROR_SYSTEM_NOT_READY (802) and CUDA_ERROR_ILLEGAL_STATE (401)
// from any of its calls, and CUDA_ERROR_NOT_SUPPORTED (801) or
// CUDA_ERROR_OUT_OF_MEMORY from a cuMulticast* entry point (see
// multicast.Diagnose). Such an error is a *FabricError: it matches
// ErrFabricNotReady and still the driver's code (errors.Is(err,
// cuda.ErrSystemNotReady)), names the step, the rank and the device, and
// says what is likely wrong (the Fabric Manager not running or not done,
// the NVSwitches not in a ready state, the multicast slots exhausted, ...)
// and what to do. For example
//
//	team: rank 3 (device 3): bind multicast memory: multicast fabric not ready: multicast: bind memory of device 3: cuMulticastBindMem: CUDA_ERROR_SYSTEM_NOT_READY (802). Likely: the NVSwitch fabric is not ready: the Fabric Manager (nvidia-fabricmanager) is not running, or has not (yet) registered this GPU with the fabric; a Fabric Manager that stalls while it forms the multicast team gives this error too, and then a retry may pass. What to do: `systemctl status nvidia-fabricmanager` (it must run, at the driver's version); `nvidia-smi -q | grep -i -A 3 fabric` should say State: Completed and Status: Success on every GPU; to run without multicast, set NVLS_TRANSPORT=unicast (or pass WithTransport(Unicast))
//
// When multicast was asked for (WithTransport, NVLS_TRANSPORT), that is
// the bring-up's error. When the transport was chosen automatically, the
// team falls back to unicast instead, and every rank agrees: each
// multicast step ends with an exchange of every rank's outcome through
// the Bootstrap (in-process or across processes); when no rank failed
// otherwise and some rank met a fabric error, every rank undoes its
// multicast state (unmap, unbind; the attached and imported objects
// first, then the creator's, which releases the handle) and goes on with
// unicast. No rank ever ends on one transport while another ends on the
// other. One WARN line per process says so, and Reason and Fallback say
// why on every rank:
//
//	auto: multicast failed at bind multicast memory on rank 3 (cuMulticastBindMem: CUDA_ERROR_SYSTEM_NOT_READY (802)); fell back to unicast
//
// A workspace created before the fallback keeps its size (rounded to the
// multicast granularity too); one created after it is sized for unicast.
//
// # Deadlines
//
// Every exchange of the bring-up has a deadline: ctx's, and the setup
// timeout (WithSetupTimeout, else NVLS_SETUP_TIMEOUT, else
// DefaultSetupTimeout in New; NewRank applies one only where given and
// otherwise leaves it to ctx and its bootstrap). A rank that does not
// arrive in time is named by the others: their error is a
// *MissingRanksError, matching ErrPeerMissing and
// context.DeadlineExceeded. New returns by the deadline even when a rank
// hangs inside a driver call (a cuMulticastBindMem that never returns,
// say): it frees what the other ranks hold at once, and what the hung
// rank holds in the background once its call returns. A rank that stops
// outside an exchange closes its bootstrap, so that the others stop at
// once rather than at the deadline.
//
// # Agreeing after the bring-up
//
// Team.AllGather all-gathers a few bytes from every rank through the
// bootstrap the team was brought up with (the team's own in-process ones
// for New, the caller's for NewRank, which stays usable after it), bounded
// by ctx and the setup timeout like the bring-up's exchanges. It is
// collective and serialized with the bootstrap's other collectives; one
// process speaks for all its local ranks. Package collectives uses it so
// that every process of a team runs the same configuration (see
// collectives.New).
//
// # Transport choice and the off switch
//
// The transport is, in order of precedence: WithTransport; NVLS_TRANSPORT
// (auto|multicast|unicast); NCCL_NVLS_ENABLE=0, which turns multicast off;
// auto: multicast iff every device supports it and no rank was given
// WithSharedDevices (below). NCCL_NVLS_ENABLE=0 is the safety switch and
// wins over everything: asking for multicast (by option or environment)
// while it is set is an error wrapping
// cuda.ErrMulticastDisabled, and no cuMulticast* entry point is called.
// Asking for multicast where a device cannot do it is an error wrapping
// ErrMulticastUnsupported that names the device and why; auto then
// chooses unicast, and falls back to it when the fabric fails the
// multicast bring-up (above). Across processes, every rank's request and
// switch are all-gathered: ranks that asked for different transports get
// ErrTransportConflict, and one rank with NCCL_NVLS_ENABLE=0 turns
// multicast off for all.
//
// # Shared devices (development and testing)
//
// WithSharedDevices lets a team run several ranks on one GPU, so that the
// collectives can be exercised on a machine with fewer GPUs than ranks:
// New then accepts a device more than once (New(ctx, d,
// []cuda.Device{0, 0}, WithSharedDevices()) is two ranks on GPU 0), and
// NewRank ranks of one device meet when every one of them passes it. Each
// rank keeps its own worker (and primary context reference: ranks of one
// device in one process share that context), its own workspace, its own
// mapping of every peer's workspace and its own teardown; ranks of one
// device need no peer access between them. Ranks on one device share its
// SMs and memory bandwidth and reach each other through local memory, not
// NVLink: the numbers measured that way are not a node's.
//
// Such a team never uses multicast (a device joins a multicast object
// once): asking for multicast with the option is an error wrapping
// ErrMulticastUnsupported before any driver call, and auto chooses
// unicast with a reason such as
//
//	auto: shared devices (WithSharedDevices): ranks [0 1] on device 0 (0000:18:00.0); a device joins a multicast object once, so a team with shared devices is unicast
//
// and one WARN line says that devices are shared. Team.RanksOnDevice and
// Team.MaxRanksOnDevice say how many ranks share a device; package
// collectives divides its grid by them, since the kernels of the ranks
// wait on each other and every rank's blocks must be resident at once.
// Give every rank its own stream: the default stream of a device is one
// stream for all its ranks, on which their kernels would wait for each
// other until their timeout. Across processes (one rank per process on one
// GPU) each process has a context of its own, and without MPS the GPU
// time-slices between contexts rather than running their kernels together;
// that case is not tested on a GPU.
//
// # Environment variables
//
// NVLS_TRANSPORT (auto, multicast, unicast), NVLS_DEBUG (WARN, INFO,
// TRACE), NVLS_SETUP_TIMEOUT (a duration such as 90s or 2m, or a whole
// number of seconds) and NCCL_NVLS_ENABLE (0, false, off or no switch
// multicast off; any other value leaves it on). A bad value of one of the
// first three is an *EnvError (errors.Is(err, ErrBadEnv)) naming the
// variable and the allowed values, even where an option makes the
// variable moot; New returns it before any driver call. Options win over
// the variables.
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
// Fail records the first fatal error (a device-side timeout, say; from
// any goroutine, a Job included); from then on Err, Alloc, Run and the
// collectives return that same error (matching ErrBroken and the cause)
// until Close, which still frees everything; after Close they return
// ErrClosed. Free keeps working on a broken team.
package team
