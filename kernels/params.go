package kernels

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

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
const ParamsSize = 136

// Params is the one by-value parameter of every kernel, the Go mirror of
// struct nvls_params in kernels/nvls.h: same fields, same order, same
// offsets (abi_test.go checks it against the header, and against the
// .param size of every entry in the committed PTX). Launch with
//
//	d.LaunchKernel(f, grid, cuda.D1(kernels.BlockThreads), 0, stream,
//		unsafe.Pointer(&p), kernels.ParamsSize)
//
// The contract, for every kernel:
//
//   - Every rank's workspace is one allocation that starts with the signal
//     area (abi.go: status word, barrier counters, epochs) and is mapped at
//     the same offsets on every rank. UC[p] is the base of rank p's
//     workspace as mapped on the launching device (UC[Rank] is its own);
//     entries at and past NRanks are ignored. In the multicast flavor MC is
//     the base of the multicast alias of the workspace on the launching
//     device; the UC entries are still needed there (barrier epochs, the
//     scalar tail). In the unicast flavor MC must be 0 (the Go reference
//     implementations pick the flavor from it).
//   - Send, Recv and Stage are byte offsets from the workspace base, the
//     same on every rank, multiples of VecBytes, past the signal area.
//   - Count is the number of elements (all-reduce: of the kernel's element
//     type) or of bytes (broadcast). A launch with Count 0 only runs the
//     two barriers (the host treats count 0 as a no-op and does not
//     launch). The barrier kernel ignores it.
//   - Every rank launches the same kernel with the same Count, Send, Recv,
//     Stage, Root and the same grid (1..MaxBlocks blocks of BlockThreads
//     threads; the barrier kernel: grid 1, any block size), in the same
//     order on its stream as every other rank.
//   - TimeoutNs bounds every spin-wait, from %globaltimer at kernel entry;
//     0 means no deadline. On expiry the kernel writes StatusTimeout |
//     Opcode<<8 | phase<<16 | block<<32 into its own status word (only if
//     the word is 0) and returns; the team is unusable afterwards (the
//     barrier counters of the ranks no longer agree).
//   - Opcode is the Op* value the kernel records on timeout (the host
//     passes the operation it launched, e.g. OpAllReduce).
//   - Flags is 0, or (the LL all-reduce only) FlagAbsPtrs: Send and Recv
//     are then absolute device addresses of memory of the launching device,
//     of any alignment, not workspace offsets (so that memory outside the
//     workspace needs no staging copy: LL never touches another rank's
//     user buffers).
//
// Per kernel:
//
//   - All-reduce, one-shot: recv[i] = op over ranks of send[i] (16-bit
//     floats reduced in f32 and rounded once; unicast: in rank order, so
//     every rank's result is bit-identical). In place (Send == Recv) needs
//     Stage: a scratch area of Count elements (rounded up to VecBytes) in the
//     workspace, not overlapping send/recv; out of place Stage must be 0.
//   - All-reduce, two-shot: as one-shot; in place needs no Stage (Stage must
//     be 0).
//   - All-reduce, LL: as one-shot (bit-identical results, rank order);
//     Stage is the workspace offset of the rank's LL area (the same on
//     every rank) and Root its capacity C in lines: [2 parities][NRanks
//     sources][C lines] of LLLineBytes, LLAreaBytes(C*LLLinePayload,
//     NRanks) bytes, C >= ceil(Count*size/LLLinePayload). Zeroed before the
//     first LL call, then owned by the LL kernels; its state (epoch, done
//     counter) lives at LLOffset of the signal area. Blocks of 1 to
//     BlockThreads threads (the same on every rank). In place needs nothing
//     more. LL kernels of one rank never run concurrently (all LL calls
//     of every rank in the same order).
//   - Broadcast: recv of every rank = Count bytes of the root's send; in
//     place (Send == Recv) allowed. Stage must be 0.
//   - Barrier: returns on a rank once every rank has launched it.
type Params struct {
	MC        uint64
	UC        [MaxRanks]uint64
	Send      uint64
	Recv      uint64
	Stage     uint64
	Count     uint64
	TimeoutNs uint64
	Rank      uint32
	NRanks    uint32
	Root      uint32
	Opcode    uint32
	Flags     uint32
	_         uint32
}

var _ [ParamsSize - unsafe.Sizeof(Params{})]struct{}
var _ [unsafe.Sizeof(Params{}) - ParamsSize]struct{}

// Marshal returns the bytes the kernel sees (little-endian, the C layout);
// the Go reference implementations decode it with UnmarshalParams.
func (p *Params) Marshal() []byte {
	b := make([]byte, ParamsSize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], p.MC)
	for i, u := range p.UC {
		le.PutUint64(b[8+8*i:], u)
	}
	o := 8 + 8*MaxRanks
	for _, v := range []uint64{p.Send, p.Recv, p.Stage, p.Count, p.TimeoutNs} {
		le.PutUint64(b[o:], v)
		o += 8
	}
	for _, v := range []uint32{p.Rank, p.NRanks, p.Root, p.Opcode, p.Flags} {
		le.PutUint32(b[o:], v)
		o += 4
	}
	return b
}

// UnmarshalParams decodes the parameter bytes of a launch.
func UnmarshalParams(b []byte) (Params, error) {
	var p Params
	if len(b) != ParamsSize {
		return p, fmt.Errorf("kernels: params are %d bytes, want %d", len(b), ParamsSize)
	}
	le := binary.LittleEndian
	p.MC = le.Uint64(b[0:])
	for i := range p.UC {
		p.UC[i] = le.Uint64(b[8+8*i:])
	}
	o := 8 + 8*MaxRanks
	for _, v := range []*uint64{&p.Send, &p.Recv, &p.Stage, &p.Count, &p.TimeoutNs} {
		*v = le.Uint64(b[o:])
		o += 8
	}
	for _, v := range []*uint32{&p.Rank, &p.NRanks, &p.Root, &p.Opcode, &p.Flags} {
		*v = le.Uint32(b[o:])
		o += 4
	}
	return p, nil
}

// Status is a decoded status word.
type Status struct {
	// Word is the raw value (0: no error).
	Word uint64
}

// TimedOut reports whether a spin-wait ran out of time.
func (s Status) TimedOut() bool { return s.Word&StatusTimeout != 0 }

// Opcode is the Op* value of the kernel that timed out.
func (s Status) Opcode() uint32 { return uint32(s.Word>>8) & 0xff }

// Phase is the barrier phase that timed out (0: start, 1: end).
func (s Status) Phase() uint32 { return uint32(s.Word>>16) & 0xff }

// Block is the block whose wait timed out.
func (s Status) Block() uint32 { return uint32(s.Word>>32) & 0xffff }

// OpName names an Op* value ("all-reduce").
func OpName(op uint32) string {
	switch op {
	case OpBarrier:
		return "barrier"
	case OpAllReduce:
		return "all-reduce"
	case OpBroadcast:
		return "broadcast"
	}
	return fmt.Sprintf("op %d", op)
}

func (s Status) String() string {
	if s.Word == 0 {
		return "ok"
	}
	if s.TimedOut() {
		return fmt.Sprintf("%s timed out in barrier phase %d (block %d)", OpName(s.Opcode()), s.Phase(), s.Block())
	}
	return fmt.Sprintf("status %#x", s.Word)
}

// TimeoutStatus is the status word a kernel writes when the wait of
// barrier phase phase in block block runs out of time.
func TimeoutStatus(opcode, phase, block uint32) uint64 {
	return StatusTimeout | uint64(opcode&0xff)<<8 | uint64(phase&0xff)<<16 | uint64(block&0xffff)<<32
}
