package simkern

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// Kernels returns the Go implementation of every kernel entry point
// (kernels.Kernels of the unicast flavor, a superset of the multicast
// one) by entry name, for sim.Config.Kernels. Each call returns a new map.
func Kernels() map[string]sim.KernelFunc {
	out := make(map[string]sim.KernelFunc)
	for _, k := range kernels.Kernels(kernels.Unicast) {
		if blockFuncs[k.Coll] == nil {
			panic("simkern: no reference kernel for " + k.Name())
		}
		s := &spec{name: k.Name(), k: k}
		out[s.name] = s.run
	}
	return out
}

// blockFuncs are the reference kernels, one per family; each runs one
// block (kern.block) of a launch on one rank. A new family's file may add
// its entry from an init function; Kernels panics on a family without one.
var blockFuncs = map[kernels.Coll]func(*kern) error{
	kernels.CollAllReduce: (*kern).allReduce,
	kernels.CollBroadcast: (*kern).broadcast,
	kernels.CollBarrier: func(k *kern) error {
		_, err := k.barrier(0)
		return err
	},
	kernels.CollReduceScatter: (*kern).reduceScatter,
	kernels.CollAllGather:     (*kern).allGather,
	kernels.CollReduce:        (*kern).reduce,
}

// ErrContract is matched (errors.Is) by the error of a launch whose params
// or shape break the kernels' contract (struct nvls_params,
// kernels/README.md): on a GPU such a launch reads or writes the wrong
// memory or hangs; here it is a kernel fault that says what was wrong.
var ErrContract = errors.New("simkern: launch breaks the kernel contract")

func contract(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrContract, name, fmt.Sprintf(format, args...))
}

// spec is one entry point.
type spec struct {
	name string
	k    kernels.Kernel
}

// isLL: an LL entry (kernels.Kernel zeroes Algo for a family without
// algorithms, and LL is not 0).
func (s *spec) isLL() bool { return s.k.Algo == kernels.LL }

// llLaunch: the launch runs the LL protocol: an LL entry, or the broadcast with
// kabi.FlagLL.
func (k *kern) llLaunch() bool {
	return k.s.isLL() || k.s.k.Coll == kernels.CollBroadcast && k.p.Flags&kabi.FlagLL != 0
}

// typed: the family has an entry per element type and operator.
func (s *spec) typed() bool { return s.k.Coll.Desc().Reduces }

// rooted: the family reads params.root.
func (s *spec) rooted() bool { return s.k.Coll.Desc().Rooted }

// flagsAllowed are the NVLS_FLAG_* bits the entry takes: every entry takes
// FlagLaunchDependents (kernel_entry), which changes nothing a stream of the
// simulated node runs in order.
func (s *spec) flagsAllowed() uint32 {
	return kabi.FlagLaunchDependents | s.operandFlags()
}

// operandFlags are the flags of flagsAllowed that are the entry's own.
func (s *spec) operandFlags() uint32 {
	switch {
	case s.isLL() && s.k.Coll == kernels.CollReduce:
		return kabi.FlagAbsPtrs | kabi.FlagLLTwo
	case s.isLL():
		return kabi.FlagAbsPtrs
	case s.k.Algo == kernels.OneShot && s.k.Coll == kernels.CollReduceScatter:
		return kabi.FlagAbsRecv | kabi.FlagLocal | kabi.FlagPieces
	case s.k.Algo == kernels.OneShot && s.k.Coll == kernels.CollReduce:
		return kabi.FlagAbsRecv | kabi.FlagLocal | kabi.FlagPieces
	case s.k.Algo == kernels.OneShot && s.k.Coll == kernels.CollAllGather:
		return kabi.FlagAbsSend
	case s.k.Coll == kernels.CollBroadcast:
		return kabi.FlagSliced | kabi.FlagPush | kabi.FlagRootSlice | kabi.FlagLL | kabi.FlagAbsPtrs | kabi.FlagLLTwo
	case s.k.Algo == kernels.TwoShot && s.k.Coll == kernels.CollReduce:
		return kabi.FlagRootSlice | kabi.FlagPush
	case s.k.Algo == kernels.TwoShot && s.k.Coll == kernels.CollAllReduce:
		return kabi.FlagOnePass // one pass or two: the same stores (the sim makes them at once); the multicast flavor ignores it
	}
	return 0
}

// kern is one launch on one rank; block is the block being simulated.
type kern struct {
	s        *spec
	mem      sim.Memory
	p        kabi.Params
	dt       kernels.DType // the all-reduce's element type and operator
	op       kernels.RedOp
	mc       bool
	own      uint64
	grid     uint64
	bdim     uint64
	block    uint64
	deadline uint64
	bufs     [][]byte
	out      []byte
	sc       scratch
}

func (s *spec) run(l *sim.Launch) error {
	p, err := kabi.UnmarshalParams(l.Params)
	if err != nil {
		return contract(s.name, "%v", err)
	}
	k := &kern{s: s, mem: l.Mem, p: p, dt: s.k.DType, op: s.k.Op, mc: p.Flavor() == kernels.Multicast,
		grid: uint64(l.Grid.X), bdim: uint64(l.Block.X)}
	if err := k.validate(l); err != nil {
		return err
	}
	k.own = p.UC[p.Rank]
	k.deadline = ^uint64(0)
	if p.TimeoutNs != 0 {
		now := k.mem.GlobalTimer()
		if d := now + p.TimeoutNs; d >= now {
			k.deadline = d
		}
	}
	for b := uint64(0); b < k.grid; b++ {
		k.block = b
		if err := blockFuncs[s.k.Coll](k); err != nil {
			return fmt.Errorf("%s block %d: %w", s.name, b, err)
		}
	}
	return nil
}

// allReduce runs one block of the all-reduce's algorithm.
func (k *kern) allReduce() error {
	switch k.s.k.Algo {
	case kernels.OneShot:
		return k.oneshot()
	case kernels.TwoShot:
		return k.twoshot()
	}
	return k.ll()
}

// validate checks the launch against the contract of kabi.Params.
func (k *kern) validate(l *sim.Launch) error {
	s, p := k.s, &k.p
	if !s.k.In(p.Flavor()) {
		return contract(s.name, "launched with params.MC != 0, but this entry exists in the unicast flavor only (%v)", kernels.CheckSupported(p.Flavor(), s.k.DType, s.k.Op))
	}
	if p.NRanks < 1 || p.NRanks > kabi.MaxRanks {
		return contract(s.name, "nranks %d not in [1, %d]", p.NRanks, kabi.MaxRanks)
	}
	if p.Rank >= p.NRanks {
		return contract(s.name, "rank %d >= nranks %d", p.Rank, p.NRanks)
	}
	for r := uint32(0); r < p.NRanks; r++ {
		if p.UC[r] == 0 || p.UC[r]%kabi.VecBytes != 0 {
			return contract(s.name, "uc[%d] = %#x: not a 16-byte aligned workspace base", r, p.UC[r])
		}
	}
	if k.mc && p.MC%kabi.VecBytes != 0 {
		return contract(s.name, "mc = %#x is not 16-byte aligned", p.MC)
	}
	if p.HostStatus%8 != 0 {
		return contract(s.name, "host_status = %#x is not 8-byte aligned", p.HostStatus)
	}
	if err := k.validateShape(l); err != nil {
		return err
	}
	if err := k.validateFields(); err != nil {
		return err
	}
	if s.k.Coll == kernels.CollBarrier {
		return nil
	}
	return k.validateBuffers()
}

// validateShape checks the grid and block of the launch.
func (k *kern) validateShape(l *sim.Launch) error {
	s := k.s
	if l.Grid.Y != 1 || l.Grid.Z != 1 || l.Block.Y != 1 || l.Block.Z != 1 {
		return contract(s.name, "grid %v, block %v: one-dimensional launches only", l.Grid, l.Block)
	}
	switch {
	case s.k.Coll == kernels.CollBarrier && l.Grid.X != 1:
		return contract(s.name, "grid %d: the barrier kernel runs one block", l.Grid.X)
	case s.k.Coll == kernels.CollBarrier && l.Block.X < k.p.NRanks:
		// nvls.h's start barrier polls one rank's arrival word per thread.
		return contract(s.name, "block %d: the barrier kernel needs a thread per rank (%d)", l.Block.X, k.p.NRanks)
	case s.k.Coll == kernels.CollBarrier:
		return nil
	case l.Grid.X < 1 || l.Grid.X > kabi.MaxBlocks:
		return contract(s.name, "grid %d not in [1, %d]", l.Grid.X, kabi.MaxBlocks)
	case k.llLaunch() && (l.Block.X < 1 || l.Block.X > kabi.BlockThreads):
		return contract(s.name, "block %d: the LL kernels run blocks of 1 to %d threads", l.Block.X, kabi.BlockThreads)
	case !k.llLaunch() && l.Block.X != kabi.BlockThreads:
		return contract(s.name, "block %d: collectives run blocks of %d threads", l.Block.X, kabi.BlockThreads)
	}
	return nil
}

// validateFields checks that each field holds what it means for this
// kernel, and that the fields it does not use are 0.
func (k *kern) validateFields() error {
	s, p := k.s, &k.p
	unused := []struct {
		field string
		v     uint64
		used  bool
	}{
		{"stage", p.Stage, s.k.Coll == kernels.CollAllReduce && s.k.Algo == kernels.OneShot || k.local() || k.pushReduceLaunch()},
		{"ll_area", p.LLArea, k.llLaunch()},
		{"ll_lines", uint64(p.LLLines), k.llLaunch()},
		{"root", uint64(p.Root), s.rooted()},
	}
	for _, u := range unused {
		if !u.used && u.v != 0 {
			return contract(s.name, "%s = %#x: this kernel does not use it (must be 0)", u.field, u.v)
		}
	}
	switch {
	case p.Flags&^s.flagsAllowed() != 0:
		return contract(s.name, "flags %#x: this kernel takes %#x at most", p.Flags, s.flagsAllowed())
	case s.k.Coll == kernels.CollBroadcast && p.Flags&kabi.FlagLL != 0 && p.Flags&(kabi.FlagSliced|kabi.FlagPush|kabi.FlagRootSlice) != 0:
		return contract(s.name, "flags %#x: FlagLL takes no other broadcast flag", p.Flags)
	case s.k.Coll == kernels.CollBroadcast && p.Flags&(kabi.FlagAbsPtrs|kabi.FlagLLTwo) != 0 && p.Flags&kabi.FlagLL == 0:
		return contract(s.name, "flags %#x: FlagAbsPtrs and FlagLLTwo on the broadcast need FlagLL", p.Flags)
	case s.typed() && p.ElemBytes != uint32(k.dt.Size()):
		return contract(s.name, "elem_bytes %d: the %v kernel's elements are %d bytes", p.ElemBytes, k.dt, k.dt.Size())
	case !s.typed() && s.k.Coll != kernels.CollBarrier && p.Count > 0 && p.ElemBytes == 0:
		return contract(s.name, "elem_bytes 0 with count %d", p.Count)
	case s.rooted() && p.Root >= p.NRanks:
		return contract(s.name, "root %d >= nranks %d", p.Root, p.NRanks)
	}
	return nil
}

// operand is send or recv of a launch: a workspace offset (the same on
// every rank) or, flagged, an absolute address of the launching device.
type operand struct {
	what  string
	v     uint64
	abs   bool
	bytes uint64
}

// operands are the launch's send and recv, with their sizes: count
// elements, nranks times that for reduce-scatter's send and all-gather's
// recv.
func (k *kern) operands() (send, recv operand) {
	p := &k.p
	b, n := p.Bytes(), uint64(p.NRanks)
	send = operand{"send", p.Send, p.Flags&(kabi.FlagAbsPtrs|kabi.FlagAbsSend) != 0, b}
	recv = operand{"recv", p.Recv, p.Flags&(kabi.FlagAbsPtrs|kabi.FlagAbsRecv) != 0, b}
	switch k.s.k.Coll.Desc().Sliced {
	case kernels.SendSide:
		send.bytes = n * b
	case kernels.RecvSide:
		recv.bytes = n * b
	}
	return send, recv
}

// at is o's address on the launching device.
func (k *kern) at(o operand) uint64 {
	if o.abs {
		return o.v
	}
	return k.p.UC[k.p.Rank] + o.v
}

// inPlace reports whether send and recv are the collective's in-place
// layout: the same buffer; reduce-scatter: recv is the rank's slice of
// send; all-gather: send is the rank's slot of recv.
func (k *kern) inPlace(send, recv operand) bool {
	return k.s.k.Coll.Desc().InPlace(k.at(send), k.at(recv), int(k.p.Rank), k.p.Bytes())
}

func overlaps(a, an, b, bn uint64) bool { return a < b+bn && b < a+an }

// validateBuffers checks send, recv, the stage and the LL area: aligned,
// past the signal area, and overlapping only where allowed. A reduce's
// absolute recv is read on the root only (the others may pass anything).
func (k *kern) validateBuffers() error {
	s, p := k.s, &k.p
	send, recv := k.operands()
	ignoreRecv := s.k.Coll == kernels.CollReduce && recv.abs && p.Rank != p.Root
	for _, o := range []operand{send, recv, {what: "stage", v: p.Stage}, {what: "ll_area", v: p.LLArea}} {
		switch {
		case o.what == "recv" && ignoreRecv, (o.what == "stage" || o.what == "ll_area") && o.v == 0:
		case o.abs && o.v == 0:
			return contract(s.name, "%s: flagged absolute (flags %#x) but nil", o.what, p.Flags)
		case !o.abs && (o.v%kabi.VecBytes != 0 || o.v < kabi.SignalBytes):
			return contract(s.name, "%s offset %#x: must be 16-byte aligned and past the %d-byte signal area", o.what, o.v, kabi.SignalBytes)
		}
	}
	if err := k.validateLL(send, recv); err != nil {
		return err
	}
	if !ignoreRecv && !k.inPlace(send, recv) && overlaps(k.at(send), send.bytes, k.at(recv), recv.bytes) {
		return contract(s.name, "send [%#x, +%d) and recv [%#x, +%d) overlap and are not the in-place layout", k.at(send), send.bytes, k.at(recv), recv.bytes)
	}
	bytes := p.Bytes()
	if k.local() {
		return k.validateLocal(send, recv)
	}
	if p.Flags&kabi.FlagPieces != 0 && !k.mc {
		return contract(s.name, "flags %#x: FlagPieces needs FlagLocal", p.Flags)
	}
	stage := bytes
	if k.pushReduceLaunch() { // the flags and the FIFOs
		stage = kabi.PushReduceBytes(k.grid, k.bdim)
	}
	if p.Stage != 0 && (overlaps(p.Stage, stage, p.Send, bytes) || overlaps(p.Stage, stage, p.Recv, bytes)) {
		return contract(s.name, "stage [%#x, +%d) overlaps send or recv", p.Stage, stage)
	}
	if s.k.Coll == kernels.CollAllReduce && s.k.Algo == kernels.OneShot && p.Send == p.Recv && p.Stage == 0 && p.Count > 0 {
		return contract(s.name, "one-shot in place (send == recv) needs a stage buffer")
	}
	return nil
}

// validateLocal checks a FlagLocal launch: a stage, the sources (nranks -
// 1 chunks from it, the reduce-scatter's a stride apart with the own
// slot between them unread, the reduce's packed) clear of the own chunk
// at send; the reduce-scatter's stride whole vectors and at least a
// chunk; the reduce launched on the root alone, its recv clear of the
// sources or exactly one of them (each vector is read and then written
// by one thread).
func (k *kern) validateLocal(send, recv operand) error {
	s, p := k.s, &k.p
	bytes := p.Bytes()
	all := uint64(p.NRanks-1) * k.localChunk()
	if s.k.Coll == kernels.CollReduceScatter {
		stride := k.localStride()
		if stride%kabi.VecBytes != 0 || stride < bytes {
			return contract(s.name, "flags %#x (local): sources %d bytes apart: whole %d-byte vectors, at least count (%d bytes) apart", p.Flags, stride, kabi.VecBytes, bytes)
		}
		all = uint64(p.NRanks-1)*stride + bytes
	}
	if p.Stage == 0 || overlaps(p.Stage, all, p.Send, bytes) {
		return contract(s.name, "flags %#x (local): stage [%#x, +%d) must be given and clear of send [%#x, +%d)", p.Flags, p.Stage, all, p.Send, bytes)
	}
	if s.k.Coll != kernels.CollReduce {
		return nil
	}
	if p.Flags&kabi.FlagPieces != 0 && (p.Stage != p.Recv || p.NRanks != 2) {
		return contract(s.name, "flags %#x (local, pieces): a team of 2 (nranks %d) whose peer's data lands in recv: stage %#x must be recv %#x", p.Flags, p.NRanks, p.Stage, p.Recv)
	}
	if p.Rank != p.Root {
		return contract(s.name, "flags %#x (local): launched on rank %d, not the root %d", p.Flags, p.Rank, p.Root)
	}
	at, base := k.at(recv), p.UC[p.Rank]
	for r := uint32(0); r < p.NRanks; r++ {
		if r != p.Rank && at == base+k.localSource(r) {
			return nil
		}
	}
	if overlaps(at, bytes, base+p.Stage, all) {
		return contract(s.name, "flags %#x (local): recv [%#x, +%d) overlaps the sources at stage [%#x, +%d) without being one of them", p.Flags, at, bytes, p.Stage, all)
	}
	return nil
}

// validateLL checks an LL launch's area: there, large enough for the
// payload (count elements per source), and clear of the operands given as
// offsets.
func (k *kern) validateLL(send, recv operand) error {
	s, p := k.s, &k.p
	if !k.llLaunch() || p.Count == 0 {
		return nil
	}
	if p.LLArea == 0 {
		return contract(s.name, "the LL kernels need their LL area (params.ll_area)")
	}
	bytes := p.Bytes()
	lines := (bytes + kabi.LLLinePayload - 1) / kabi.LLLinePayload
	if s.k.Coll == kernels.CollBroadcast && p.Flags&kabi.FlagLLTwo != 0 {
		// Two steps: a slice of ceil(lines / (nranks - 1)) lines after
		// the one line of each slot.
		if l1 := (lines + uint64(max(p.NRanks-1, 1)) - 1) / uint64(max(p.NRanks-1, 1)); uint64(p.LLLines) < l1+1 {
			return contract(s.name, "ll_lines (the LL area's capacity) %d < the 1 + %d lines of a slice of %d bytes in two steps", p.LLLines, l1, bytes)
		}
	} else if l1 := (lines + uint64(p.NRanks) - 1) / uint64(p.NRanks); p.Flags&kabi.FlagLLTwo != 0 {
		if uint64(p.LLLines) < 2*l1 {
			return contract(s.name, "ll_lines (the LL area's capacity) %d < the 2 x %d lines of a slice of %d bytes in two steps", p.LLLines, l1, bytes)
		}
	} else if uint64(p.LLLines) < lines {
		return contract(s.name, "ll_lines (the LL area's capacity) %d < the %d lines of %d bytes", p.LLLines, lines, bytes)
	}
	area := kabi.LLAreaBytes(uint64(p.LLLines)*kabi.LLLinePayload, int(p.NRanks))
	for _, o := range []operand{send, recv} {
		if !o.abs && overlaps(p.LLArea, area, o.v, o.bytes) {
			return contract(s.name, "LL area [%#x, +%d) overlaps %s", p.LLArea, area, o.what)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// The barrier (nvls.h: barrier).

func (k *kern) barrier(phase uint32) (ok bool, err error) {
	if phase == 0 {
		return k.startBarrier()
	}
	slot := (uint64(phase)*kabi.MaxBlocks + k.block) * 4
	if k.mc {
		if err := k.mem.MultimemAddU32(cuda.DevicePtr(k.p.MC+kabi.CounterOffset+slot), 1); err != nil {
			return false, err
		}
	} else {
		for r := uint32(0); r < k.p.NRanks; r++ {
			if _, err := k.mem.AtomicAddU32(cuda.DevicePtr(k.p.UC[r]+kabi.CounterOffset+slot), 1); err != nil {
				return false, err
			}
		}
	}
	var eb [4]byte
	if err := k.mem.Load(cuda.DevicePtr(k.own+kabi.EpochOffset+slot), eb[:]); err != nil {
		return false, err
	}
	target := le.Uint32(eb[:]) + k.p.NRanks
	if failed, err := k.checkFailed(phase); failed || err != nil {
		return false, err
	}
	if ok, err := k.barrierWait(phase, slot, target); !ok || err != nil {
		return false, err
	}
	le.PutUint32(eb[:], target)
	return true, k.mem.Store(cuda.DevicePtr(k.own+kabi.EpochOffset+slot), eb[:])
}

// nextSeq is nvls.h's next_seq: the block's next start-barrier sequence,
// skipping 0 (a zeroed slot's) to 2 (keeping the parity alternating).
func nextSeq(prev uint32) uint32 {
	if s := prev + 1; s != 0 {
		return s
	}
	return 2
}

// arriveSlots is the offset of the arrival words [seq&1][block][*].
func arriveSlots(seq uint32, block uint64) uint64 {
	return kabi.ArriveOffset + (uint64(seq&1)*kabi.MaxBlocks+block)*kabi.MaxRanks*8
}

// callWord is the call's arrival word without its sequence bits.
func (k *kern) callWord() uint64 { return kabi.CallWord(k.p.Check, k.callCount()) }

// callCount is the count the argument check compares.
func (k *kern) callCount() uint64 {
	if k.p.CallCount != 0 {
		return k.p.CallCount
	}
	return k.p.Count
}

// arrive stores word into slot [rank] of slots on every rank: one
// multimem store, or one store per rank (uc: the LL kernels, also in the
// multicast flavor).
func (k *kern) arrive(slots, word uint64, uc bool) error {
	var b [8]byte
	le.PutUint64(b[:], word)
	at := slots + 8*uint64(k.p.Rank)
	if k.mc && !uc {
		return k.mem.MultimemStore(cuda.DevicePtr(k.p.MC+at), b[:])
	}
	for r := uint32(0); r < k.p.NRanks; r++ {
		if err := k.mem.Store(cuda.DevicePtr(k.p.UC[r]+at), b[:]); err != nil {
			return err
		}
	}
	return nil
}

// startBarrier is nvls.h's start_barrier: arrive with {seq, call word},
// wait for every rank's word of this seq, and compare them.
func (k *kern) startBarrier() (bool, error) {
	eslot := cuda.DevicePtr(k.own + kabi.EpochOffset + 4*k.block)
	prev, err := k.mem.LoadU32(eslot)
	if err != nil {
		return false, err
	}
	seq := nextSeq(prev)
	slots := arriveSlots(seq, k.block)
	if err := k.arrive(slots, uint64(seq&0xff)<<56|k.callWord(), false); err != nil {
		return false, err
	}
	team, err := k.teamFailed()
	if err != nil {
		return false, err
	}
	words := make([]uint64, k.p.NRanks)
	for t := range words {
		state := startOK
		if team != 0 {
			if state, err = k.startGiveUp(team); err != nil {
				return false, err
			}
		}
		var b [8]byte
		for spin := 1; state == startOK; spin++ {
			if err := k.mem.Load(cuda.DevicePtr(k.own+slots+8*uint64(t)), b[:]); err != nil {
				return false, err
			}
			if w := le.Uint64(b[:]); uint32(w>>56) == seq&0xff {
				words[t] = w
				break
			}
			if k.mem.GlobalTimer() > k.deadline {
				state = startTimeout
				break
			}
			if spin%failedCheckEvery == 0 {
				f, err := k.teamFailed()
				if err != nil {
					return false, err
				}
				if f != 0 {
					if state, err = k.startGiveUp(f); err != nil {
						return false, err
					}
					team = f
				}
			}
			backoff(spin)
		}
		switch state {
		case startTimeout:
			return false, k.recordTimeout(0)
		case startAbort:
			return false, k.recordAbort(0, team)
		case startQuiet:
			return false, nil
		}
	}
	for _, w := range words {
		if w<<8 != k.callWord()<<8 {
			return false, k.recordMismatch(words)
		}
	}
	var eb [4]byte
	le.PutUint32(eb[:], seq)
	return true, k.mem.Store(eslot, eb[:])
}

// Outcomes of a start-barrier poll (nvls.h: START_*).
const (
	startOK = iota
	startTimeout
	startAbort
	startQuiet
)

// startGiveUp is nvls.h's start_giveup: what a start-barrier poll does on
// a failed team (word f): block 0 keeps waiting on a mismatch its rank has
// yet to record, other blocks give up quietly on a mismatch, and every
// other failure aborts.
func (k *kern) startGiveUp(f uint64) (int, error) {
	if f&0xff != kabi.StatusMismatch {
		return startAbort, nil
	}
	if k.block != 0 {
		return startQuiet, nil
	}
	var b [8]byte
	if err := k.mem.Load(cuda.DevicePtr(k.own+kabi.StatusOffset), b[:]); err != nil {
		return 0, err
	}
	if le.Uint64(b[:]) == 0 {
		return startOK, nil
	}
	return startAbort, nil
}

// barrierWait polls the own counter of slot until target (nvls.h:
// barrier_wait); false (recorded) on the deadline or a failed team.
func (k *kern) barrierWait(phase uint32, slot uint64, target uint32) (bool, error) {
	return k.waitWord(phase, k.own+kabi.CounterOffset+slot, target, false)
}

// waitWord is nvls.h's barrier_wait on the own word at a: until it is at
// or past target (wrap-safe), or equal to it (exact).
func (k *kern) waitWord(phase uint32, a uint64, target uint32, exact bool) (bool, error) {
	for spin := 1; ; spin++ {
		got, err := k.mem.LoadU32(cuda.DevicePtr(a))
		if err != nil {
			return false, err
		}
		if exact && got == target || !exact && int32(got-target) >= 0 {
			return true, nil
		}
		if k.mem.GlobalTimer() > k.deadline {
			return false, k.recordTimeout(phase)
		}
		if spin%failedCheckEvery == 0 {
			if failed, err := k.checkFailed(phase); failed || err != nil {
				return false, err
			}
		}
		backoff(spin)
	}
}

// backoff lets the other ranks' goroutines run while a barrier spins:
// yields first, then short sleeps.
func backoff(spin int) {
	if spin < 200 {
		runtime.Gosched()
		return
	}
	time.Sleep(20 * time.Microsecond)
}

// ---------------------------------------------------------------------------
// Leaves (nvls.h: load_reduce, store_all, uc_load_reduce1).

// chunks calls fn for every block iteration of the grid-stride loop over
// vectors [lo, hi) in block k.block: vectors [v, v+n).
func (k *kern) chunks(lo, hi uint64, fn func(v, n uint64) error) error {
	for v := lo + k.block*k.bdim; v < hi; v += k.grid * k.bdim {
		if err := fn(v, min(k.bdim, hi-v)); err != nil {
			return err
		}
	}
	return nil
}

func (k *kern) buffers(nb uint64) ([][]byte, []byte) {
	if k.bufs == nil {
		k.bufs = make([][]byte, k.p.NRanks)
		for r := range k.bufs {
			k.bufs[r] = make([]byte, k.bdim*kabi.VecBytes)
		}
		k.out = make([]byte, k.bdim*kabi.VecBytes)
	}
	srcs := make([][]byte, k.p.NRanks)
	for r := range srcs {
		srcs[r] = k.bufs[r][:nb]
	}
	return srcs, k.out[:nb]
}

// loadReduce returns the nb bytes (whole vectors) at offset off reduced
// over every rank.
func (k *kern) loadReduce(off, nb uint64) ([]byte, error) {
	srcs, out := k.buffers(nb)
	if !k.mc {
		for r := range srcs {
			if err := k.mem.Load(cuda.DevicePtr(k.p.UC[r]+off), srcs[r]); err != nil {
				return nil, err
			}
		}
		k.sc.reduce(k.dt, k.op, out, srcs)
		return out, nil
	}
	// multimem.ld_reduce: .v4 for floats; 4 x 32-bit or 2 x 64-bit
	// scalar accesses for integers (no vector integer forms). A span
	// access is the loop of those accesses over the chunk.
	w := kabi.VecBytes
	switch k.dt {
	case kernels.S32, kernels.U32:
		w = 4
	case kernels.U64:
		w = 8
	}
	vals, err := sim.MultimemLoadSpan(k.mem, cuda.DevicePtr(k.p.MC+off), int(nb), w)
	if err != nil {
		return nil, err
	}
	if len(vals) != int(k.p.NRanks) {
		return nil, contract(k.s.name, "multicast object has %d bound devices, nranks is %d", len(vals), k.p.NRanks)
	}
	k.sc.reduce(k.dt, k.op, out, vals)
	return out, nil
}

// storeAll stores data (whole vectors) at offset off of every rank.
func (k *kern) storeAll(off uint64, data []byte) error {
	if !k.mc {
		for r := uint32(0); r < k.p.NRanks; r++ {
			if err := k.mem.Store(cuda.DevicePtr(k.p.UC[r]+off), data); err != nil {
				return err
			}
		}
		return nil
	}
	// multimem.st.v4: 16-byte accesses over the chunk.
	return sim.MultimemStoreSpan(k.mem, cuda.DevicePtr(k.p.MC+off), data, kabi.VecBytes)
}

// loadReduce1 is the scalar tail's leaf: one element at offset off of
// every rank, plain loads, reduced in rank order (both flavors).
func (k *kern) loadReduce1(off uint64) ([]byte, error) {
	e := uint64(k.dt.Size())
	srcs := make([][]byte, k.p.NRanks)
	for r := range srcs {
		srcs[r] = make([]byte, e)
		if err := k.mem.Load(cuda.DevicePtr(k.p.UC[r]+off), srcs[r]); err != nil {
			return nil, err
		}
	}
	out := make([]byte, e)
	reduce(k.dt, k.op, out, srcs)
	return out, nil
}

func (k *kern) copyOwn(dst, src, n uint64) error {
	b := make([]byte, n)
	if err := k.mem.Load(cuda.DevicePtr(k.own+src), b); err != nil {
		return err
	}
	return k.mem.Store(cuda.DevicePtr(k.own+dst), b)
}

// ---------------------------------------------------------------------------
// The kernels (allreduce.cu, broadcast.cu, barrier.cu), one block.

func (k *kern) split() (nvec, tail, e uint64) {
	e = uint64(k.dt.Size())
	per := kabi.VecBytes / e
	nvec = k.p.Count / per
	return nvec, k.p.Count - nvec*per, e
}

func (k *kern) oneshot() error {
	p := &k.p
	nvec, tail, e := k.split()
	dst := p.Recv
	if p.Stage != 0 {
		dst = p.Stage
	}
	if ok, err := k.barrier(0); !ok || err != nil {
		return err
	}
	err := k.chunks(0, nvec, func(v, n uint64) error {
		off := v * kabi.VecBytes
		data, err := k.loadReduce(p.Send+off, n*kabi.VecBytes)
		if err != nil {
			return err
		}
		return k.mem.Store(cuda.DevicePtr(k.own+dst+off), data)
	})
	if err != nil {
		return err
	}
	if k.block == 0 {
		for t := uint64(0); t < tail; t++ {
			off := nvec*kabi.VecBytes + t*e
			x, err := k.loadReduce1(p.Send + off)
			if err != nil {
				return err
			}
			if err := k.mem.Store(cuda.DevicePtr(k.own+dst+off), x); err != nil {
				return err
			}
		}
	}
	if ok, err := k.barrier(1); !ok || err != nil {
		return err
	}
	if p.Stage == 0 {
		return nil
	}
	err = k.chunks(0, nvec, func(v, n uint64) error {
		off := v * kabi.VecBytes
		return k.copyOwn(p.Recv+off, p.Stage+off, n*kabi.VecBytes)
	})
	if err != nil {
		return err
	}
	if k.block == 0 && tail > 0 {
		off := nvec * kabi.VecBytes
		return k.copyOwn(p.Recv+off, p.Stage+off, tail*e)
	}
	return nil
}

func (k *kern) twoshot() error {
	p := &k.p
	nvec, tail, e := k.split()
	slice := nvec / uint64(p.NRanks)
	last := p.Rank == p.NRanks-1
	lo := uint64(p.Rank) * slice
	hi := lo + slice
	if last {
		hi = nvec
	}
	if ok, err := k.barrier(0); !ok || err != nil {
		return err
	}
	err := k.chunks(lo, hi, func(v, n uint64) error {
		off := v * kabi.VecBytes
		data, err := k.loadReduce(p.Send+off, n*kabi.VecBytes)
		if err != nil {
			return err
		}
		return k.storeAll(p.Recv+off, data)
	})
	if err != nil {
		return err
	}
	if last && k.block == 0 {
		for t := uint64(0); t < tail; t++ {
			off := nvec*kabi.VecBytes + t*e
			x, err := k.loadReduce1(p.Send + off)
			if err != nil {
				return err
			}
			for r := uint32(0); r < p.NRanks; r++ {
				if err := k.mem.Store(cuda.DevicePtr(p.UC[r]+p.Recv+off), x); err != nil {
					return err
				}
			}
		}
	}
	_, err = k.barrier(1)
	return err
}

// pushReduceLaunch reports whether the launch is a push reduce (FlagPush
// on the two-shot reduce, unicast, 2 ranks or more), which uses Stage.
func (k *kern) pushReduceLaunch() bool {
	return k.s.k.Coll == kernels.CollReduce && k.s.k.Algo == kernels.TwoShot && !k.mc && k.p.Flags&kabi.FlagPush != 0 && k.p.NRanks > 1 && k.dt.Size() >= 4
}
