package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
)

// opSpec is one collective call as the runners see it.
type opSpec struct {
	coll  *collective
	size  uint64 // bytes
	count uint64 // elements of dtype
	dtype kernels.DType
	op    kernels.RedOp
	root  int
}

// runnerKind says which of the report's groups of figures a runner's go
// in (Row.figures).
type runnerKind int

const (
	kindNVLS    runnerKind = iota // nvls
	kindNCCL                      // NCCL on nvls's buffers
	kindNCCLSym                   // NCCL on its symmetric memory
)

// runner is one implementation under test: nvls's collectives, or NCCL's.
type runner interface {
	// name is what the table and the plot call it.
	name() string
	// kind is where its figures go.
	kind() runnerKind
	// buffers are the per-rank send and recv buffers it runs on (the
	// node's local ranks; nvls's team buffers unless it has its own).
	buffers() (send, recv []cuda.DevicePtr)
	// enqueue issues k collectives, back to back, on every local rank's
	// stream (the node's streams) and returns once they are issued (NCCL's
	// in one group: nccl-tests' -m); send and recv are per-rank device
	// pointers (send[r] == recv[r]: in place). It must be capturable:
	// between StreamBeginCapture and StreamEndCapture on every rank's
	// stream it only enqueues work.
	enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr, k int) error
	// wait returns once what enqueue issued is done on every local
	// rank's stream, as a program that waits for each collective would
	// wait (-z 1: latency.go).
	wait(ctx context.Context) error
	// Close releases what the runner holds.
	Close() error
}

// timer times collectives with CUDA events on every local rank's stream.
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
				return fmt.Errorf("rank %d: creating an event: %w", n.rank(r), err)
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

// record records event k on every local rank's stream.
func (t *timer) record(k int) error {
	return t.n.each(func(r int) error {
		if err := t.n.drv.EventRecord(t.events[r][k], t.n.streams[r]); err != nil {
			return fmt.Errorf("rank %d: recording an event: %w", t.n.rank(r), err)
		}
		return nil
	})
}

// elapsedUS is local rank r's time from event a to event b in
// microseconds.
func (t *timer) elapsedUS(r, a, b int) (float64, error) {
	var ms float32
	err := t.n.on(r, func() (err error) {
		ms, err = t.n.drv.EventElapsedTime(t.events[r][a], t.events[r][b])
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rank %d: event elapsed time: %w", t.n.rank(r), err)
	}
	return float64(ms) * 1000, nil
}

// measurement is what timing one variant gives, per collective.
type measurement struct {
	// timeUS is the reported time: the ranks' times aggregated by -a
	// (avg timing), or the median over iterations of the per-iteration
	// times so aggregated (median timing).
	timeUS float64
	// rankTimesUS is each rank's own time, over every timed iteration.
	rankTimesUS []float64
	// iterRankUS (median timing) is [rank][iteration]; iterTimesUS the
	// iterations' times aggregated over the ranks.
	iterRankUS  [][]float64
	iterTimesUS []float64
}

// schedule is how the timed iterations are issued and cut into timed
// segments (nccl-tests' -n, -m, -G; nvls-bench's -timing):
//
//   - avg: one segment of all -n iterations, timed between two events;
//   - median: -n / -segment segments of -segment iterations each (one
//     by default), an event after each;
//   - an iteration is -m collectives (one NCCL group);
//   - with -G N the collectives of one segment are captured into one CUDA
//     graph per GPU, replayed N times in the segment; without it they
//     are enqueued as they are.
//
// Every segment's time is divided by the collectives it ran. -z 1 is
// timed on the host instead (latency.go).
type schedule struct {
	segments, itersPerSegment, agg, launches int
	// launch is -launch: how the local GPUs' graphs are launched (serial,
	// parallel, workers).
	launch string
	// cold: no untimed replay before the timed launches (-cold-graph).
	cold bool
}

func scheduleOf(cfg *config) schedule {
	s := schedule{segments: 1, itersPerSegment: cfg.iters, agg: cfg.aggIters, launches: cfg.graphLaunches,
		launch: cfg.launch, cold: cfg.coldGraph}
	if cfg.timing == "median" {
		s.itersPerSegment = max(cfg.segment, 1)
		s.segments = cfg.iters / s.itersPerSegment
	}
	return s
}

// perSegment is the number of collectives one segment runs.
func (s schedule) perSegment() float64 {
	return float64(s.itersPerSegment * s.agg * max(1, s.launches))
}

// timing runs warm-up and timed iterations of op through rn and times
// them (events on every local rank's stream; see schedule), then gathers
// every rank's times and aggregates them by -a.
func timing(ctx context.Context, n *node, t *timer, cfg *config, rn runner, op opSpec, send, recv []cuda.DevicePtr) (measurement, error) {
	if cfg.blocking {
		return latencyTiming(ctx, n, cfg, rn, op, send, recv)
	}
	var m measurement
	s := scheduleOf(cfg)
	for range cfg.warmup {
		if err := rn.enqueue(ctx, op, send, recv, 1); err != nil {
			return m, fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := n.drain(ctx, "warm-up"); err != nil {
		return m, err
	}
	segment, done, err := segmentRunner(ctx, n, rn, op, send, recv, s)
	if err != nil {
		return m, err
	}
	defer done()
	// One untimed collective right before the start event: the drain
	// above leaves the streams idle, and under mpirun the processes leave
	// their barrier microseconds to milliseconds apart; the collective's
	// own synchronization lines the streams up, so the timed iterations
	// start together instead of the first absorbing the skew (measured on
	// 2 x H200 under mpirun before this: ~75 us per 8 B all-reduce for
	// both nvls and NCCL, against ~9 us in one process).
	if err := rn.enqueue(ctx, op, send, recv, 1); err != nil {
		return m, fmt.Errorf("aligning collective: %w", err)
	}
	if err := t.record(0); err != nil {
		return m, err
	}
	for i := range s.segments {
		if err := segment(); err != nil {
			return m, err
		}
		if err := t.record(i + 1); err != nil {
			return m, err
		}
	}
	if err := n.drain(ctx, "timed iterations"); err != nil {
		return m, err
	}
	if m, err = readTimes(n, t, s, cfg.timing == "median"); err != nil {
		return m, err
	}
	if err := n.gatherTimes(ctx, &m); err != nil {
		return m, err
	}
	m.aggregate(cfg.average)
	return m, nil
}

// segmentRunner returns what issues one timed segment, and what releases
// the graphs it captured.
func segmentRunner(ctx context.Context, n *node, rn runner, op opSpec, send, recv []cuda.DevicePtr, s schedule) (run func() error, done func(), err error) {
	if s.launches == 0 {
		return func() error {
			for range s.itersPerSegment {
				if err := rn.enqueue(ctx, op, send, recv, s.agg); err != nil {
					return err
				}
			}
			return nil
		}, func() {}, nil
	}
	execs, err := capture(ctx, n, rn, op, send, recv, s.itersPerSegment, s.agg)
	if err != nil {
		return nil, nil, err
	}
	// -launch: one thread launches every local GPU's graph in turn (as
	// nccl-tests does), a thread per GPU launches its own at once, or
	// each GPU's team worker does (a single-process program's way to
	// launch from a thread per GPU without a thread wake a launch).
	each := n.each
	switch s.launch {
	case "parallel":
		each = n.parallel
	case "workers":
		if n.workers == nil {
			return nil, nil, errors.New("-launch workers: no team to launch on")
		}
		each = n.workers
	}
	// One untimed replay (not with -cold-graph): a graph's first launch
	// uploads it to the GPU, which cost 1-1.5 us per collective of a
	// 20-iteration graph of 8-byte all-reduces on 2 x H200 (docs/perf.md,
	// run 39), for nvls and NCCL alike; a program that captures once pays
	// it once. Every rank replays its graph here, so the collectives in it
	// meet.
	if !s.cold {
		if err := each(func(r int) error { return n.drv.GraphLaunch(execs[r], n.streams[r]) }); err != nil {
			_ = destroyGraphs(n, execs)
			return nil, nil, fmt.Errorf("graph warm-up launch: %w", err)
		}
		if err := n.drain(ctx, "graph warm-up"); err != nil {
			_ = destroyGraphs(n, execs)
			return nil, nil, err
		}
	}
	return func() error {
		for range s.launches {
			if err := each(func(r int) error { return n.drv.GraphLaunch(execs[r], n.streams[r]) }); err != nil {
				return fmt.Errorf("graph launch: %w", err)
			}
		}
		return nil
	}, func() { _ = destroyGraphs(n, execs) }, nil
}

// readTimes reads this process's events: every local rank's time per
// collective and, in median mode, per iteration.
func readTimes(n *node, t *timer, s schedule, median bool) (measurement, error) {
	var m measurement
	per := s.perSegment()
	for r := range n.size() {
		us, err := t.elapsedUS(r, 0, s.segments)
		if err != nil {
			return m, err
		}
		m.rankTimesUS = append(m.rankTimesUS, us/(per*float64(s.segments)))
		if !median {
			continue
		}
		row := make([]float64, s.segments)
		for i := range row {
			if row[i], err = t.elapsedUS(r, i, i+1); err != nil {
				return m, err
			}
			row[i] /= per
		}
		m.iterRankUS = append(m.iterRankUS, row)
	}
	return m, nil
}

// aggregate sets timeUS (and, in median mode, iterTimesUS) from every
// rank's times, as -a says.
func (m *measurement) aggregate(a average) {
	if len(m.iterRankUS) == 0 {
		m.timeUS = a.of(m.rankTimesUS)
		return
	}
	m.iterTimesUS = make([]float64, len(m.iterRankUS[0]))
	col := make([]float64, len(m.iterRankUS))
	for i := range m.iterTimesUS {
		for r, row := range m.iterRankUS {
			col[r] = row[i]
		}
		m.iterTimesUS[i] = a.of(col)
	}
	m.timeUS = medianOf(m.iterTimesUS)
}

// average is -a: how the ranks' times make one (nccl-tests' numbers).
type average int

const (
	avgRank0 average = iota // rank 0's
	avgMean                 // the mean over the ranks
	avgMin                  // the fastest rank's
	avgMax                  // the slowest rank's (nvls-bench's default)
)

var averageNames = []string{"rank0", "avg", "min", "max"}

func (a average) String() string { return averageNames[a] }

// of aggregates xs (one per rank, in rank order).
func (a average) of(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	switch a {
	case avgRank0:
		return xs[0]
	case avgMean:
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	case avgMin:
		return slices.Min(xs)
	}
	return slices.Max(xs)
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
