package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
)

// ncclRunner runs NCCL's collectives on the node's GPUs and streams: one
// communicator per local rank (the world makes them), every call of one
// enqueue issued inside one ncclGroupStart/End from one locked OS thread,
// each with its GPU's context current.
type ncclRunner struct {
	n     *node
	lib   *nccl.Lib
	comms []nccl.Comm
	info  NCCLInfo
}

// noNCCLOnSim is why -compare nccl gives no NCCL columns on the simulated
// node.
const noNCCLOnSim = "NCCL needs real GPUs and this run is on the simulated node"

func newNCCLRunner(n *node) (*ncclRunner, error) {
	lib, err := nccl.Open()
	var v int
	if err == nil {
		if v, err = lib.Version(); err != nil {
			_ = lib.Close()
		}
	}
	// Every process loaded NCCL, or all stop.
	ctx, cancel := context.WithTimeout(context.Background(), n.setupTimeout())
	defer cancel()
	if serr := n.settle(ctx, "loading NCCL", err); serr != nil {
		if err == nil {
			_ = lib.Close()
		}
		return nil, fmt.Errorf("-compare nccl: %w", serr)
	}
	comms, err := n.w.ncclComms(n, lib)
	if err != nil {
		_ = lib.Close()
		return nil, fmt.Errorf("-compare nccl: %w", err)
	}
	return &ncclRunner{n: n, lib: lib, comms: comms, info: NCCLInfo{
		Version: v, VersionText: nccl.VersionString(v), Library: lib.Path(), NVLSEnable: nccl.NVLSSetting(),
	}}, nil
}

func (x *ncclRunner) name() string { return "NCCL " + x.info.VersionText }

func (x *ncclRunner) enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr, k int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := x.n
	if err := x.lib.GroupStart(); err != nil {
		return err
	}
	var first error
	for i := 0; i < k && first == nil; i++ {
		for r := range n.size() {
			if err := n.drv.CtxSetCurrent(n.ctxs[r]); err != nil {
				first = fmt.Errorf("rank %d: %w", n.rank(r), err)
				break
			}
			if err := op.coll.nccl(x.lib, op, send[r], recv[r], x.comms[r], n.streams[r]); err != nil {
				first = fmt.Errorf("rank %d: %w", n.rank(r), err)
				break
			}
		}
	}
	if err := x.lib.GroupEnd(); err != nil && first == nil {
		first = err
	}
	return first
}

// Close destroys the communicators and unloads NCCL.
func (x *ncclRunner) Close() error {
	var errs []error
	for r, c := range x.comms {
		if err := x.n.on(r, func() error { return x.lib.CommDestroy(c) }); err != nil {
			errs = append(errs, err)
		}
	}
	x.comms = nil
	errs = append(errs, x.lib.Close())
	return errors.Join(errs...)
}

// The table's NCCL entries (colls.go).

func allReduceNCCL(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error {
	return lib.AllReduce(send, recv, op.count, ncclTypes[op.dtype], ncclOps[op.op], comm, s)
}

func broadcastNCCL(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error {
	return lib.Broadcast(send, recv, op.count, ncclTypes[op.dtype], op.root, comm, s)
}
