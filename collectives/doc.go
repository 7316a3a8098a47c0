// Package collectives runs AllReduce, ReduceScatter, AllGather, Reduce,
// Broadcast and Barrier on a team of GPUs (package team), with NCCL's
// semantics and in-place layouts: the host half of the collectives, over the kernels
// of package kernels.
//
// # Where to start
//
// New makes a Comm for a team. NewBuffer[T] allocates Len elements of T on
// every local GPU (WrapBuffer takes memory nvls did not allocate);
// NewStreams makes a stream per GPU (WrapStreams takes yours; nil is the
// default streams). The typed functions AllReduce, Broadcast, Reduce,
// ReduceScatter, AllGather and Barrier take Buffers, so the element type
// and count come from them, and issue every local rank's part at once;
// Wait waits. Streams.Capture records them into a CUDA graph that
// Graph.Launch replays. ExampleAllReduce and ExampleStreams_Capture show
// both; the Comm methods of the same names are the raw-pointer engine
// underneath (pointers, count and element type given apart). The rest of
// this page is how the engine works.
//
// New makes a Comm for a team: it loads the kernels of the team's flavor
// (FlavorOf: the multicast PTX when the team's transport is multicast, the
// unicast PTX otherwise) on every local device with every entry point
// resolved (kernels.Load), preallocates the per-device launch state and a
// staging area in the team's workspace, and is an io.Closer. DType and Op
// are package kernels' element types and operators; a count is in elements
// of its type, as NCCL's are. On the simulated node (package simnode) the
// kernels run as Go reference implementations that the node carries; this
// package does not link the simulator. New is collective:
// every rank of the team calls it (every process, under MPI), and the
// ranks agree on the configuration before any of them goes on (below).
// NewContext is New with a context that bounds that agreement.
//
// # Calls
//
// The collectives take one entry per LOCAL rank (all the
// team's ranks when one process drives every GPU, one under MPI) and a
// stream per local rank. They are stream-ordered and asynchronous: they
// return once the work is enqueued: launched from the calling goroutine
// where every local rank runs in one context (one GPU) on created streams,
// otherwise on every local device in parallel through the team's
// per-device workers (docs/sync.md). Nothing in them is
// host-synchronous, so they can be captured into CUDA graphs; the kernels'
// barrier counters and epochs live in device memory and only grow, so a
// captured graph stays right however often it is replayed. A team of one
// rank launches no kernel, as NCCL with one rank: each collective is then a
// copy of send into recv (cuMemcpyDtoDAsync), or nothing in place, and a
// barrier is nothing.
//
// Sync waits, up to a deadline, for the streams (polling; created streams
// from the calling goroutine) and then reads every local rank's status
// word, which the kernels write in mapped host memory: a kernel whose wait
// ran out of time leaves a *TimeoutError there (the operation, the rank,
// the phase and block), and marks the team failed on the device, so that
// every kernel queued behind it, on any rank, gives up at once (an
// *AbortError): a failure drains in about one timeout. Sync marks the
// team broken (team.Team.Fail): from then on every call of every Comm of
// the team returns that error, until Close, which still frees everything.
//
// # Buffers
//
// A pointer inside the team's workspace data area (a team.Buffer) at the
// same offset on every rank is used in place, without a copy (zero-copy); it
// must be 16-byte aligned and lie, with its whole count, inside one live
// buffer of the team's Alloc (else it is an error naming the buffer's
// bounds: the count would run into the next buffer). Any other
// device pointer of the rank's own device is copied in (cuMemcpyDtoDAsync
// into a staging area of the workspace, on the caller's stream) and the
// result copied out, in chunks of the staging size. In place (send[i] ==
// recv[i]; ReduceScatter: recv[i] == send[i] + rank x recvcount elements;
// AllGather: send[i] == recv[i] + rank x sendcount elements) is allowed
// either way. Only the side other ranks touch needs the symmetric team
// buffer to go without a copy (ReduceScatter's and Reduce's send,
// AllGather's recv); the side only its own rank touches (ReduceScatter's
// recv, AllGather's send, the root's recv of a Reduce) is used in place
// wherever it is on the rank's device, except that a two-shot Reduce,
// whose ranks all store into the root's recv, needs it in a team buffer to
// go without a copy. One process driving all GPUs decides for
// all ranks together (zero-copy only when every rank's pointer qualifies);
// under MPI each process decides for its own rank, so every process must
// pass the same kind of pointer (all symmetric team buffers at the same
// offset, or all other device pointers), as every rank must pass the same
// count, type, operator and root (Reduce: the root's recv buffer on every
// rank, or no team buffer on any).
//
// Everything wrong with the arguments is an error before anything is
// launched (matching ErrInvalid, and kernels.ErrUnsupported for an invalid
// type or operator); count 0 launches nothing and returns nil. Every type
// and operator runs on every transport: a multicast Comm loads the unicast
// kernels too and runs them over the UC aliases where multimem cannot
// reduce (f32 min and max), saying so at debug level (NVLS_DEBUG=TRACE).
// That includes the streams (of the collectives and of Sync): each must be
// of its rank's context, so of its device, and none given for two ranks;
// 0, 1 and 2 (the legacy and per-thread default streams) mean each rank's
// own device's default stream, except on a device that several local
// ranks share (team.WithSharedDevices), where each rank needs a stream of
// its own (their kernels wait for each other). A stream is asked about
// (cuStreamGetCtx) the first time it is given for a rank, not on every
// call.
//
// # Algorithms and tuning
//
// All-reduces up to the LL limit (DefaultLLMax, 64 KiB) run the LL kernel:
// every rank pushes its send, with a flag in every 16-byte line, into an LL
// area of every rank and polls its own: no barrier, one one-way NVLink
// trip; it works on the pointers themselves, wherever they are on the
// rank's device (no staging copy). Larger ones up to the one-shot limit run
// the one-shot kernel (every rank reduces the whole buffer from every
// rank), larger ones still the two-shot kernel (reduce-scatter, then
// all-gather). ReduceScatter and AllGather run LL while a slice is within
// the LL limit, else their one pass (each rank reduces its own slice with
// one multimem.ld_reduce pass, or stores its send into its slot of every
// rank with one multimem.st pass; unicast: loads or stores to every
// peer). Reduce runs LL, then the root reduces everything (one-shot);
// above the one-shot limit on the unicast transport every rank reduces a
// slice straight into the root's recv (two-shot, one launch; through the
// root's staging area where that recv is not a team buffer). Broadcast
// has one kernel: the root stores its send to every rank (one multimem.st
// pass); on the unicast transport with every rank in one process, every
// rank instead copies its slice of the root's send to every rank (the
// root's memory read once, every rank's blocks copying). The limits, the largest grid and the barrier timeout come
// from options, else from NVLS_LL_MAX, NVLS_ONESHOT_MAX, NVLS_GRID and
// NVLS_TIMEOUT, else from the defaults (DefaultLLMax, DefaultOneShotMax,
// DefaultOneShotMax2, DefaultMaxGrid, DefaultTimeout).
//
// # One configuration for the whole team
//
// The algorithm, the grid and the number of launches of every collective
// must be the same on every rank, or the ranks' kernels wait for each
// other until their timeout. Under MPI each process resolves its own
// configuration from its own options and environment, so New makes sure
// they agree: each process all-gathers, through the team's bootstrap
// (team.Team.AllGather), the values its ranks would run with after every
// adjustment to the team (the kernels' flavor; the LL limit, 0 where the
// loaded PTX has no LL kernels; the one-shot limit, DefaultOneShotMax2 for
// 2 ranks; the grid, clamped to the SM count and to the ranks sharing a
// device; the timeout; the staging size) and where each came from. This
// happens once New's own part is done and before anything that waits for
// the other ranks on the device (the LL area's zeroing barrier). When the
// values differ, New fails on every rank with the same
// *ConfigMismatchError (errors.Is ErrConfigMismatch and ErrInvalid), for
// example
//
//	collectives: New: the ranks resolved different configurations (every process of a team must pass the same options and set the same NVLS_* variables): LL max: 65536 bytes (default) on ranks 0, 2, 3 vs 32768 bytes (env NVLS_LL_MAX) on rank 1
//
// A rank whose own part failed (a bad NVLS_GRID, say) still takes part:
// it returns its own error, and the others a *team.PeerError naming it
// (errors.Is team.ErrPeerFailed), at once rather than at a deadline. A
// rank that does not call New within the team's setup timeout (or
// NewContext's ctx) is named by the others: *team.MissingRanksError. On
// any of these failures New releases what it took; after a mismatch or a
// rank's own failure the team is as it was, and a corrected New on every
// rank may follow (a missing rank, though, leaves the team's bootstrap
// broken). The kind of pointers passed to each call (team buffers or
// not) is the caller's to keep the same on every rank: it is not checked.
package collectives
