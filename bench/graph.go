package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/nvls-go/nvls/cuda"
)

// capture records iters iterations of agg collectives each into one CUDA
// graph per local rank (every rank's stream captured at once,
// thread-local mode as nccl-tests) and instantiates them.
func capture(ctx context.Context, n *node, rn runner, op opSpec, send, recv []cuda.DevicePtr, iters, agg int) ([]cuda.GraphExec, error) {
	// Outside relaxed mode the thread that begins a capture must end it
	// (else CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD): stay on one OS thread
	// from begin to end (each's own locking nests inside this one).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	begun := 0
	err := n.each(func(r int) error {
		if err := n.drv.StreamBeginCapture(n.streams[r], cuda.CaptureModeThreadLocal); err != nil {
			return fmt.Errorf("rank %d: begin capture: %w", n.rank(r), err)
		}
		begun++
		return nil
	})
	if err == nil {
		for range iters {
			if err = rn.enqueue(ctx, op, send, recv, agg); err != nil {
				break
			}
		}
	}
	graphs, endErr := endCapture(n, begun)
	defer func() {
		_ = n.each(func(r int) error {
			if graphs[r] != 0 {
				return n.drv.GraphDestroy(graphs[r])
			}
			return nil
		})
	}()
	if err = errors.Join(err, endErr); err != nil {
		return nil, fmt.Errorf("graph capture: %w", err)
	}
	execs := make([]cuda.GraphExec, n.size())
	err = n.each(func(r int) error {
		e, err := n.drv.GraphInstantiate(graphs[r])
		if err != nil {
			return fmt.Errorf("rank %d: graph instantiate: %w", n.rank(r), err)
		}
		execs[r] = e
		return nil
	})
	if err != nil {
		_ = destroyGraphs(n, execs)
		return nil, err
	}
	return execs, nil
}

// endCapture ends the capture on the first begun local ranks' streams;
// it ends every one it can, whatever fails.
func endCapture(n *node, begun int) ([]cuda.Graph, error) {
	graphs := make([]cuda.Graph, n.size())
	var errs []error
	_ = n.each(func(r int) error {
		if r >= begun {
			return nil
		}
		g, err := n.drv.StreamEndCapture(n.streams[r])
		if err != nil {
			errs = append(errs, fmt.Errorf("rank %d: end capture: %w", n.rank(r), err))
		}
		graphs[r] = g
		return nil
	})
	return graphs, errors.Join(errs...)
}

func destroyGraphs(n *node, execs []cuda.GraphExec) error {
	return n.each(func(r int) error {
		if execs[r] != 0 {
			return n.drv.GraphExecDestroy(execs[r])
		}
		return nil
	})
}
