package kabi

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/nvls-go/nvls/kernels"
)

var le = binary.LittleEndian

// Launch shape and vector width (NVLS_BLOCK_THREADS, NVLS_VEC_BYTES).
const (
	// BlockThreads is the block size every collective kernel is launched
	// with (its __launch_bounds__).
	BlockThreads = 512
	// VecBytes is the width of one vector access; offsets and workspace
	// bases are aligned to it.
	VecBytes = 16
)

// ParamsSize is the size of Params and of the kernels' .param (NVLS_PARAMS_SIZE).
const ParamsSize = 168

// Params is the one by-value parameter of every kernel, the Go mirror of
// struct nvls_params in kernels/nvls.h: same fields, same order, same
// offsets (abi_test.go checks it against the header, and against the
// .param size of every entry in the committed PTX). Launch with
//
//	d.LaunchKernel(f, grid, cuda.D1(kabi.BlockThreads), 0, stream,
//		unsafe.Pointer(&p), kabi.ParamsSize)
//
// Each field means one thing, in every kernel; a field a kernel does not
// use is 0. The unit of Count is elements, as the collectives API takes
// them: a kernel moves Count*ElemBytes bytes.
//
//   - MC: the multicast alias of the workspace on the launching device
//     (multicast flavor); 0 in the unicast flavor (the Go reference
//     kernels pick the flavor from it: Params.Flavor).
//   - UC[p]: the base of rank p's workspace as mapped on the launching
//     device (UC[Rank] is its own); entries past NRanks are ignored. Every
//     workspace starts with the signal area (abi.go) at the same offsets.
//   - Send, Recv: byte offsets of the input and output from the workspace
//     base, the same on every rank, multiples of VecBytes, past the signal
//     area. With FlagAbsPtrs (LL all-reduce only): absolute addresses of
//     memory of the launching device, any alignment.
//   - Stage: the one-shot all-reduce in place (Send == Recv) only: the
//     offset of a scratch area of Count elements (rounded up to VecBytes),
//     overlapping neither send nor recv.
//   - LLArea, LLLines: the LL all-reduce only: the offset of the rank's LL
//     area (the same on every rank) and its capacity C in lines:
//     [2 parities][NRanks sources][C lines] of LLLineBytes,
//     LLAreaBytes(C*LLLinePayload, NRanks) bytes, C >= ceil(Count*ElemBytes
//     / LLLinePayload). Zeroed before the first LL call, then owned by the
//     LL kernels (their epoch and block counter live at LLOffset of the
//     signal area).
//   - Count: the number of elements; 0 runs only the barriers (the host
//     does not launch then). ElemBytes: the size of one element (the
//     all-reduce kernels: their DType's Size; broadcast copies bytes and
//     takes any element size). The barrier kernel ignores both.
//   - TimeoutNs bounds every spin-wait, from %globaltimer at kernel entry;
//     0 means none. On expiry the kernel writes StatusTimeout | Opcode<<8 |
//     phase<<16 | block<<32 into its own status word (only if it is 0),
//     marks the team failed (FailedOffset) on every rank and returns; the
//     team is unusable afterwards. A kernel that finds the team failed
//     writes StatusAborted | ... | failing rank<<48 (only if its word is
//     0) and returns at once.
//   - HostStatus: the device address of the rank's status word in mapped,
//     page-locked host memory (cuMemHostAlloc with DEVICEMAP), or 0 for
//     none: whichever kernel writes the status word (the CAS's winner)
//     also stores it there, so the host reads it without a copy.
//   - Rank, NRanks: this rank, and the team size (1..MaxRanks).
//   - Root: the broadcast's root rank.
//   - Opcode: the kernels.Op* value of the launched collective
//     (kernels.Coll.Opcode), for the status word.
//   - CallCount: the count of the whole call, of which Count may be one
//     chunk; 0 means Count. Only the argument check reads it.
//   - Check: the call's arguments (CheckArgs), which the start barrier
//     and the LL lines compare between ranks (check.go); a difference is
//     StatusMismatch, never a collective whose ranks disagree.
//   - Flags: 0, or the FlagAbs* bits of the kernels that take them
//     (abi.go), or FlagSliced (the unicast broadcast: each rank but the
//     root copies one of NRanks-1 slices of the root's send; only the
//     root passes Send, which it publishes to the others through
//     RootSendOffset).
//
// Every rank launches the same kernel with the same Count, ElemBytes,
// Send, Recv, Stage, LLArea, LLLines and Root and the same grid (1 to
// MaxBlocks blocks of BlockThreads threads; LL: blocks of 1 to
// BlockThreads; barrier: grid 1, a block of at least NRanks threads, as
// the start barrier polls a slot per thread: barrier.cu's "any block
// size" predates that), in the same order on its stream. What each
// kernel computes is in kernels/README.md.
type Params struct {
	MC         uint64
	UC         [MaxRanks]uint64
	Send       uint64
	Recv       uint64
	Stage      uint64
	LLArea     uint64
	Count      uint64
	TimeoutNs  uint64
	ElemBytes  uint32
	LLLines    uint32
	Rank       uint32
	NRanks     uint32
	Root       uint32
	Opcode     uint32
	Flags      uint32
	Check      uint32
	HostStatus uint64
	CallCount  uint64
}

var _ [ParamsSize - unsafe.Sizeof(Params{})]struct{}
var _ [unsafe.Sizeof(Params{}) - ParamsSize]struct{}

// Flavor is the flavor the params are for: multicast iff MC is set.
func (p *Params) Flavor() kernels.Flavor {
	if p.MC != 0 {
		return kernels.Multicast
	}
	return kernels.Unicast
}

// Bytes is the size of the data the params describe: Count*ElemBytes.
func (p *Params) Bytes() uint64 { return p.Count * uint64(p.ElemBytes) }

// u64s and u32s list the fields in layout order, for Marshal and
// UnmarshalParams.
func (p *Params) u64s() []*uint64 {
	return []*uint64{&p.Send, &p.Recv, &p.Stage, &p.LLArea, &p.Count, &p.TimeoutNs}
}

func (p *Params) u32s() []*uint32 {
	return []*uint32{&p.ElemBytes, &p.LLLines, &p.Rank, &p.NRanks, &p.Root, &p.Opcode, &p.Flags, &p.Check}
}

// Marshal returns the bytes the kernel sees (little-endian, the C layout);
// the Go reference implementations decode it with UnmarshalParams.
func (p *Params) Marshal() []byte {
	b := make([]byte, ParamsSize)
	le.PutUint64(b[0:], p.MC)
	for i, u := range p.UC {
		le.PutUint64(b[8+8*i:], u)
	}
	o := 8 + 8*MaxRanks
	for _, v := range p.u64s() {
		le.PutUint64(b[o:], *v)
		o += 8
	}
	for _, v := range p.u32s() {
		le.PutUint32(b[o:], *v)
		o += 4
	}
	le.PutUint64(b[o:], p.HostStatus)
	le.PutUint64(b[o+8:], p.CallCount)
	return b
}

// UnmarshalParams decodes the parameter bytes of a launch.
func UnmarshalParams(b []byte) (Params, error) {
	var p Params
	if len(b) != ParamsSize {
		return p, fmt.Errorf("kabi: params are %d bytes, want %d", len(b), ParamsSize)
	}
	p.MC = le.Uint64(b[0:])
	for i := range p.UC {
		p.UC[i] = le.Uint64(b[8+8*i:])
	}
	o := 8 + 8*MaxRanks
	for _, v := range p.u64s() {
		*v = le.Uint64(b[o:])
		o += 8
	}
	for _, v := range p.u32s() {
		*v = le.Uint32(b[o:])
		o += 4
	}
	p.HostStatus = le.Uint64(b[o:])
	p.CallCount = le.Uint64(b[o+8:])
	return p, nil
}

// Status is a decoded status word.
type Status struct {
	// Word is the raw value (0: no error).
	Word uint64
}

// Kind is the status word's kind: 0 (fine), StatusTimeout, StatusAborted,
// StatusMismatch or another value (not written by these kernels).
func (s Status) Kind() uint32 { return uint32(s.Word) & 0xff }

// TimedOut reports whether a spin-wait ran out of time.
func (s Status) TimedOut() bool { return s.Kind() == StatusTimeout }

// Aborted reports whether the kernel gave up because the team had failed
// (FailedRank's kernel failed first).
func (s Status) Aborted() bool { return s.Kind() == StatusAborted }

// Opcode is the kernels.Op* value of the kernel that wrote the word.
func (s Status) Opcode() uint32 { return uint32(s.Word>>8) & 0xff }

// Phase is the barrier phase of the wait (0: start, 1: end; LL: 0),
// PhasePush for the push broadcast's wait for the root's pieces, or
// PhaseEntry for a kernel that gave up at entry.
func (s Status) Phase() uint32 { return uint32(s.Word>>16) & 0xff }

// Block is the block that wrote the word.
func (s Status) Block() uint32 { return uint32(s.Word>>32) & 0xffff }

// FailedRank is, for an aborted kernel (and in a team-failed word), the
// rank whose failure it found.
func (s Status) FailedRank() int { return int(s.Word>>48) & 0xff }

// FoundKind is, for an aborted kernel, the kind of the failure it found
// (StatusTimeout or StatusMismatch).
func (s Status) FoundKind() uint32 { return uint32(s.Word>>24) & 0xff }

// Mismatch reports whether the kernel found that the ranks' arguments
// differ.
func (s Status) Mismatch() bool { return s.Kind() == StatusMismatch }

func (s Status) String() string {
	switch {
	case s.Word == 0:
		return "ok"
	case s.TimedOut():
		return fmt.Sprintf("%s timed out %s (block %d)", kernels.OpName(s.Opcode()), s.Where(), s.Block())
	case s.Aborted() && s.FoundKind() == StatusMismatch:
		return fmt.Sprintf("%s gave up %s (block %d): rank %d found that the ranks' arguments differ", kernels.OpName(s.Opcode()), s.Where(), s.Block(), s.FailedRank())
	case s.Aborted():
		return fmt.Sprintf("%s gave up %s (block %d): rank %d had failed", kernels.OpName(s.Opcode()), s.Where(), s.Block(), s.FailedRank())
	case s.Mismatch():
		return fmt.Sprintf("%s found that the ranks' arguments differ (block %d)", kernels.OpName(s.Opcode()), s.Block())
	}
	return fmt.Sprintf("status %#x", s.Word)
}

// Where says where the kernel was: "at entry", "waiting for the root's
// data" (PhasePush) or "in barrier phase N".
func (s Status) Where() string {
	switch s.Phase() {
	case PhaseEntry:
		return "at entry"
	case PhasePush:
		return "waiting for the root's data"
	}
	return fmt.Sprintf("in barrier phase %d", s.Phase())
}

// TimeoutStatus is the status word a kernel writes when the wait of
// barrier phase phase in block block runs out of time.
func TimeoutStatus(opcode, phase, block uint32) uint64 {
	return StatusTimeout | uint64(opcode&0xff)<<8 | uint64(phase&0xff)<<16 | uint64(block&0xffff)<<32
}

// FailedWord is what a kernel of rank rank whose status word became
// status (a timeout) writes into every rank's team-failed word.
func FailedWord(status uint64, rank int) uint64 { return status | uint64(rank&0xff)<<48 }

// AbortStatus is the status word a kernel writes when block block gives up
// in phase phase (PhaseEntry: at entry) because the team-failed word was
// failed.
func AbortStatus(opcode, phase, block uint32, failed uint64) uint64 {
	return StatusAborted | uint64(opcode&0xff)<<8 | uint64(phase&0xff)<<16 | uint64(block&0xffff)<<32 | failed&(0xff<<48) | (failed&0xff)<<24
}

// MismatchStatus is the status word a kernel writes when block block finds
// in phase 0 that the ranks' arguments differ.
func MismatchStatus(opcode, block uint32) uint64 {
	return StatusMismatch | uint64(opcode&0xff)<<8 | uint64(block&0xffff)<<32
}
