package kernels

// The kernel ABI shared by kernels/*.cu (through kernels/nvls.h) and Go.
// Every constant here has a twin in nvls.h; abi_test.go checks them.

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
	// SignalBytes is the size of the signal area.
	SignalBytes = 64 << 10
)

// Status word encoding (written by a kernel whose spin-wait ran out of
// time): bit 0 set = timed out; bits 8-15 the opcode; bits 16-23 the
// barrier phase; bits 32-47 the block.
const (
	StatusTimeout = 1
)

// Opcodes name the operation in the status word.
const (
	OpBarrier   = 1
	OpAllReduce = 2
	OpBroadcast = 3
)
