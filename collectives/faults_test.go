package collectives

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// TestFaultAtEveryCall injects a failure at each driver call of New, an
// all-reduce through the staging areas, a broadcast, a reduce-scatter
// (copy-in in chunks), an all-gather (copy-out in chunks), a two-shot
// reduce (chunks, the root's copy-out), Sync and Close in turn: every step either succeeds or returns an error (nothing panics or
// hangs), every fault that fires surfaces as an error of some step, and
// once everything is closed the node holds nothing (the fixture's cleanup
// checks).
//
// The faults are placed by entry point (the k-th call of each, FailAt),
// not by position: Sync polls (cuStreamQuery) until the simulated kernels
// are done, spinning first, so a run makes more polls the longer they
// take, and every call after the first poll would move. The calls of any
// other entry point are the same in every run up to the fault, so each
// of those faults must fire; of the polls, the first few are tried, and
// one past the run's last poll proves nothing (it is counted apart).
func TestFaultAtEveryCall(t *testing.T) {
	cfg := fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 1 << 20, foreign: 16 << 10, opts: []Option{WithLLMax(0), WithStageBytes(4096)}}
	const polls = 4 // cuStreamQuery faults tried
	// Count the calls of a clean run by entry point. It must succeed,
	// however loaded the machine: its kernels get a timeout no scheduling
	// delay reaches (Sync returns as soon as they are done).
	var ops []string
	counts := map[string]int{}
	{
		f := newFixture(t, cfg)
		n0 := 0
		errs := faultScenario(f, time.Minute, func() { n0 = len(f.node.Calls()) })
		require.NoError(t, errors.Join(errs...), "the clean run")
		for _, c := range f.node.Calls()[n0:] {
			if counts[c.Op] == 0 {
				ops = append(ops, c.Op)
			}
			counts[c.Op]++
		}
	}
	require.Greater(t, len(ops), 10)
	// The faulted runs keep a short kernel timeout: a fault between two
	// ranks' launches leaves the launched rank's kernel waiting for the
	// other until it times out.
	fired, missed := 0, 0
	for _, op := range ops {
		n := counts[op]
		if op == "cuStreamQuery" {
			n = min(n, polls)
		}
		for k := 1; k <= n; k++ {
			if testing.Short() && !shortFaultPoint(k, n) {
				continue
			}
			switch faultRun(t, cfg, op, k) {
			case faultFired:
				fired++
			case faultMissed:
				if op != "cuStreamQuery" {
					t.Errorf("the fault at call %d of %s did not fire: every run makes %d", k, op, counts[op])
				}
				missed++
			case faultSilent:
				fired++
				t.Errorf("the fault at call %d of %s fired, and every step succeeded", k, op)
			}
		}
	}
	t.Logf("%d entry points called in the clean run: %d faults fired and surfaced as errors, %d polls were past their run's last",
		len(ops), fired, missed)
}

// shortFaultPoint reports whether the k-th of n calls of an entry point is
// faulted under -short (the race run, make race): the first, the last and
// every fifth, so that every entry point is still faulted where it starts
// and ends a scenario, at a fifth of the runs.
func shortFaultPoint(k, n int) bool { return k == 1 || k == n || k%5 == 0 }

type faultOutcome int

const (
	faultFired faultOutcome = iota
	faultMissed
	faultSilent
)

// faultRun runs the scenario on a fresh fixture with the k-th call of op
// failing, and tells whether the fault fired and surfaced.
func faultRun(t *testing.T, cfg fixtureConfig, op string, k int) faultOutcome {
	f := newFixture(t, cfg)
	defer f.close()
	// The scenario makes its own Comm: the fixture's is closed now, or it
	// would stay registered after its team is gone, and a later test's
	// memory at the same simulated addresses would look like its team's.
	require.NoError(t, f.c.Close())
	n0 := 0
	errs := faultScenario(f, 50*time.Millisecond, func() {
		n0 = len(f.node.Calls())
		f.node.FailAt(op, k, cuda.ErrorUnknown)
	})
	f.node.ClearFaults()
	for _, c := range f.node.Calls()[n0:] {
		if c.Injected {
			if len(errs) == 0 {
				return faultSilent
			}
			return faultFired
		}
	}
	return faultMissed
}

// faultScenario is New, one collective of each kind, Sync and Close on
// f's team, with withFault called first; it returns the errors of the
// steps.
func faultScenario(f *fixture, timeout time.Duration, withFault func()) (errs []error) {
	bufB := f.alloc(8192)
	foreign := append([]cuda.DevicePtr(nil), f.foreign...)
	upper := make([]cuda.DevicePtr, f.n)
	for l := range upper {
		upper[l] = f.foreign[l] + 8<<10
	}
	ctx := context.Background()
	withFault()
	c, err := New(f.t, WithLLMax(0), WithStageBytes(4096), WithOneShotMax(2048), WithTimeout(timeout))
	if err != nil {
		return []error{err}
	}
	steps := []func() error{
		func() error { return c.AllReduce(ctx, foreign, f.ptrs(bufB), 1500, F32, Sum, f.streams) },
		func() error { return c.Broadcast(ctx, f.ptrs(bufB), foreign, 2000, U32, 1, f.streams) },
		func() error { return c.ReduceScatter(ctx, foreign, f.ptrs(bufB), 700, F32, Sum, f.streams) },
		func() error { return c.AllGather(ctx, f.ptrs(bufB), upper, 600, U32, f.streams) },
		func() error { return c.Reduce(ctx, foreign, f.ptrs(bufB), 1500, S32, Max, 1, f.streams) },
		func() error { return c.Sync(ctx, f.streams) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Close(); err != nil {
		errs = append(errs, err)
	}
	return errs
}
