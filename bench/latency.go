package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/nvls-go/nvls/cuda"
)

// latencyTiming is -z 1, the latency mode: every collective is followed
// by the runner's wait, as a program that waits for each collective (no
// graphs) does: nvls's is collectives' Comm.Sync, NCCL's a cuStreamQuery
// spin on every local rank's stream (nccl-tests' -z 1 waits so). The time
// is the host's, from the first call to the last wait's return, per
// collective (nccl-tests times its -z 1 on the host too): issue plus wait,
// the same for every local rank of a process. Median timing takes one
// host time per iteration. The warm-up, and one more call that lines the
// ranks up, are waited for too and not timed.
func latencyTiming(ctx context.Context, n *node, cfg *config, rn runner, op opSpec, send, recv []cuda.DevicePtr) (measurement, error) {
	var m measurement
	call := func() error {
		if err := rn.enqueue(ctx, op, send, recv, 1); err != nil {
			return err
		}
		return rn.wait(ctx)
	}
	for range cfg.warmup + 1 {
		if err := call(); err != nil {
			return m, fmt.Errorf("warm-up: %w", err)
		}
	}
	iters := make([]float64, cfg.iters)
	start := time.Now()
	for i := range iters {
		t0 := time.Now()
		if err := call(); err != nil {
			return m, err
		}
		iters[i] = usSince(t0)
	}
	per := usSince(start) / float64(cfg.iters)
	for range n.size() {
		m.rankTimesUS = append(m.rankTimesUS, per)
		if cfg.timing == "median" {
			m.iterRankUS = append(m.iterRankUS, iters)
		}
	}
	if err := n.gatherTimes(ctx, &m); err != nil {
		return m, err
	}
	m.aggregate(cfg.average)
	return m, nil
}

func usSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e3 }

// spin waits until every local rank's stream is idle, or ctx ends: the
// wait of -z 1 for what has no wait of its own (NCCL, the tests' double).
// Like Comm.Sync it polls from the calling goroutine (the node's streams
// are created streams, which need no current context), spinning for the
// first 200 us, then yielding, then sleeping up to 1 ms; unlike drain it
// does not wait for the other processes.
func (n *node) spin(ctx context.Context, what string) error {
	pending := make([]bool, n.size())
	left := len(pending)
	for r := range pending {
		pending[r] = true
	}
	start, sleep := time.Now(), time.Duration(0)
	for {
		for r, p := range pending {
			if !p {
				continue
			}
			err := n.drv.StreamQuery(n.streams[r])
			switch {
			case err == nil:
				pending[r] = false
				left--
			case !errors.Is(err, cuda.ErrNotReady):
				return fmt.Errorf("%s: rank %d (device %d): %w", what, n.rank(r), n.devs[r], err)
			}
		}
		if left == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return n.busyError(pending, what, err)
		}
		switch el := time.Since(start); {
		case el < 200*time.Microsecond:
		case el < 2*time.Millisecond:
			runtime.Gosched()
		default:
			sleep = min(max(2*sleep, 10*time.Microsecond), time.Millisecond)
			time.Sleep(sleep)
		}
	}
}
