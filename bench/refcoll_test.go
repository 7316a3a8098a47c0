package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// refColl is a test double of the collectives for the harness's own tests:
// a simulated kernel that all-reduces or broadcasts by plain loads from
// every rank's memory through the team's peer mappings, in place or not,
// with a device-side barrier (counters that only grow, an epoch in device
// memory: safe under graph replay). It lets the sweep, the timing, the
// graph path and the check run end to end on the simulated node
// independently of package collectives. bug != 0 makes it wrong on
// purpose (see refBug*).
type refColl struct {
	n      *node
	tm     *team.Team
	stage  team.Buffer
	signal team.Buffer // per rank: [0] barrier counter (u32), [8] epoch (u32)
	fns    []cuda.Function
	mods   []cuda.Module
	bug    uint32
}

const (
	refKernel = "benchtest_refcoll"
	refPTX    = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry benchtest_refcoll(.param .align 8 .b8 p[184])\n{\n\tret;\n}\n"
	// refBugSkipFirst: rank 1 leaves element 0 of its output unwritten.
	refBugSkipFirst = 1
	// refBugRank0Absent: rank 0 never arrives: the others wait in the
	// barrier until its 3 s deadline.
	refBugRank0Absent = 2
)

// refParams is the kernel's parameter block (184 bytes).
type refParams struct {
	NRanks, Rank, DType, Op, Coll, Root, Bug, _ uint32
	Count                                       uint64
	Send, Recv                                  uint64 // own addresses
	StagePeer                                   [8]uint64
	SignalPeer                                  [8]uint64
}

func init() { simKernels = map[string]sim.KernelFunc{refKernel: runRefColl} }

func newRefColl(tm *team.Team, n *node, maxBytes uint64, bug uint32) (*refColl, error) {
	rc := &refColl{n: n, tm: tm, bug: bug}
	var err error
	if rc.stage, err = tm.Alloc(maxBytes); err != nil {
		return nil, err
	}
	if rc.signal, err = tm.Alloc(256); err != nil {
		return nil, err
	}
	err = n.each(func(r int) error {
		if err := n.drv.MemsetD8(rc.signal.Ptr(r), 0, 256); err != nil {
			return err
		}
		m, err := n.drv.ModuleLoadData([]byte(refPTX))
		if err != nil {
			return err
		}
		rc.mods = append(rc.mods, m)
		f, err := n.drv.ModuleGetFunction(m, refKernel)
		if err != nil {
			return err
		}
		rc.fns = append(rc.fns, f)
		return nil
	})
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	return rc, nil
}

func (rc *refColl) launch(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr) error {
	if op.coll == collBarrier {
		op.count = 0
	}
	nr := rc.n.ranks()
	return rc.n.each(func(r int) error {
		p := refParams{NRanks: uint32(nr), Rank: uint32(rc.n.rank(r)), DType: uint32(op.dtype), Op: uint32(op.op),
			Root: uint32(op.root), Bug: rc.bug, Count: op.count, Send: uint64(send[r]), Recv: uint64(recv[r])}
		switch op.coll {
		case collAllReduce:
			p.Coll = 0
		case collBroadcast:
			p.Coll = 1
		default:
			p.Coll = 2
		}
		for q := range nr {
			p.StagePeer[q] = uint64(rc.stage.PeerPtr(r, q))
			p.SignalPeer[q] = uint64(rc.signal.PeerPtr(r, q))
		}
		return rc.n.drv.LaunchKernel(rc.fns[r], cuda.D1(1), cuda.D1(1), 0, rc.n.streams[r], unsafe.Pointer(&p), unsafe.Sizeof(p))
	})
}

func (rc *refColl) wait(ctx context.Context) error { return rc.n.spin(ctx, "blocking collective") }

func (rc *refColl) Close() error {
	var errs []error
	_ = rc.n.each(func(r int) error {
		if r < len(rc.mods) {
			errs = append(errs, rc.n.drv.ModuleUnload(rc.mods[r]))
		}
		return nil
	})
	errs = append(errs, rc.tm.Free(rc.stage), rc.tm.Free(rc.signal))
	return errors.Join(errs...)
}

func runRefColl(l *sim.Launch) error {
	var p refParams
	if len(l.Params) != int(unsafe.Sizeof(p)) {
		return fmt.Errorf("refcoll: %d parameter bytes", len(l.Params))
	}
	p = *(*refParams)(unsafe.Pointer(&l.Params[0]))
	m := l.Mem
	if p.Bug == refBugRank0Absent && p.Rank == 0 {
		return nil
	}
	t := kernels.DType(p.DType)
	es := uint64(t.Size())
	nb := p.Count * es
	own := cuda.DevicePtr(p.StagePeer[p.Rank])
	// 1. Own input into own stage.
	if nb > 0 {
		buf := make([]byte, nb)
		if err := m.Load(cuda.DevicePtr(p.Send), buf); err != nil {
			return err
		}
		if err := m.Store(own, buf); err != nil {
			return err
		}
	}
	if err := refBarrier(m, &p); err != nil {
		return err
	}
	// 2. Reduce (or copy the root's) from the stages into recv.
	if nb > 0 {
		out := make([]byte, nb)
		ins := make([][]byte, p.NRanks)
		for q := range p.NRanks {
			if p.Coll == 1 && q != p.Root {
				continue
			}
			ins[q] = make([]byte, nb)
			if err := m.Load(cuda.DevicePtr(p.StagePeer[q]), ins[q]); err != nil {
				return err
			}
		}
		if p.Coll == 1 {
			copy(out, ins[p.Root])
		} else {
			for i := range int(p.Count) {
				var acc float64
				var accBits uint64
				for q := range int(p.NRanks) {
					bits, v := get(t, ins[q], i)
					switch {
					case q == 0:
						acc, accBits = v, bits
					case kernels.RedOp(p.Op) == kernels.Sum:
						acc += v
						accBits += bits
					case kernels.RedOp(p.Op) == kernels.Min && v < acc, kernels.RedOp(p.Op) == kernels.Max && v > acc:
						acc, accBits = v, bits
					}
				}
				t.PutBits(out, i, encodeRef(t, kernels.RedOp(p.Op), acc, accBits))
			}
		}
		if p.Bug == refBugSkipFirst && p.Rank == 1 {
			if err := m.Store(cuda.DevicePtr(p.Recv)+cuda.DevicePtr(es), out[es:]); err != nil {
				return err
			}
		} else if err := m.Store(cuda.DevicePtr(p.Recv), out); err != nil {
			return err
		}
	}
	// 3. Nobody overwrites its stage before everyone has read it.
	return refBarrier(m, &p)
}

func encodeRef(t kernels.DType, op kernels.RedOp, v float64, bits uint64) uint64 {
	if t.Kind() != kernels.Float || op != kernels.Sum {
		return bits
	}
	return t.FromFloat32(float32(v))
}

// refBarrier: add 1 to every rank's counter, wait until ours reaches
// nranks*(epoch+1), epoch kept in device memory.
func refBarrier(m sim.Memory, p *refParams) error {
	own := cuda.DevicePtr(p.SignalPeer[p.Rank])
	var eb [4]byte
	if err := m.Load(own+8, eb[:]); err != nil {
		return err
	}
	epoch := binary.LittleEndian.Uint32(eb[:])
	for q := range p.NRanks {
		if _, err := m.AtomicAddU32(cuda.DevicePtr(p.SignalPeer[q]), 1); err != nil {
			return err
		}
	}
	target := p.NRanks * (epoch + 1)
	deadline := m.GlobalTimer() + 3e9
	for {
		v, err := m.LoadU32(own)
		if err != nil {
			return err
		}
		if int32(v-target) >= 0 {
			break
		}
		runtime.Gosched()
		if m.GlobalTimer() > deadline {
			return fmt.Errorf("refcoll: rank %d: barrier timed out (%d of %d)", p.Rank, v, target)
		}
	}
	binary.LittleEndian.PutUint32(eb[:], epoch+1)
	return m.Store(own+8, eb[:])
}

// newSimNode is a simulated node that runs nvls's kernels and the
// reference collective's.
func newSimNode(cfg sim.Config) *sim.Node {
	cfg.Kernels = simKernels
	return simnode.New(cfg)
}
