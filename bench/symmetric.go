package main

// NCCL on symmetric memory: NCCL 2.27.3's symmetric kernels run where
// every rank's buffers come from ncclMemAlloc and are registered with
// ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), as nccl-tests' -R 2
// does. The runner has buffers of its own (nvls's team buffers are not
// NCCL's), filled and checked like the others.

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
)

// newSymRunner allocates a send and a recv buffer of bytes on every local
// rank with ncclMemAlloc and registers them, every process at once (or
// all stop). An NCCL that registered nothing gives an error matching
// nccl.ErrNotAvailable.
func newSymRunner(n *node, s *ncclSession, bytes uint64) (*ncclRunner, error) {
	x := &ncclRunner{s: s, k: kindNCCLSym}
	err := n.each(func(r int) error {
		for _, dst := range []*[]cuda.DevicePtr{&x.send, &x.recv} {
			p, err := s.lib.MemAlloc(bytes)
			if err != nil {
				return fmt.Errorf("rank %d: %w", n.rank(r), err)
			}
			*dst = append(*dst, p)
		}
		return nil
	})
	if err == nil {
		err = x.register(bytes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.setupTimeout())
	defer cancel()
	if err = n.settle(ctx, "registering NCCL's symmetric memory", err); err != nil {
		return nil, errors.Join(err, x.freeSymmetric())
	}
	return x, nil
}

// register registers every local rank's send and recv buffers as
// symmetric windows, in one group (NCCL's registration is collective).
func (x *ncclRunner) register(bytes uint64) error {
	n := x.s.n
	reqs := make([]nccl.WindowRequest, 0, 2*n.size())
	for r := range n.size() {
		for _, p := range []cuda.DevicePtr{x.send[r], x.recv[r]} {
			reqs = append(reqs, nccl.WindowRequest{Comm: x.s.comms[r], Buf: p, Size: bytes, Flags: nccl.WinCollSymmetric})
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	wins, err := x.s.lib.RegisterWindows(reqs, func(i int) error {
		return n.drv.CtxSetCurrent(n.ctxs[i/2])
	})
	x.wins = wins
	return err
}

// freeSymmetric deregisters the windows and frees the buffers.
func (x *ncclRunner) freeSymmetric() error {
	n, lib := x.s.n, x.s.lib
	var errs []error
	for i, w := range x.wins {
		if w != 0 {
			errs = append(errs, n.on(i/2, func() error { return lib.CommWindowDeregister(x.s.comms[i/2], w) }))
		}
	}
	x.wins = nil
	for _, bufs := range [][]cuda.DevicePtr{x.send, x.recv} {
		for r, p := range bufs {
			errs = append(errs, n.on(r, func() error { return lib.MemFree(p) }))
		}
	}
	x.send, x.recv = nil, nil
	return errors.Join(errs...)
}
