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
// (kernels.Kernels of the unicast flavor, a superset of the multicast
// one) with sim.RegisterKernel. It may be called any number of times.
func Register() {
	for _, k := range kernels.Kernels(kernels.Unicast) {
		if blockFuncs[k.Coll] == nil {
			panic("simkern: no reference kernel for " + k.Name())
		}
		s := &spec{name: k.Name(), k: k}
		sim.RegisterKernel(s.name, s.run)
	}
}

// blockFuncs are the reference kernels, one per family; each runs one
// block (kern.block) of a launch on one rank.
var blockFuncs = map[kernels.Coll]func(*kern) error{
	kernels.CollAllReduce: (*kern).allReduce,
	kernels.CollBroadcast: (*kern).broadcast,
	kernels.CollBarrier: func(k *kern) error {
		_, err := k.barrier(0)
		return err
	},
}

// ErrContract is matched (errors.Is) by the error of a launch whose params
// or shape break the kernels' contract (kernels.Params): on a GPU such a
// launch reads or writes the wrong memory or hangs; here it is a kernel
// fault that says what was wrong.
var ErrContract = errors.New("simkern: launch breaks the kernel contract")

func contract(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrContract, name, fmt.Sprintf(format, args...))
}

// spec is one entry point.
type spec struct {
	name string
	k    kernels.Kernel
}

func (s *spec) isLL() bool { return s.k.Coll == kernels.CollAllReduce && s.k.Algo == kernels.LL }

// kern is one launch on one rank; block is the block being simulated.
type kern struct {
	s        *spec
	mem      sim.Memory
	p        kernels.Params
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
	p, err := kernels.UnmarshalParams(l.Params)
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

// validate checks the launch against the contract of kernels.Params.
func (k *kern) validate(l *sim.Launch) error {
	s, p := k.s, &k.p
	if !s.k.In(p.Flavor()) {
		return contract(s.name, "launched with params.MC != 0, but this entry exists in the unicast flavor only (%v)", kernels.CheckSupported(p.Flavor(), s.k.DType, s.k.Op))
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
	case s.k.Coll == kernels.CollBarrier:
		return nil
	case l.Grid.X < 1 || l.Grid.X > kernels.MaxBlocks:
		return contract(s.name, "grid %d not in [1, %d]", l.Grid.X, kernels.MaxBlocks)
	case s.isLL() && (l.Block.X < 1 || l.Block.X > kernels.BlockThreads):
		return contract(s.name, "block %d: the LL all-reduce runs blocks of 1 to %d threads", l.Block.X, kernels.BlockThreads)
	case !s.isLL() && l.Block.X != kernels.BlockThreads:
		return contract(s.name, "block %d: collectives run blocks of %d threads", l.Block.X, kernels.BlockThreads)
	}
	return nil
}

// validateFields checks that each field holds what it means for this
// kernel, and that the fields it does not use are 0.
func (k *kern) validateFields() error {
	s, p := k.s, &k.p
	ar := s.k.Coll == kernels.CollAllReduce
	unused := []struct {
		field string
		v     uint64
		used  bool
	}{
		{"stage", p.Stage, ar && s.k.Algo == kernels.OneShot},
		{"ll_area", p.LLArea, s.isLL()},
		{"ll_lines", uint64(p.LLLines), s.isLL()},
		{"root", uint64(p.Root), s.k.Coll == kernels.CollBroadcast},
	}
	for _, u := range unused {
		if !u.used && u.v != 0 {
			return contract(s.name, "%s = %#x: this kernel does not use it (must be 0)", u.field, u.v)
		}
	}
	switch {
	case s.isLL() && p.Flags&^kernels.FlagAbsPtrs != 0:
		return contract(s.name, "flags %#x: only FlagAbsPtrs (%#x) is defined", p.Flags, kernels.FlagAbsPtrs)
	case !s.isLL() && p.Flags != 0:
		return contract(s.name, "flags %#x: must be 0 (FlagAbsPtrs is for the LL all-reduce only)", p.Flags)
	case ar && p.ElemBytes != uint32(k.dt.Size()):
		return contract(s.name, "elem_bytes %d: the %v kernel's elements are %d bytes", p.ElemBytes, k.dt, k.dt.Size())
	case s.k.Coll == kernels.CollBroadcast && p.Count > 0 && p.ElemBytes == 0:
		return contract(s.name, "elem_bytes 0 with count %d", p.Count)
	case s.k.Coll == kernels.CollBroadcast && p.Root >= p.NRanks:
		return contract(s.name, "root %d >= nranks %d", p.Root, p.NRanks)
	}
	return nil
}

// validateBuffers checks send, recv, the stage and the LL area: aligned,
// past the signal area, and overlapping only where allowed.
func (k *kern) validateBuffers() error {
	s, p := k.s, &k.p
	bytes := p.Bytes()
	abs := p.Flags&kernels.FlagAbsPtrs != 0
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
	for _, b := range append(bufs, buf{"stage", p.Stage}, buf{"ll_area", p.LLArea}) {
		if (b.what == "stage" || b.what == "ll_area") && b.off == 0 {
			continue
		}
		if b.off%kernels.VecBytes != 0 || b.off < kernels.SignalBytes {
			return contract(s.name, "%s offset %#x: must be 16-byte aligned and past the %d-byte signal area", b.what, b.off, kernels.SignalBytes)
		}
	}
	ov := func(a, an, b, bn uint64) bool { return a < b+bn && b < a+an }
	if s.isLL() && p.Count > 0 {
		if p.LLArea == 0 {
			return contract(s.name, "the LL all-reduce needs its LL area (params.ll_area)")
		}
		if lines := (bytes + kernels.LLLinePayload - 1) / kernels.LLLinePayload; uint64(p.LLLines) < lines {
			return contract(s.name, "ll_lines (the LL area's capacity) %d < the %d lines of %d bytes", p.LLLines, lines, bytes)
		}
		area := kernels.LLAreaBytes(uint64(p.LLLines)*kernels.LLLinePayload, int(p.NRanks))
		if !abs && (ov(p.LLArea, area, p.Send, bytes) || ov(p.LLArea, area, p.Recv, bytes)) {
			return contract(s.name, "LL area [%#x, +%d) overlaps send or recv", p.LLArea, area)
		}
	}
	if !abs && p.Send != p.Recv && ov(p.Send, bytes, p.Recv, bytes) {
		return contract(s.name, "send [%#x, +%d) and recv [%#x, +%d) overlap without being the same buffer", p.Send, bytes, p.Recv, bytes)
	}
	if p.Stage != 0 && (ov(p.Stage, bytes, p.Send, bytes) || ov(p.Stage, bytes, p.Recv, bytes)) {
		return contract(s.name, "stage [%#x, +%d) overlaps send or recv", p.Stage, bytes)
	}
	if s.k.Coll == kernels.CollAllReduce && s.k.Algo == kernels.OneShot && p.Send == p.Recv && p.Stage == 0 && p.Count > 0 {
		return contract(s.name, "one-shot in place (send == recv) needs a stage buffer")
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
		k.sc.reduce(k.dt, k.op, out, srcs)
		return out, nil
	}
	// multimem.ld_reduce: .v4 for floats; 4 x 32-bit or 2 x 64-bit
	// scalar accesses for integers (no vector integer forms). A span
	// access is the loop of those accesses over the chunk.
	w := kernels.VecBytes
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
	return sim.MultimemStoreSpan(k.mem, cuda.DevicePtr(k.p.MC+off), data, kernels.VecBytes)
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
		nvec := p.Bytes() / kernels.VecBytes
		tail := p.Bytes() - nvec*kernels.VecBytes
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
