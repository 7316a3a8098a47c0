package collectives

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
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
// The number of calls is not fixed: Sync polls (cuStreamQuery) until the
// simulated kernels are done, so a run makes more calls the longer they
// take, i.e. the more loaded the machine is. The clean run's count is only
// how far nth goes; a faulted run may end before its nth call, and then
// its fault does not fire and proves nothing (it is counted apart). Every
// call before Sync's first poll is the same in every run, so faults there
// must all fire.
func TestFaultAtEveryCall(t *testing.T) {
	cfg := fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 1 << 20, foreign: 16 << 10, opts: []Option{WithLLMax(0), WithStageBytes(4096)}}
	upper := func(f *fixture) []cuda.DevicePtr {
		p := make([]cuda.DevicePtr, f.n)
		for l := range p {
			p[l] = f.foreign[l] + 8<<10
		}
		return p
	}
	scenario := func(f *fixture, timeout time.Duration, withFault func()) (errs []error) {
		bufB := f.alloc(8192)
		foreign := append([]cuda.DevicePtr(nil), f.foreign...)
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
			func() error { return c.AllGather(ctx, f.ptrs(bufB), upper(f), 600, U32, f.streams) },
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
	// Count the calls of a clean run, and those before Sync's first
	// poll. It must succeed, however loaded the machine: its kernels get
	// a timeout no scheduling delay reaches (Sync returns as soon as they
	// are done).
	var calls, fixed int
	{
		f := newFixture(t, cfg)
		n0 := 0
		errs := scenario(f, time.Minute, func() { n0 = len(f.node.Calls()) })
		require.NoError(t, errors.Join(errs...), "the clean run")
		log := f.node.Calls()[n0:]
		calls = len(log)
		fixed = calls
		for i, c := range log {
			if c.Op == "cuStreamQuery" {
				fixed = i
				break
			}
		}
	}
	require.Greater(t, fixed, 20)
	// The faulted runs keep a short kernel timeout: a fault between two
	// ranks' launches leaves the launched rank's kernel waiting for the
	// other until it times out (the fixture's cleanup drains the streams).
	fired, missed := 0, 0
	for nth := 1; nth <= calls; nth++ {
		f := newFixture(t, cfg)
		n0 := 0
		errs := scenario(f, 50*time.Millisecond, func() {
			n0 = len(f.node.Calls())
			f.node.FailNth(nth, cuda.ErrorUnknown)
		})
		f.node.ClearFaults()
		var injected *sim.Call
		for _, c := range f.node.Calls()[n0:] {
			if c.Injected {
				injected = &c
				break
			}
		}
		switch {
		case injected == nil && nth <= fixed:
			t.Errorf("the fault at call %d did not fire: every run makes at least %d calls", nth, fixed)
		case injected == nil:
			missed++ // this run ended before its nth call
		case len(errs) == 0:
			fired++
			t.Errorf("the fault at call %d (%v) fired, and every step succeeded", nth, injected)
		default:
			fired++
		}
		f.c = nil // scenario closed it (or New failed)
		f.close()
	}
	t.Logf("%d driver calls in the clean run (%d before Sync polls): %d faults fired and surfaced as errors, %d were past their run's last call",
		calls, fixed, fired, missed)
}
