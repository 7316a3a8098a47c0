// Package simrun runs an all-reduce kernel of the unicast flavor on a
// fresh simulated node (cuda/sim) with the Go reference kernels, so that
// the GPU tests (build tag gpu) can compare the real kernels with the
// simulator bit for bit on the same inputs.
package simrun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/simkern"
)

// AllReduce runs the all-reduce entry (algo, dt, op) with grid blocks of
// kabi.BlockThreads threads on a simulated node of len(ins) devices,
// rank r's input being ins[r] (the same number of elements of dt on every
// rank), out of place, and returns every rank's output.
func AllReduce(algo kernels.Algo, dt kernels.DType, op kernels.RedOp, ins [][]byte, grid uint32) (outs [][]byte, err error) {
	n := len(ins)
	if n < 1 || n > kabi.MaxRanks {
		return nil, fmt.Errorf("simrun: %d ranks", n)
	}
	nbytes := uint64(len(ins[0]))
	if nbytes%uint64(dt.Size()) != 0 {
		return nil, fmt.Errorf("simrun: %d bytes of input is not a whole number of %v", nbytes, dt)
	}
	name := kernels.AllReduceName(dt, op, algo)
	fn, ok := simkern.Kernels()[name]
	if !ok {
		return nil, fmt.Errorf("simrun: no simulated kernel %s", name)
	}
	lay := newLayout(algo, nbytes, n)

	node := sim.New(sim.Config{Devices: n, MemoryPerDevice: max(sim.DefaultMemoryPerDevice, 2*lay.size)})
	defer func() { err = errors.Join(err, node.Close()) }()
	if err := node.Init(); err != nil {
		return nil, err
	}
	uc, unmap, err := mapAll(node, n, lay.size)
	defer func() { err = errors.Join(err, unmap()) }()
	if err != nil {
		return nil, err
	}
	for r := range n {
		if err := node.WriteDevice(cuda.DevicePtr(uc[r]+lay.send), ins[r]); err != nil {
			return nil, err
		}
	}
	if err := launch(node, fn, name, dt, lay, uc, grid); err != nil {
		return nil, err
	}
	return readOutputs(node, uc, lay)
}

// layout is where the kernel finds its buffers in each rank's allocation
// (offsets in bytes) and how big that allocation is.
type layout struct {
	nbytes          uint64 // the input (and output) of one rank
	send, recv      uint64
	llArea, llLines uint64 // LL only
	size            uint64 // rounded up to the simulator's granularity
}

func newLayout(algo kernels.Algo, nbytes uint64, n int) layout {
	span := (nbytes + kabi.VecBytes - 1) / kabi.VecBytes * kabi.VecBytes
	l := layout{nbytes: nbytes, send: kabi.SignalBytes}
	l.recv = l.send + span
	l.size = l.recv + span
	if algo == kernels.LL {
		l.llArea = l.size
		l.llLines = (nbytes + kabi.LLLinePayload - 1) / kabi.LLLinePayload
		l.size = l.llArea + kabi.LLAreaBytes(nbytes, n)
	}
	const gran = 2 << 20 // the simulator's allocation granularity
	l.size = (l.size + gran - 1) / gran * gran
	return l
}

// mapAll gives every device of node size bytes that every device can
// read and write, and returns their addresses. unmap (never nil, to be
// called even on an error) unmaps and frees what mapAll mapped, the last
// rank's first.
func mapAll(node *sim.Node, n int, size uint64) (uc []uint64, unmap func() error, err error) {
	var undo []func() error
	unmap = func() error {
		var errs error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = errors.Join(errs, undo[i]())
		}
		return errs
	}
	var all []cuda.AccessDesc
	for r := range n {
		all = append(all, cuda.AccessDesc{Location: cuda.DeviceLocation(cuda.Device(r)), Flags: cuda.AccessReadWrite})
	}
	uc = make([]uint64, n)
	for r := range n {
		prop := cuda.DeviceAllocationProp(cuda.Device(r), cuda.HandleNone)
		h, err := node.MemCreate(size, &prop)
		if err != nil {
			return nil, unmap, err
		}
		p, err := node.MemAddressReserve(size, 0, 0)
		if err != nil {
			return nil, unmap, errors.Join(err, node.MemRelease(h))
		}
		undo = append(undo, func() error { return node.MemAddressFree(p, size) })
		if err := node.MemMap(p, size, 0, h); err != nil {
			return nil, unmap, errors.Join(err, node.MemRelease(h))
		}
		undo = append(undo, func() error { return node.MemUnmap(p, size) })
		// The mapping keeps the memory; the handle can go now.
		if err := errors.Join(node.MemRelease(h), node.MemSetAccess(p, size, all)); err != nil {
			return nil, unmap, err
		}
		uc[r] = uint64(p)
	}
	return uc, unmap, nil
}

// launch runs the kernel fn on every rank at once and waits for all.
func launch(node *sim.Node, fn sim.KernelFunc, name string, dt kernels.DType, lay layout, uc []uint64, grid uint32) error {
	n := len(uc)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		p := kabi.Params{Rank: uint32(r), NRanks: uint32(n), TimeoutNs: uint64(20 * time.Second),
			Send: lay.send, Recv: lay.recv, Count: lay.nbytes / uint64(dt.Size()), ElemBytes: uint32(dt.Size()),
			LLArea: lay.llArea, LLLines: uint32(lay.llLines), Opcode: kernels.OpAllReduce}
		copy(p.UC[:], uc)
		l := &sim.Launch{Name: name, Device: cuda.Device(r), Grid: cuda.D1(grid), Block: cuda.D1(kabi.BlockThreads),
			Params: p.Marshal(), Mem: node.Memory(cuda.Device(r))}
		wg.Go(func() { errs[r] = fn(l) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("simrun: rank %d: %w", r, err)
		}
	}
	return nil
}

// readOutputs returns every rank's output, after checking that its
// kernel left no error in the status word.
func readOutputs(node *sim.Node, uc []uint64, lay layout) ([][]byte, error) {
	outs := make([][]byte, len(uc))
	for r := range uc {
		var err error
		if outs[r], err = node.ReadDevice(cuda.DevicePtr(uc[r]+lay.recv), int(lay.nbytes)); err != nil {
			return nil, err
		}
		st, err := node.ReadDevice(cuda.DevicePtr(uc[r]+kabi.StatusOffset), 8)
		if err != nil {
			return nil, err
		}
		if s := (kabi.Status{Word: binary.LittleEndian.Uint64(st)}); s.Word != 0 {
			return nil, fmt.Errorf("simrun: rank %d: status %v", r, s)
		}
	}
	return outs, nil
}
