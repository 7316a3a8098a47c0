package collectives

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team"
)

// ctxCounter passes every call to the driver it wraps and counts the
// cuStreamGetCtx calls.
type ctxCounter struct {
	cuda.Driver
	n atomic.Int64
}

func (d *ctxCounter) StreamGetCtx(s cuda.Stream) (cuda.Context, error) {
	d.n.Add(1)
	return d.Driver.StreamGetCtx(s)
}

// countStreamCtx makes f's Comm talk to the node through a ctxCounter.
func countStreamCtx(tb testing.TB, f *fixture) *ctxCounter {
	d := &ctxCounter{Driver: f.c.d}
	real := f.c.d
	f.c.d = d
	tb.Cleanup(func() { f.c.d = real })
	return d
}

// newStreamOn creates a non-blocking stream in context ctx (drained and
// destroyed at cleanup).
func newStreamOn(tb testing.TB, node *sim.Node, ctx cuda.Context) cuda.Stream {
	tb.Helper()
	var s cuda.Stream
	require.NoError(tb, onContext(node, ctx, func() (err error) {
		s, err = node.StreamCreate(cuda.StreamNonBlocking)
		return err
	}))
	tb.Cleanup(func() {
		assert.NoError(tb, onContext(node, ctx, func() error {
			if err := node.StreamSynchronize(s); err != nil {
				return err
			}
			return node.StreamDestroy(s)
		}))
	})
	return s
}

// TestStreamOfAnotherDevice: a stream of another rank's device given for a
// rank is an argument error of every call, before anything is enqueued
// anywhere, and the team stays usable.
func TestStreamOfAnotherDevice(t *testing.T) {
	const ranks = 3
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 4 << 20, foreign: 64 << 10, opts: []Option{WithStageBytes(16 << 10)}})
	// Created after the fixture, so destroyed before its cleanup.
	other1 := newStreamOn(t, f.node, f.t.Context(1))
	a, b := f.alloc(64<<10), f.alloc(64<<10)
	send, recv := f.ptrs(a), f.ptrs(b)
	foreign := append([]cuda.DevicePtr(nil), f.foreign...)
	ctx := context.Background()
	wrong := append([]cuda.Stream(nil), f.streams...)
	wrong[0] = other1 // device 1's, given for rank 0
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"AllReduce", func() error { return f.c.AllReduce(ctx, send, recv, 4000, F32, Sum, wrong) }},
		{"AllReduce", func() error { return f.c.AllReduce(ctx, send, recv, 100, F32, Sum, wrong) }}, // LL
		{"AllReduce", func() error { return f.c.AllReduce(ctx, foreign, foreign, 10000, U32, Max, wrong) }},
		{"Broadcast", func() error { return f.c.Broadcast(ctx, send, recv, 4000, U32, 1, wrong) }},
		{"Broadcast", func() error { return f.c.Broadcast(ctx, foreign, foreign, 4000, U32, 0, wrong) }},
		{"Barrier", func() error { return f.c.Barrier(ctx, wrong) }},
		{"Sync", func() error { return f.c.Sync(ctx, wrong) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.node.ResetCalls()
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			var ae *ArgError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, tc.name, ae.Op)
			assert.Equal(t, "streams[0]", ae.Arg)
			assert.Equal(t, 0, ae.Rank)
			msg := err.Error()
			for _, w := range []string{
				tc.name + ": streams[0] (rank 0)",
				fmt.Sprintf("stream %#x belongs to device 1 (context %#x, rank 1's)", uint64(other1), uint64(f.t.Context(1))),
				fmt.Sprintf("rank 0 runs on device 0 (context %#x)", uint64(f.t.Context(0))),
			} {
				assert.Contains(t, msg, w)
			}
			for _, c := range f.node.Calls() {
				switch c.Op {
				case "cuStreamGetCtx":
				default:
					t.Errorf("driver call %v despite the error (only cuStreamGetCtx is allowed)", c)
				}
			}
			assert.NoError(t, f.c.Err(), "the team must not be broken by an argument error")
		})
	}
	// The same streams, right, work.
	rng := newRNG(t)
	runAllReduce(t, f, f.c, rng, send, recv, F32, Sum, 4000)
	runAllReduce(t, f, f.c, rng, foreign, foreign, U32, Max, 10000)
	runBroadcast(t, f, f.c, rng, foreign, foreign, U32, 4000, 2)

	// Not a stream (any more).
	var gone cuda.Stream
	require.NoError(t, onContext(f.node, f.t.Context(2), func() (err error) {
		if gone, err = f.node.StreamCreate(cuda.StreamNonBlocking); err != nil {
			return err
		}
		return f.node.StreamDestroy(gone)
	}))
	bad := append([]cuda.Stream(nil), f.streams...)
	bad[2] = gone
	f.node.ResetCalls()
	err := f.c.Barrier(ctx, bad)
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorIs(t, err, cuda.ErrInvalidHandle)
	assert.Contains(t, err.Error(), fmt.Sprintf("Barrier: streams[2] (rank 2): stream %#x: cannot tell which context it belongs to", uint64(gone)))
	assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"))
	assert.NoError(t, f.c.Err())
}

// TestStreamCheckCache: each rank's stream is asked about (cuStreamGetCtx)
// once; calls with the same streams ask nothing; a changed stream is asked
// about again, and a wrong one every time it is given.
func TestStreamCheckCache(t *testing.T) {
	const ranks = 3
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Multicast, dataBytes: 4 << 20, opts: []Option{WithStageBytes(64 << 10)}})
	alt1 := newStreamOn(t, f.node, f.t.Context(1))
	alt2 := newStreamOn(t, f.node, f.t.Context(2))
	d := countStreamCtx(t, f)
	a := f.alloc(64 << 10)
	p := f.ptrs(a)
	ctx := context.Background()
	with := func(l int, s cuda.Stream) []cuda.Stream {
		st := append([]cuda.Stream(nil), f.streams...)
		st[l] = s
		return st
	}
	steps := []struct {
		name string
		call func() error
		asks int64 // cuStreamGetCtx calls it makes
		fail bool
	}{
		{"first all-reduce", func() error { return f.c.AllReduce(ctx, p, p, 1000, F32, Sum, f.streams) }, ranks, false},
		{"same streams", func() error { return f.c.AllReduce(ctx, p, p, 1000, F32, Sum, f.streams) }, 0, false},
		{"broadcast, same streams", func() error { return f.c.Broadcast(ctx, p, p, 1000, U32, 2, f.streams) }, 0, false},
		{"barrier, same streams", func() error { return f.c.Barrier(ctx, f.streams) }, 0, false},
		{"sync, same streams", func() error { return f.c.Sync(ctx, f.streams) }, 0, false},
		{"rank 1's stream changed", func() error { return f.c.Barrier(ctx, with(1, alt1)) }, 1, false},
		{"the changed one again", func() error { return f.c.Barrier(ctx, with(1, alt1)) }, 0, false},
		{"back to the first", func() error { return f.c.Sync(ctx, f.streams) }, 1, false},
		{"rank 2 given rank 1's device", func() error { return f.c.Barrier(ctx, with(2, alt1)) }, 1, true},
		{"again: asked again", func() error { return f.c.Barrier(ctx, with(2, alt1)) }, 1, true},
		{"rank 2's own stream: still cached", func() error { return f.c.Barrier(ctx, f.streams) }, 0, false},
		{"rank 2's other stream", func() error { return f.c.Barrier(ctx, with(2, alt2)) }, 1, false},
		{"default streams", func() error { return f.c.Barrier(ctx, []cuda.Stream{0, 1, 2}) }, 0, false},
		{"sync all", func() error {
			return errors.Join(f.c.Sync(ctx, with(2, alt2)), f.c.Sync(ctx, []cuda.Stream{0, 1, 2}), f.c.Sync(ctx, f.streams))
		}, 1, false},
	}
	for _, st := range steps {
		n0 := d.n.Load()
		err := st.call()
		if st.fail {
			assert.ErrorIs(t, err, ErrInvalid, st.name)
		} else {
			assert.NoError(t, err, st.name)
		}
		assert.Equal(t, st.asks, d.n.Load()-n0, "%s: cuStreamGetCtx calls", st.name)
		// The steps change streams: a Comm's calls on a rank must run
		// one after another, which the caller orders across streams.
		require.NoError(t, f.t.Run(team.JobFunc(func(int) error { return f.node.CtxSynchronize() })))
	}
	assert.NoError(t, f.c.Err())
}

// TestDefaultStreams: 0 (the legacy default stream in the runtime's and
// the driver's sense), 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD)
// mean the default stream of the context current where they are used:
// each rank's work goes to its own device's, they may repeat across ranks,
// and the collectives are right on them.
func TestDefaultStreams(t *testing.T) {
	const ranks = 3
	// LL up to 4 KiB: the all-reduces below go one-shot on team buffers
	// and in chunks through the staging areas on the others.
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 4 << 20, foreign: 64 << 10, opts: []Option{WithStageBytes(16 << 10), WithLLMax(4096)}})
	a, b := f.alloc(64<<10), f.alloc(64<<10)
	rng := newRNG(t)
	for _, st := range [][]cuda.Stream{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {0, 1, 2}} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			r := &streamRig{fixture: f, streams: st}
			f.node.ResetCalls()
			runAllReduce(t, r, f.c, rng, f.ptrs(a), f.ptrs(b), F32, Sum, 5000)
			runAllReduce(t, r, f.c, rng, f.foreign, f.foreign, S32, Sum, 6000)
			runBroadcast(t, r, f.c, rng, f.ptrs(a), f.ptrs(b), U64, 3000, 1)
			launches := f.node.CallsOf("cuLaunchKernelEx")
			require.NotEmpty(t, launches)
			perDev := make([]int, ranks)
			for _, c := range launches {
				require.True(t, c.Device >= 0 && c.Device < ranks, "%v", c)
				perDev[c.Device]++
			}
			for d := range ranks {
				assert.Equal(t, len(launches)/ranks, perDev[d], "launches on device %d", d)
			}
			assert.Empty(t, f.node.CallsOf("cuStreamGetCtx"), "default streams are not asked about")
		})
	}
}

// streamRig is a fixture whose collectives run on other streams.
type streamRig struct {
	*fixture
	streams []cuda.Stream
}

func (r *streamRig) streamList() []cuda.Stream { return r.streams }

// TestStreamOfAnotherTeam: the error names the device of a stream whose
// context is another team's, and says so when the context is of no team
// this process runs (nlocal 1, as under MPI: the Comm knows only its own
// rank's context).
func TestStreamOfAnotherTeam(t *testing.T) {
	node := newSimNode(sim.Config{Devices: 3})
	ctx := context.Background()
	newTeam := func(devs ...cuda.Device) (*team.Team, *Comm) {
		tm, err := team.New(ctx, node, devs, team.WithTransport(team.Unicast), team.WithWorkspaceSize(1<<20), team.WithLogger(quietLogger()))
		require.NoError(t, err)
		c, err := New(tm, WithStageBytes(64<<10))
		require.NoError(t, err)
		return tm, c
	}
	ta, ca := newTeam(0)
	ctx2, err := node.PrimaryCtxRetain(2)
	require.NoError(t, err)
	var s2 cuda.Stream
	require.NoError(t, onContext(node, ctx2, func() (err error) {
		s2, err = node.StreamCreate(cuda.StreamNonBlocking)
		return err
	}))
	err = ca.Barrier(ctx, []cuda.Stream{s2})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), fmt.Sprintf("Barrier: streams[0] (rank 0): stream %#x belongs to context %#x, not the context of any device this process's teams run on; rank 0 runs on device 0", uint64(s2), uint64(ctx2)))

	tb, cb := newTeam(2)
	err = ca.Barrier(ctx, []cuda.Stream{s2})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), fmt.Sprintf("stream %#x belongs to device 2 (context %#x); rank 0 runs on device 0", uint64(s2), uint64(ctx2)))
	// Right: device 2's stream for the team on device 2.
	require.NoError(t, cb.Barrier(ctx, []cuda.Stream{s2}))
	require.NoError(t, cb.Sync(ctx, []cuda.Stream{s2}))
	require.NoError(t, ca.Err())

	require.NoError(t, onContext(node, ctx2, func() error { return node.StreamDestroy(s2) }))
	require.NoError(t, node.PrimaryCtxRelease(2))
	require.NoError(t, ca.Close())
	require.NoError(t, cb.Close())
	require.NoError(t, ta.Close())
	require.NoError(t, tb.Close())
	require.NoError(t, node.CheckNoLeaks())
	require.NoError(t, node.Close())
}

// TestDefaultStreamOnSharedDevice: where local ranks share a device a
// default stream (0, 1 or 2) would serialize their spinning kernels:
// refused before any launch, naming the ranks; streams of their own run,
// and a default stream on a device of one rank.
func TestDefaultStreamOnSharedDevice(t *testing.T) {
	f, _ := newSharedFixture(t, sharedConfig{gpus: 2, devs: []cuda.Device{0, 1, 0}})
	a, b := f.alloc(4096), f.alloc(4096)
	for _, st := range [][]cuda.Stream{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {f.streams[0], f.streams[1], 0}, {1, f.streams[1], f.streams[2]}, {f.streams[0], 2, 2}} {
		f.node.ResetCalls()
		err := f.c.AllReduce(context.Background(), f.ptrs(a), f.ptrs(b), 1024, F32, Sum, st)
		require.ErrorIs(t, err, ErrInvalid, "%v", st)
		var ae *ArgError
		require.ErrorAs(t, err, &ae)
		assert.Contains(t, err.Error(), "default stream")
		assert.Contains(t, err.Error(), "ranks ")
		assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), "%v", st)
		require.NoError(t, f.t.Err())
	}
	rng := newRNG(t)
	// Rank 1 is alone on device 1: the legacy stream is fine there.
	for _, st := range [][]cuda.Stream{f.streams, {f.streams[0], 0, f.streams[2]}, {f.streams[0], 2, f.streams[2]}} {
		r := &streamRig{fixture: f, streams: st}
		runAllReduce(t, r, f.c, rng, f.ptrs(a), f.ptrs(b), F32, Sum, 1000)
	}
}
