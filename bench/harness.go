package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
)

// opSpec is one collective call as the runners see it.
type opSpec struct {
	coll  collKind
	size  uint64 // bytes
	count uint64 // elements of dtype
	dtype kernels.DType
	op    kernels.RedOp
	root  int
}

// runner is one implementation under test: nvls's collectives, or NCCL's.
type runner interface {
	// name is what the table and the plot call it.
	name() string
	// enqueue issues one collective on every rank's stream (the node's
	// streams) and returns once it is issued; send and recv are per-rank
	// device pointers (send[r] == recv[r]: in place). It must be
	// capturable: between StreamBeginCapture and StreamEndCapture on every
	// rank's stream it only enqueues work.
	enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr) error
	// Close releases what the runner holds.
	Close() error
}

// timer times collectives with CUDA events on every rank's stream.
type timer struct {
	n      *node
	events [][]cuda.Event // [rank][k]
}

func newTimer(n *node, perRank int) (*timer, error) {
	t := &timer{n: n, events: make([][]cuda.Event, n.size())}
	err := n.each(func(r int) error {
		for range perRank {
			e, err := n.drv.EventCreate(cuda.EventDefault)
			if err != nil {
				return fmt.Errorf("rank %d: creating an event: %w", r, err)
			}
			t.events[r] = append(t.events[r], e)
		}
		return nil
	})
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	return t, nil
}

// Close destroys the events.
func (t *timer) Close() error {
	return t.n.each(func(r int) error {
		var errs []error
		for _, e := range t.events[r] {
			errs = append(errs, t.n.drv.EventDestroy(e))
		}
		t.events[r] = nil
		return errors.Join(errs...)
	})
}

// record records event k on every rank's stream.
func (t *timer) record(k int) error {
	return t.n.each(func(r int) error {
		if err := t.n.drv.EventRecord(t.events[r][k], t.n.streams[r]); err != nil {
			return fmt.Errorf("rank %d: recording an event: %w", r, err)
		}
		return nil
	})
}

// elapsedUS is rank r's time from event a to event b in microseconds.
func (t *timer) elapsedUS(r, a, b int) (float64, error) {
	var ms float32
	err := t.n.on(r, func() (err error) {
		ms, err = t.n.drv.EventElapsedTime(t.events[r][a], t.events[r][b])
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rank %d: event elapsed time: %w", r, err)
	}
	return float64(ms) * 1000, nil
}

// measurement is what timing one variant gives.
type measurement struct {
	timeUS      float64   // reported: max over ranks (avg) or median over iterations of the max over ranks
	rankTimesUS []float64 // per rank, per collective
	iterTimesUS []float64 // median mode: per iteration, max over ranks
}

// timing runs warm-up and timed iterations of op through rn and times them.
// Events bracket the -n iterations on every rank's stream (with -graph: the
// launch of the graph holding them); with -timing median they also
// separate the iterations.
func timing(ctx context.Context, n *node, t *timer, cfg *config, rn runner, op opSpec, send, recv []cuda.DevicePtr) (measurement, error) {
	var m measurement
	median := cfg.timing == "median"
	for range cfg.warmup {
		if err := rn.enqueue(ctx, op, send, recv); err != nil {
			return m, fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := n.drain(ctx, "warm-up"); err != nil {
		return m, err
	}
	// align enqueues one untimed collective right before the start event:
	// the drain above leaves the ranks' streams idle, and under mpirun the
	// processes leave their barrier microseconds to milliseconds apart;
	// the collective's own synchronization lines the streams up, so the
	// timed iterations start together instead of the first one absorbing
	// the skew (measured on 2 x H200 under mpirun before this: ~75 us per
	// 8 B all-reduce for both nvls and NCCL, against ~9 us in one process).
	align := func() error {
		if err := rn.enqueue(ctx, op, send, recv); err != nil {
			return fmt.Errorf("aligning collective: %w", err)
		}
		return nil
	}
	iters := cfg.iters
	marks := 2 // event indexes used: 0 and last
	if median {
		marks = iters + 1
	}
	if cfg.graph {
		perGraph := iters
		if median {
			perGraph = 1
		}
		execs, err := capture(ctx, n, rn, op, send, recv, perGraph)
		if err != nil {
			return m, err
		}
		defer func() { _ = destroyGraphs(n, execs) }()
		if err := align(); err != nil {
			return m, err
		}
		if err := t.record(0); err != nil {
			return m, err
		}
		launches := 1
		if median {
			launches = iters
		}
		for i := range launches {
			if err := n.each(func(r int) error { return n.drv.GraphLaunch(execs[r], n.streams[r]) }); err != nil {
				return m, fmt.Errorf("graph launch: %w", err)
			}
			if median {
				if err := t.record(i + 1); err != nil {
					return m, err
				}
			}
		}
		if !median {
			if err := t.record(1); err != nil {
				return m, err
			}
		}
	} else {
		if err := align(); err != nil {
			return m, err
		}
		if err := t.record(0); err != nil {
			return m, err
		}
		for i := range iters {
			if err := rn.enqueue(ctx, op, send, recv); err != nil {
				return m, err
			}
			if median {
				if err := t.record(i + 1); err != nil {
					return m, err
				}
			}
		}
		if !median {
			if err := t.record(1); err != nil {
				return m, err
			}
		}
	}
	if err := n.drain(ctx, "timed iterations"); err != nil {
		return m, err
	}
	last := marks - 1
	m.rankTimesUS = make([]float64, n.size())
	for r := range n.size() {
		us, err := t.elapsedUS(r, 0, last)
		if err != nil {
			return m, err
		}
		m.rankTimesUS[r] = us / float64(iters)
	}
	if median {
		m.iterTimesUS = make([]float64, iters)
		for i := range iters {
			for r := range n.size() {
				us, err := t.elapsedUS(r, i, i+1)
				if err != nil {
					return m, err
				}
				m.iterTimesUS[i] = math.Max(m.iterTimesUS[i], us)
			}
		}
	}
	// Under mpirun: every rank's times, and the slowest per iteration.
	if err := n.gatherTimes(ctx, &m); err != nil {
		return m, err
	}
	if !median {
		m.timeUS = slices.Max(m.rankTimesUS)
		return m, nil
	}
	m.timeUS = medianOf(m.iterTimesUS)
	return m, nil
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// capture records k collectives into one CUDA graph per rank (every rank's
// stream captured at once, thread-local mode as nccl-tests) and
// instantiates them.
func capture(ctx context.Context, n *node, rn runner, op opSpec, send, recv []cuda.DevicePtr, k int) ([]cuda.GraphExec, error) {
	// Outside relaxed mode the thread that begins a capture must end it
	// (else CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD): stay on one OS thread
	// from begin to end (each's own locking nests inside this one).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	begun := 0
	err := n.each(func(r int) error {
		if err := n.drv.StreamBeginCapture(n.streams[r], cuda.CaptureModeThreadLocal); err != nil {
			return fmt.Errorf("rank %d: begin capture: %w", r, err)
		}
		begun++
		return nil
	})
	var enqErr error
	if err == nil {
		for range k {
			if enqErr = rn.enqueue(ctx, op, send, recv); enqErr != nil {
				break
			}
		}
	}
	graphs := make([]cuda.Graph, n.size())
	var endErrs []error
	_ = n.each(func(r int) error {
		if r >= begun {
			return nil
		}
		g, err := n.drv.StreamEndCapture(n.streams[r])
		if err != nil {
			endErrs = append(endErrs, fmt.Errorf("rank %d: end capture: %w", r, err))
		}
		graphs[r] = g
		return nil
	})
	defer func() {
		_ = n.each(func(r int) error {
			if graphs[r] != 0 {
				return n.drv.GraphDestroy(graphs[r])
			}
			return nil
		})
	}()
	if err != nil {
		return nil, fmt.Errorf("graph capture: %w", err)
	}
	if enqErr != nil {
		return nil, fmt.Errorf("graph capture: %w", enqErr)
	}
	if len(endErrs) > 0 {
		return nil, fmt.Errorf("graph capture: %w", errors.Join(endErrs...))
	}
	execs := make([]cuda.GraphExec, n.size())
	err = n.each(func(r int) error {
		e, err := n.drv.GraphInstantiate(graphs[r])
		if err != nil {
			return fmt.Errorf("rank %d: graph instantiate: %w", r, err)
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

func destroyGraphs(n *node, execs []cuda.GraphExec) error {
	return n.each(func(r int) error {
		if execs[r] != 0 {
			return n.drv.GraphExecDestroy(execs[r])
		}
		return nil
	})
}
