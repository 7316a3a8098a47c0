package simkern

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
)

func init() { Register() }

// Register registers the Go implementation of every kernel entry point
// (kernels.AllEntries of the unicast flavor, a superset of the multicast
// one) with sim.RegisterKernel. It may be called any number of times.
func Register() {
	for _, a := range kernels.Algos {
		for _, t := range kernels.DTypes {
			for _, o := range kernels.RedOps {
				s := spec{name: kernels.AllReduceName(t, o, a), kind: kindAllReduce, algo: a, dt: t, op: o}
				sim.RegisterKernel(s.name, s.run)
			}
		}
	}
	for _, s := range []spec{{name: kernels.BroadcastName, kind: kindBroadcast}, {name: kernels.BarrierName, kind: kindBarrier}} {
		sim.RegisterKernel(s.name, s.run)
	}
}

// ErrContract is matched (errors.Is) by the error of a launch whose params
// or shape break the kernels' contract (kernels.Params): on a GPU such a
// launch reads or writes the wrong memory or hangs; here it is a kernel
// fault that says what was wrong.
var ErrContract = errors.New("simkern: launch breaks the kernel contract")

func contract(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrContract, name, fmt.Sprintf(format, args...))
}

type kind uint8

const (
	kindAllReduce kind = iota
	kindBroadcast
	kindBarrier
)

// spec is one entry point.
type spec struct {
	name string
	kind kind
	algo kernels.Algo
	dt   kernels.DType
	op   kernels.RedOp
}

// kern is one launch on one rank; block is the block being simulated.
type kern struct {
	s        *spec
	mem      sim.Memory
	p        kernels.Params
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
	p, err := kernels.UnmarshalParams(l.Params)
	if err != nil {
		return contract(s.name, "%v", err)
	}
	k := &kern{s: s, mem: l.Mem, p: p, mc: p.MC != 0, grid: uint64(l.Grid.X), bdim: uint64(l.Block.X)}
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
		var err error
		switch s.kind {
		case kindAllReduce:
			switch s.algo {
			case kernels.OneShot:
				err = k.oneshot()
			case kernels.TwoShot:
				err = k.twoshot()
			default:
				err = k.ll()
			}
		case kindBroadcast:
			err = k.broadcast()
		case kindBarrier:
			_, err = k.barrier(0)
		}
		if err != nil {
			return fmt.Errorf("%s block %d: %w", s.name, b, err)
		}
	}
	return nil
}

func (k *kern) validate(l *sim.Launch) error {
	s, p := k.s, k.p
	flavor := kernels.Unicast
	if k.mc {
		flavor = kernels.Multicast
	}
	if s.kind == kindAllReduce && !kernels.Supported(flavor, s.dt, s.op) {
		return contract(s.name, "launched with params.MC != 0, but this entry exists in the unicast flavor only (%v)", kernels.CheckSupported(flavor, s.dt, s.op))
	}
	if p.NRanks < 1 || p.NRanks > kernels.MaxRanks {
		return contract(s.name, "nranks %d not in [1, %d]", p.NRanks, kernels.MaxRanks)
	}
	if p.Rank >= p.NRanks {
		return contract(s.name, "rank %d >= nranks %d", p.Rank, p.NRanks)
	}
	for r := uint32(0); r < p.NRanks; r++ {
		if p.UC[r] == 0 || p.UC[r]%kernels.VecBytes != 0 {
			return contract(s.name, "uc[%d] = %#x: not a 16-byte aligned workspace base", r, p.UC[r])
		}
	}
	if k.mc && p.MC%kernels.VecBytes != 0 {
		return contract(s.name, "mc = %#x is not 16-byte aligned", p.MC)
	}
	isLL := s.kind == kindAllReduce && s.algo == kernels.LL
	abs := p.Flags&kernels.FlagAbsPtrs != 0
	switch {
	case isLL && p.Flags&^kernels.FlagAbsPtrs != 0:
		return contract(s.name, "flags %#x: only FlagAbsPtrs (%#x) is defined", p.Flags, kernels.FlagAbsPtrs)
	case !isLL && p.Flags != 0:
		return contract(s.name, "flags %#x: must be 0 (FlagAbsPtrs is for the LL all-reduce only)", p.Flags)
	}
	if l.Grid.Y != 1 || l.Grid.Z != 1 || l.Block.Y != 1 || l.Block.Z != 1 {
		return contract(s.name, "grid %v, block %v: one-dimensional launches only", l.Grid, l.Block)
	}
	if s.kind == kindBarrier {
		if l.Grid.X != 1 {
			return contract(s.name, "grid %d: the barrier kernel runs one block", l.Grid.X)
		}
		return nil
	}
	if l.Grid.X < 1 || l.Grid.X > kernels.MaxBlocks {
		return contract(s.name, "grid %d not in [1, %d]", l.Grid.X, kernels.MaxBlocks)
	}
	switch {
	case isLL && (l.Block.X < 1 || l.Block.X > kernels.BlockThreads):
		return contract(s.name, "block %d: the LL all-reduce runs blocks of 1 to %d threads", l.Block.X, kernels.BlockThreads)
	case !isLL && l.Block.X != kernels.BlockThreads:
		return contract(s.name, "block %d: collectives run blocks of %d threads", l.Block.X, kernels.BlockThreads)
	}
	bytes := p.Count
	if s.kind == kindAllReduce {
		bytes = p.Count * uint64(s.dt.Size())
	}
	type buf struct {
		what string
		off  uint64
	}
	var bufs []buf
	if !abs {
		bufs = append(bufs, buf{"send", p.Send}, buf{"recv", p.Recv})
	} else if p.Send == 0 || p.Recv == 0 {
		return contract(s.name, "FlagAbsPtrs with a nil send (%#x) or recv (%#x)", p.Send, p.Recv)
	}
	if p.Stage != 0 {
		bufs = append(bufs, buf{"stage", p.Stage})
	}
	if isLL {
		if p.Stage == 0 && p.Count > 0 {
			return contract(s.name, "the LL all-reduce needs its LL area (params.stage)")
		}
		if lines := (bytes + kernels.LLLinePayload - 1) / kernels.LLLinePayload; uint64(p.Root) < lines {
			return contract(s.name, "root (the LL area's capacity) %d lines < the %d lines of %d bytes", p.Root, lines, bytes)
		}
		area := kernels.LLAreaBytes(uint64(p.Root)*kernels.LLLinePayload, int(p.NRanks))
		ov := func(a, an, b, bn uint64) bool { return a < b+bn && b < a+an }
		if !abs && (ov(p.Stage, area, p.Send, bytes) || ov(p.Stage, area, p.Recv, bytes)) {
			return contract(s.name, "LL area [%#x, +%d) overlaps send or recv", p.Stage, area)
		}
	}
	for _, b := range bufs {
		if b.off%kernels.VecBytes != 0 || b.off < kernels.SignalBytes {
			return contract(s.name, "%s offset %#x: must be 16-byte aligned and past the %d-byte signal area", b.what, b.off, kernels.SignalBytes)
		}
	}
	overlap := func(a, b uint64) bool { return a < b+bytes && b < a+bytes }
	if p.Send != p.Recv && overlap(p.Send, p.Recv) {
		return contract(s.name, "send [%#x, +%d) and recv [%#x, +%d) overlap without being the same buffer", p.Send, bytes, p.Recv, bytes)
	}
	if !isLL && p.Stage != 0 && (overlap(p.Stage, p.Send) || overlap(p.Stage, p.Recv)) {
		return contract(s.name, "stage [%#x, +%d) overlaps send or recv", p.Stage, bytes)
	}
	if s.kind == kindAllReduce && s.algo == kernels.OneShot && p.Send == p.Recv && p.Stage == 0 && p.Count > 0 {
		return contract(s.name, "one-shot in place (send == recv) needs a stage buffer")
	}
	if s.kind == kindBroadcast && p.Root >= p.NRanks {
		return contract(s.name, "root %d >= nranks %d", p.Root, p.NRanks)
	}
	return nil
}

// ---------------------------------------------------------------------------
// The barrier (nvls.h: barrier).

func (k *kern) barrier(phase uint32) (ok bool, err error) {
	slot := (uint64(phase)*kernels.MaxBlocks + k.block) * 4
	if k.mc {
		if err := k.mem.MultimemAddU32(cuda.DevicePtr(k.p.MC+kernels.CounterOffset+slot), 1); err != nil {
			return false, err
		}
	} else {
		for r := uint32(0); r < k.p.NRanks; r++ {
			if _, err := k.mem.AtomicAddU32(cuda.DevicePtr(k.p.UC[r]+kernels.CounterOffset+slot), 1); err != nil {
				return false, err
			}
		}
	}
	var eb [4]byte
	if err := k.mem.Load(cuda.DevicePtr(k.own+kernels.EpochOffset+slot), eb[:]); err != nil {
		return false, err
	}
	target := le.Uint32(eb[:]) + k.p.NRanks
	for spin := 0; ; spin++ {
		got, err := k.mem.LoadU32(cuda.DevicePtr(k.own + kernels.CounterOffset + slot))
		if err != nil {
			return false, err
		}
		if int32(got-target) >= 0 {
			break
		}
		if k.mem.GlobalTimer() > k.deadline {
			code := kernels.TimeoutStatus(k.p.Opcode, phase, uint32(k.block))
			if _, err := k.mem.AtomicCASU64(cuda.DevicePtr(k.own+kernels.StatusOffset), 0, code); err != nil {
				return false, err
			}
			return false, nil
		}
		backoff(spin)
	}
	le.PutUint32(eb[:], target)
	return true, k.mem.Store(cuda.DevicePtr(k.own+kernels.EpochOffset+slot), eb[:])
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
			k.bufs[r] = make([]byte, k.bdim*kernels.VecBytes)
		}
		k.out = make([]byte, k.bdim*kernels.VecBytes)
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
		k.sc.reduce(k.s.dt, k.s.op, out, srcs)
		return out, nil
	}
	// multimem.ld_reduce: .v4 for floats; 4 x 32-bit or 2 x 64-bit
	// scalar accesses for integers (no vector integer forms). A span
	// access is the loop of those accesses over the chunk.
	w := kernels.VecBytes
	switch k.s.dt {
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
	k.sc.reduce(k.s.dt, k.s.op, out, vals)
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
	return sim.MultimemStoreSpan(k.mem, cuda.DevicePtr(k.p.MC+off), data, kernels.VecBytes)
}

// loadReduce1 is the scalar tail's leaf: one element at offset off of
// every rank, plain loads, reduced in rank order (both flavors).
func (k *kern) loadReduce1(off uint64) ([]byte, error) {
	e := uint64(k.s.dt.Size())
	srcs := make([][]byte, k.p.NRanks)
	for r := range srcs {
		srcs[r] = make([]byte, e)
		if err := k.mem.Load(cuda.DevicePtr(k.p.UC[r]+off), srcs[r]); err != nil {
			return nil, err
		}
	}
	out := make([]byte, e)
	reduce(k.s.dt, k.s.op, out, srcs)
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
	e = uint64(k.s.dt.Size())
	per := kernels.VecBytes / e
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
		off := v * kernels.VecBytes
		data, err := k.loadReduce(p.Send+off, n*kernels.VecBytes)
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
			off := nvec*kernels.VecBytes + t*e
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
		off := v * kernels.VecBytes
		return k.copyOwn(p.Recv+off, p.Stage+off, n*kernels.VecBytes)
	})
	if err != nil {
		return err
	}
	if k.block == 0 && tail > 0 {
		off := nvec * kernels.VecBytes
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
		off := v * kernels.VecBytes
		data, err := k.loadReduce(p.Send+off, n*kernels.VecBytes)
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
			off := nvec*kernels.VecBytes + t*e
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

func (k *kern) broadcast() error {
	p := &k.p
	if ok, err := k.barrier(0); !ok || err != nil {
		return err
	}
	if p.Rank == p.Root {
		nvec := p.Count / kernels.VecBytes
		tail := p.Count - nvec*kernels.VecBytes
		buf := make([]byte, k.bdim*kernels.VecBytes)
		err := k.chunks(0, nvec, func(v, n uint64) error {
			off := v * kernels.VecBytes
			b := buf[:n*kernels.VecBytes]
			if err := k.mem.Load(cuda.DevicePtr(k.own+p.Send+off), b); err != nil {
				return err
			}
			return k.storeAll(p.Recv+off, b)
		})
		if err != nil {
			return err
		}
		if k.block == 0 && tail > 0 {
			off := nvec * kernels.VecBytes
			b := make([]byte, tail)
			if err := k.mem.Load(cuda.DevicePtr(k.own+p.Send+off), b); err != nil {
				return err
			}
			for r := uint32(0); r < p.NRanks; r++ {
				if err := k.mem.Store(cuda.DevicePtr(p.UC[r]+p.Recv+off), b); err != nil {
					return err
				}
			}
		}
	}
	_, err := k.barrier(1)
	return err
}
