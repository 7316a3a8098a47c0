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
// communicator per GPU from ncclCommInitAll, every call of one collective
// issued inside ncclGroupStart/End from one locked OS thread, each with its
// GPU's context current.
type ncclRunner struct {
	n     *node
	lib   *nccl.Lib
	comms []nccl.Comm
	info  NCCLInfo
}

func newNCCLRunner(n *node) (*ncclRunner, error) {
	if n.simulated {
		return nil, errors.New("-compare nccl: NCCL needs real GPUs; it cannot run on the simulated node")
	}
	lib, err := nccl.Open()
	var v int
	if err == nil {
		if v, err = lib.Version(); err != nil {
			_ = lib.Close()
		}
	}
	// Under mpirun: every rank loaded NCCL, or all stop.
	ctx, cancel := context.WithTimeout(context.Background(), n.setupTimeout())
	defer cancel()
	if serr := n.settle(ctx, "loading NCCL", err); serr != nil {
		if err == nil {
			_ = lib.Close()
		}
		return nil, fmt.Errorf("-compare nccl: %w", serr)
	}
	comms, err := n.ncclComms(lib)
	if err != nil {
		_ = lib.Close()
		return nil, fmt.Errorf("-compare nccl: %w", err)
	}
	return &ncclRunner{n: n, lib: lib, comms: comms, info: NCCLInfo{
		Version: v, VersionText: nccl.VersionString(v), Library: lib.Path(), NVLSEnable: nccl.NVLSSetting(),
	}}, nil
}

// ncclComms makes one communicator per GPU this process drives: with
// ncclCommInitAll when it drives every GPU (under mpirun, launch.go's
// ncclCommsRank).
func (n *node) ncclComms(lib *nccl.Lib) ([]nccl.Comm, error) {
	if n.boot != nil {
		return n.ncclCommsRank(lib)
	}
	devs := make([]int, n.size())
	for r, d := range n.devs {
		devs[r] = int(d)
	}
	var comms []nccl.Comm
	err := n.on(0, func() (err error) {
		comms, err = lib.CommInitAll(devs)
		return err
	})
	return comms, err
}

func (x *ncclRunner) name() string { return "NCCL " + x.info.VersionText }

func (x *ncclRunner) enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr) error {
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
	for r := range n.size() {
		if err := n.drv.CtxSetCurrent(n.ctxs[r]); err != nil {
			first = fmt.Errorf("rank %d: %w", r, err)
			break
		}
		var err error
		switch op.coll {
		case collAllReduce:
			err = x.lib.AllReduce(send[r], recv[r], op.count, ncclTypes[op.dtype], ncclOps[op.op], x.comms[r], n.streams[r])
		case collBroadcast:
			err = x.lib.Broadcast(send[r], recv[r], op.count, ncclTypes[op.dtype], op.root, x.comms[r], n.streams[r])
		default:
			err = fmt.Errorf("NCCL has no %s in this benchmark", op.coll)
		}
		if err != nil {
			first = fmt.Errorf("rank %d: %w", r, err)
			break
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
