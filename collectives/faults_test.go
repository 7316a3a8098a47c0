package collectives

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// TestFaultAtEveryCall injects a failure at each driver call of New, an
// all-reduce through the staging areas, a broadcast, Sync and Close in
// turn: every step either succeeds or returns an error (nothing panics or
// hangs), and once everything is closed the node holds nothing (the
// fixture's cleanup checks).
func TestFaultAtEveryCall(t *testing.T) {
	scenario := func(f *fixture, withFault func()) (errs int) {
		bufB := f.alloc(8192)
		foreign := append([]cuda.DevicePtr(nil), f.foreign...)
		ctx := context.Background()
		withFault()
		c, err := New(f.t, WithLLMax(0), WithStageBytes(4096), WithTimeout(50*time.Millisecond))
		if err != nil {
			return 1
		}
		steps := []func() error{
			func() error { return c.AllReduce(ctx, foreign, f.ptrs(bufB), 1500, F32, Sum, f.streams) },
			func() error { return c.Broadcast(ctx, f.ptrs(bufB), foreign, 2000, U32, 1, f.streams) },
			func() error { return c.Sync(ctx, f.streams) },
		}
		for _, s := range steps {
			if s() != nil {
				errs++
			}
		}
		if c.Close() != nil {
			errs++
		}
		return errs
	}
	// Count the calls of a clean run.
	var calls int
	{
		f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 1 << 20, foreign: 16 << 10, opts: []Option{WithLLMax(0), WithStageBytes(4096)}})
		n0 := 0
		require.Zero(t, scenario(f, func() { n0 = f.node.CallCount() }))
		calls = f.node.CallCount() - n0
	}
	require.Greater(t, calls, 20)
	failed := 0
	for nth := 1; nth <= calls; nth++ {
		f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 1 << 20, foreign: 16 << 10, opts: []Option{WithLLMax(0), WithStageBytes(4096)}})
		if scenario(f, func() { f.node.FailNth(nth, cuda.ErrorUnknown) }) > 0 {
			failed++
		}
		f.node.ClearFaults()
		f.c = nil // scenario closed it (or New failed)
		f.close()
	}
	// Sync polls, so runs differ in their number of calls: a fault past
	// a run's last call does not fire.
	t.Logf("%d driver calls, a fault at each: %d runs reported an error", calls, failed)
	require.Greater(t, failed, calls*9/10, "injected faults must surface as errors")
}
