// Package simrun runs an all-reduce kernel of the unicast flavor on a
// fresh simulated node (cuda/sim) with the Go reference kernels, so that
// the GPU tests (build tag gpu) can compare the real kernels with the
// simulator bit for bit on the same inputs. The caller imports
// kernels/simkern, which registers the reference kernels.
package simrun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
)

// AllReduce runs the all-reduce entry (algo, dt, op) with grid blocks of
// kernels.BlockThreads threads on a simulated node of len(ins) devices,
// rank r's input being ins[r] (the same number of elements of dt on every
// rank), out of place, and returns every rank's output.
func AllReduce(algo kernels.Algo, dt kernels.DType, op kernels.RedOp, ins [][]byte, grid uint32) (outs [][]byte, err error) {
	n := len(ins)
	if n < 1 || n > kernels.MaxRanks {
		return nil, fmt.Errorf("simrun: %d ranks", n)
	}
	nbytes := uint64(len(ins[0]))
	if nbytes%uint64(dt.Size()) != 0 {
		return nil, fmt.Errorf("simrun: %d bytes of input is not a whole number of %v", nbytes, dt)
	}
	name := kernels.AllReduceName(dt, op, algo)
	fn, ok := sim.LookupKernel(name)
	if !ok {
		return nil, fmt.Errorf("simrun: no simulated kernel %s (import kernels/simkern)", name)
	}
	span := (nbytes + kernels.VecBytes - 1) / kernels.VecBytes * kernels.VecBytes
	send := uint64(kernels.SignalBytes)
	recv := send + span
	var llArea, llLines uint64
	size := recv + span
	if algo == kernels.LL {
		llArea = size
		llLines = (nbytes + kernels.LLLinePayload - 1) / kernels.LLLinePayload
		size = llArea + kernels.LLAreaBytes(nbytes, n)
	}
	const gran = 2 << 20 // the simulator's allocation granularity
	size = (size + gran - 1) / gran * gran

	node := sim.New(sim.Config{Devices: n, MemoryPerDevice: max(sim.DefaultMemoryPerDevice, 2*size)})
	defer func() { err = errors.Join(err, node.Close()) }()
	if err := node.Init(); err != nil {
		return nil, err
	}
	var all []cuda.AccessDesc
	for r := range n {
		all = append(all, cuda.AccessDesc{Location: cuda.DeviceLocation(cuda.Device(r)), Flags: cuda.AccessReadWrite})
	}
	uc := make([]uint64, n)
	for r := range n {
		prop := cuda.DeviceAllocationProp(cuda.Device(r), cuda.HandleNone)
		h, err := node.MemCreate(size, &prop)
		if err != nil {
			return nil, err
		}
		p, err := node.MemAddressReserve(size, 0, 0)
		if err != nil {
			return nil, errors.Join(err, node.MemRelease(h))
		}
		defer func() { err = errors.Join(err, node.MemAddressFree(p, size)) }()
		if err := node.MemMap(p, size, 0, h); err != nil {
			return nil, errors.Join(err, node.MemRelease(h))
		}
		defer func() { err = errors.Join(err, node.MemUnmap(p, size)) }()
		// The mapping keeps the memory; the handle can go now.
		if err := errors.Join(node.MemRelease(h), node.MemSetAccess(p, size, all)); err != nil {
			return nil, err
		}
		if err := node.WriteDevice(p+cuda.DevicePtr(send), ins[r]); err != nil {
			return nil, err
		}
		uc[r] = uint64(p)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		p := kernels.Params{Rank: uint32(r), NRanks: uint32(n), TimeoutNs: uint64(20 * time.Second),
			Send: send, Recv: recv, Count: nbytes / uint64(dt.Size()), ElemBytes: uint32(dt.Size()),
			LLArea: llArea, LLLines: uint32(llLines), Opcode: kernels.OpAllReduce}
		copy(p.UC[:], uc)
		l := &sim.Launch{Name: name, Device: cuda.Device(r), Grid: cuda.D1(grid), Block: cuda.D1(kernels.BlockThreads),
			Params: p.Marshal(), Mem: node.Memory(cuda.Device(r))}
		wg.Go(func() { errs[r] = fn(l) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("simrun: rank %d: %w", r, err)
		}
	}
	outs = make([][]byte, n)
	for r := range n {
		if outs[r], err = node.ReadDevice(cuda.DevicePtr(uc[r]+recv), int(nbytes)); err != nil {
			return nil, err
		}
		st, err := node.ReadDevice(cuda.DevicePtr(uc[r]+kernels.StatusOffset), 8)
		if err != nil {
			return nil, err
		}
		if s := (kernels.Status{Word: binary.LittleEndian.Uint64(st)}); s.Word != 0 {
			return nil, fmt.Errorf("simrun: rank %d: status %v", r, s)
		}
	}
	return outs, nil
}
