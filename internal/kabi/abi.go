package kabi

// The kernel ABI shared by kernels/*.cu (through kernels/nvls.h) and Go.
// Every constant here has a twin in kernels/nvls.h; abi_test.go checks
// them. The opcodes (kernels.Op*) are public in package kernels: the
// errors of package collectives carry them.

// MaxRanks is the largest team the kernels take (an HGX node: 8 GPUs).
const MaxRanks = 8

// MaxBlocks is the number of per-block barrier slots per phase; grids are
// never larger.
const MaxBlocks = 256

// Workspace layout: every rank's workspace allocation starts with a signal
// area of SignalBytes, followed by the data area that team.Alloc hands
// out. Offsets are from the start of the allocation and are the same on
// every rank.
const (
	// StatusOffset: a uint64 status word, written only by the rank's own
	// kernels (0 = fine; see Status*), read by the host.
	StatusOffset = 0
	// FailedOffset: a uint64 team-failed word, 0 while no rank failed;
	// else the first failure's status word with the failing rank in bits
	// 48-55, written (CAS from 0) by the failing rank's kernel into every
	// rank's word through the UC aliases. Every kernel reads the own word
	// at entry and in its spin-waits and, finding it set, records
	// StatusAborted and returns.
	FailedOffset = 128
	// CounterOffset: uint32 barrier counters [Phases][MaxBlocks]. Every
	// rank adds 1 to slot [p][b] of every rank (through the MC alias, or
	// to each peer over the UC aliases); they only grow (mod 2^32).
	CounterOffset = 256
	// EpochOffset: uint32 epochs [Phases][MaxBlocks], the rank's own count
	// of what its counters must reach; read and written only by its own
	// device, never reset.
	EpochOffset = 4096
	// Phases is the number of barrier phases (start and end of a
	// collective use different counters).
	Phases = 2
	// LLOffset: the low-latency (LL) all-reduce's state, read and written
	// only by the rank's own device: a uint32 epoch at LLOffset (the epoch
	// of the last LL kernel that finished; 0 before the first) and a
	// uint32 count of the blocks of the running LL kernel that have read
	// the epoch at LLOffset+4 (0 between kernels; unused with one block).
	LLOffset = 8192
	// RootSendOffset: uint64 [MaxBlocks], where the root's data is for the
	// sliced broadcast (FlagSliced): block b of the root stores its Send
	// into slot b of every other rank before it arrives at the start
	// barrier, and block b of every other rank reads its own slot after
	// the barrier, so that a rank needs not know the root's buffer (under
	// MPI it cannot).
	RootSendOffset = 16384
	// PushFlagOffset: uint32 [MaxBlocks], the push broadcast's flags
	// (FlagPush): the root's block b stores k+1 into slot b of the rank
	// whose slice's round k it has stored; that rank's block b waits for
	// it and sets it back to 0 after its last round.
	PushFlagOffset = 20480
	// CEFlagOffset: uint32 [CEPieces][MaxRanks], the pipelined
	// copy-engine reductions' flags (FlagPieces): after piece i of what it
	// sends rank r, rank q copies its own start-barrier sequence word
	// (EpochOffset, block 0's) into r's slot [i][q]; r's kernel waits for
	// the slot to equal its own word, which the same start barrier set.
	CEFlagOffset = 24576
	// ArriveOffset: uint64 start-barrier arrival words [2][MaxBlocks]
	// [MaxRanks]: block b of rank r stores {seq, the call's arguments}
	// (CallWord) into slot [seq&1][b][r] of every rank (check.go).
	ArriveOffset = 32768
	// SignalBytes is the size of the signal area.
	SignalBytes = 64 << 10
)

// HostDiagOffset is where, in a rank's mapped host status area, a kernel
// that records StatusMismatch leaves the arrival word of every rank
// ([MaxRanks]uint64, 0 where it did not see one) before the status word.
const HostDiagOffset = 64

// LLLineBytes is the size of one LL line: {data0, flag, data1, flag}, four
// uint32 stored and loaded as one 16-byte access; LLLinePayload of its
// bytes are data.
const (
	LLLineBytes   = 16
	LLLinePayload = 8
)

// LLAreaBytes is the size of one rank's LL area for payloads of up to
// payload bytes in a team of nranks: [2 parities][nranks sources][lines]
// lines of LLLineBytes, lines = ceil(payload / LLLinePayload).
func LLAreaBytes(payload uint64, nranks int) uint64 {
	lines := (payload + LLLinePayload - 1) / LLLinePayload
	return 2 * uint64(nranks) * lines * LLLineBytes
}

// Params.Flags bits (NVLS_FLAG_*): which operands are absolute device
// addresses of memory of the launching device (any alignment) rather than
// workspace offsets. Only an operand that no other rank touches can be.
const (
	// FlagAbsPtrs: Send and Recv. The LL kernels take it.
	FlagAbsPtrs = 1
	// FlagAbsSend: Send. The one-shot all-gather takes it.
	FlagAbsSend = 2
	// FlagAbsRecv: Recv. The one-shot reduce-scatter and the one-shot
	// reduce take it.
	FlagAbsRecv = 4
	// FlagSliced is no operand's: the broadcast of the unicast flavor
	// with it (and NRanks > 1) cuts the root's send into NRanks-1 slices
	// of whole vectors, the last one the rest, and has rank Root+1+j (mod
	// NRanks) copy slice j to every rank, instead of the root copying it
	// all; the root copies nothing. The root publishes its Send through
	// RootSendOffset, and the other ranks' Send is not read. The multicast
	// flavor ignores it.
	FlagSliced = 8
	// FlagLaunchDependents is no operand's either, and every kernel takes
	// it: the kernel runs griddepcontrol.launch_dependents at entry, so
	// that the stream's next kernel, if launched with programmatic stream
	// serialization, starts now and waits for this one's end in its own
	// griddepcontrol.wait.
	FlagLaunchDependents = 16
	// FlagPush is no operand's: the broadcast of the unicast flavor with
	// it (and NRanks > 2) moves FlagSliced's slices by stores alone: the
	// root stores slice j, in pieces of PushVecs vectors a thread, into
	// rank Root+1+j's recv, flagging each round in that rank's
	// PushFlagOffset slot, and that rank stores each piece on to every
	// rank but the root and itself. It wins over FlagSliced; the
	// multicast flavor ignores it.
	FlagPush = 32
	// FlagRootSlice is no operand's: the two-shot reduce with it cuts the
	// data into NRanks slices, the root reducing one too, rather than
	// NRanks-1 for the ranks other than the root; so does the broadcast
	// with FlagSliced (the root copies slice 0 from its own Send, rank
	// Root+j slice j).
	FlagRootSlice = 64
	// FlagOnePass is no operand's: the unicast two-shot all-reduce with
	// it reduces and stores each vector in one pass however many vectors
	// a thread has, rather than in two (the loads into the own recv, then
	// the stores to the peers) from 8 vectors a thread. The multicast
	// flavor ignores it.
	FlagOnePass = 128
	// FlagLocal is no operand's: the unicast one-shot reduce-scatter with
	// it reduces Count elements from this rank's own memory alone, without
	// barriers: source r (r != Rank) at workspace offset Stage + r x
	// (CallCount / NRanks) elements (where copy engines put the peers'
	// contributions, between the host's barriers), the own at Send; a
	// chunk of slices of CallCount / NRanks elements. The unicast one-shot
	// reduce with it, launched on the root alone, does the same with the
	// sources packed: rank r's at Stage + w x Count elements in whole
	// 16-byte vectors, w its index among the ranks other than the root.
	// 256 is left to the bulk-copy experiment (branch exp/tma). The
	// multicast flavor ignores it.
	FlagLocal = 512
	// FlagPieces, with FlagLocal on the reduce (2 ranks) or the
	// reduce-scatter: the launch waits for each of CEPieces pieces
	// (CEPieceStart) to land from every other rank before it reduces it:
	// their copy engines deliver them while it runs, each followed by a
	// flag (CEFlagOffset). The multicast flavor ignores it.
	FlagPieces = 1024
	// FlagLLTwo, on the LL reduce: in two steps, a reduce-scatter of the
	// lines to every rank, then every rank's reduced slice to the root
	// (nvls.h: ll_collective), so that each rank sends 2 (NRanks - 1) /
	// NRanks of the payload instead of NRanks - 1 times it. The slot of a
	// source holds 2 ceil(lines / NRanks) lines, at most LLLines.
	FlagLLTwo = 2048
	// FlagLL, on the broadcast: the LL protocol instead of the barrier
	// kernel (nvls.h: ll_broadcast): the root pushes its lines to every
	// other rank, each other rank pushes one line to every rank (so that
	// every rank hears from every rank, as the LL area's two parities
	// need). It takes FlagAbsPtrs, and no other broadcast flag.
	FlagLL = 4096
)

// CEPieces is how many pieces a pipelined copy-engine reduce cuts its
// count into (FlagPieces): halves, quarters and so on, the last two equal,
// so that the root reduces a large piece while a smaller one is copied
// and the last reduce is short (1/128 of the data).
const CEPieces = 8

// CEFlag is the offset of flag word [i][q] (CEFlagOffset): rank q's, for
// piece i.
func CEFlag(i, q int) uint64 { return CEFlagOffset + 4*uint64(i*MaxRanks+q) }

// CEPieceStart is where piece i (0 to CEPieces) of a pipelined reduce of
// count elements starts, in elements: count - count >> i rounded down to
// whole vectors of per elements; 0 for piece 0, count past the last.
// nvls.h's ce_piece_start computes the same.
func CEPieceStart(i int, count, per uint64) uint64 {
	switch {
	case i <= 0:
		return 0
	case i >= CEPieces:
		return count
	}
	return (count - count>>uint(i)) / per * per
}

// PushVecs is how many 16-byte vectors each thread moves in a round of
// the push broadcast (FlagPush): a piece is BlockThreads x PushVecs
// vectors, 32 KiB.
const PushVecs = 4

// RingVecs and RingChunks shape the push reduce's (the ring's) piece:
// RingChunks chunks of blockDim x RingVecs vectors, 128 KiB at 512
// threads; one fence and flag a piece.
const (
	RingVecs   = 4
	RingChunks = 4
)

// The push reduce (FlagPush on the two-shot reduce, unicast, 2 ranks or
// more) is a ring along root+1, ..., root: block b of each rank adds its
// piece to its predecessor's partial sum and stores the sum into its
// successor's FIFO, the root into its recv (reduce.cu: reduce_push). Its
// area (Stage) holds the flag words ready [MaxRanks][MaxBlocks] (the
// predecessor s's block b stores k+1 into [s][b] after its piece of round
// k) and credit [MaxRanks][MaxBlocks] (the successor o's block b stores
// k+1 into [o][b] once it has consumed round k and round k+PushDepth
// follows), every block zeroing its own words of both before the start
// barrier; then the FIFO, slot [b][k mod PushDepth] of a piece each.
const (
	// PushDepth is how many rounds of a block the push reduce's FIFO
	// holds: two were level with four on 2 x H200 (docs/perf.md run
	// 112, 127 blocks) and at 4 ranks with 32 KiB pieces (run 107).
	PushDepth = 2
	// PushFlagsBytes is the flag words' size at the start of the stage.
	PushFlagsBytes = 2 * MaxRanks * MaxBlocks * 4
)

// PushReduceBytes is the stage bytes a push reduce (the ring) of grid
// blocks of block threads takes on every rank: the flags and the FIFO, a
// slot of a piece per block and round of depth.
func PushReduceBytes(grid, block uint64) uint64 {
	return PushFlagsBytes + grid*PushDepth*RingChunks*block*RingVecs*VecBytes
}

// Status word encoding: bits 0-7 the kind (StatusTimeout: a spin-wait
// ran out of time; StatusAborted: the kernel gave up because the team had
// failed); bits 8-15 the opcode; bits 16-23 the barrier phase (LL: 0;
// PhaseEntry: at entry, before any wait); bits 32-47 the block; for
// StatusAborted, bits 48-55 the rank whose failure it found and bits 24-31
// the kind of that failure.
const (
	StatusTimeout = 1
	StatusAborted = 2
	// StatusMismatch: the ranks called with different arguments (the
	// start barrier's or the LL lines' check); the host status area then
	// holds every rank's arrival word at HostDiagOffset.
	StatusMismatch = 3
	// PhaseEntry is the phase of a kernel that gave up at entry.
	PhaseEntry = 255
	// PhasePush is the phase of the push broadcast's wait for the root's
	// pieces (FlagPush), between the start and end barriers.
	PhasePush = 2
)
