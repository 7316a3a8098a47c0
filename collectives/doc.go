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
// and count come from them; Wait waits. Given the Comm they issue every
// local rank's part at once (a group call, one goroutine for every GPU);
// given a Rank (Comm.Ranks: one per local rank, so one under mpirun) they
// issue that rank's part from its own goroutine, and the call runs when
// every local rank's part has come. Streams.Capture records them into a
// CUDA graph that Graph.Launch replays. ExampleAllReduce,
// ExampleComm_Ranks and ExampleStreams_Capture show the three; the Comm
// methods of the same names are the raw-pointer engine underneath
// (pointers, count and element type given apart).
//
// Errors: everything wrong with the arguments is an error before anything
// is launched (errors.Is ErrInvalid; *ArgError names the call, the
// argument and the rank). Wait (Comm.Sync) waits up to a deadline and
// reports a kernel's timeout (*TimeoutError) or its giving up behind
// another rank's failure (*AbortError); the team is then broken and every
// later call returns that error until Close. Every type and operator runs
// on every transport (where multimem cannot reduce, f32 min and max, the
// unicast kernel runs over the UC aliases, said at debug level). The
// algorithm limits, grids and timeout come from options, else NVLS_LL_MAX,
// NVLS_ONESHOT_MAX, NVLS_GRID, NVLS_MIN_GRID, NVLS_CE_MIN and
// NVLS_TIMEOUT; New makes every rank agree on them (*ConfigMismatchError
// otherwise).
//
// On the simulated node (package simnode) the kernels run as Go reference
// implementations that the node carries; this package does not link the
// simulator. How the engine works (zero-copy and staged buffers, the
// algorithms, the agreement): docs/collectives.md; Sync and the drain:
// docs/sync.md.
package collectives
