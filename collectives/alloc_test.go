package collectives

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/osthread"
	"github.com/nvls-go/nvls/team"
)

// noopDriver is the driver the launch path sees in the allocation tests
// and the launch benchmark: it implements only what the launch path and
// Sync call (launches, async copies, pointer attributes, the streams'
// contexts, stream queries) and does nothing; any other call panics on the
// nil embedded interface.
type noopDriver struct {
	cuda.Driver
	launches, copies, attrs, streamCtx atomic.Int64
	// notReady: StreamQuery reports busy this many more times (sync_test.go).
	notReady atomic.Int64
	// foreign are the foreign test buffers, indexed by local rank, on
	// devices devs (nil: rank l's on device l).
	foreign []cuda.DevicePtr
	devs    []cuda.Device
	// streams and ctxs are the fixture's streams and their contexts.
	streams []cuda.Stream
	ctxs    []cuda.Context
}

func (d *noopDriver) StreamGetCtx(s cuda.Stream) (cuda.Context, error) {
	d.streamCtx.Add(1)
	for l, t := range d.streams {
		if t == s {
			return d.ctxs[l], nil
		}
	}
	return 0, cuda.ErrInvalidValue
}

func (d *noopDriver) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	if f == 0 || params == nil || paramSize != kabi.ParamsSize {
		panic("bad launch")
	}
	d.launches.Add(1)
	return nil
}

func (d *noopDriver) MemcpyDtoDAsync(dst, src cuda.DevicePtr, n uint64, s cuda.Stream) error {
	d.copies.Add(1)
	return nil
}

func (d *noopDriver) EventRecord(cuda.Event, cuda.Stream) error { return nil }

func (d *noopDriver) StreamWaitEvent(cuda.Stream, cuda.Event) error { return nil }

func (d *noopDriver) PointerGetAttribute(attr cuda.PointerAttribute, p cuda.DevicePtr) (uint64, error) {
	d.attrs.Add(1)
	for l, base := range d.foreign {
		if p >= base && p < base+1<<20 {
			switch attr {
			case cuda.PointerAttrDeviceOrdinal:
				if d.devs != nil {
					return uint64(d.devs[l]), nil
				}
				return uint64(l), nil
			case cuda.PointerAttrRangeStart:
				return uint64(base), nil
			case cuda.PointerAttrRangeSize:
				return 1 << 20, nil
			}
		}
	}
	return 0, cuda.ErrInvalidValue
}

// noopFixture is a sim team and Comm whose launch path talks to a
// noopDriver (restored before Close).
func noopFixture(tb testing.TB, ranks int) (*fixture, *noopDriver) {
	f := newFixture(tb, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 16 << 20, foreign: 1 << 20, opts: noopOpts()})
	return f, noopComm(tb, f, nil)
}

// noopSharedFixture is noopFixture with ranks ranks on one GPU: the
// collectives launch from the calling goroutine (RunHere), whose own
// driver calls (the calling thread's current context) go to a ctxCache
// (the simulator's calls allocate).
func noopSharedFixture(tb testing.TB, ranks int) (*fixture, *noopDriver) {
	devs := make([]cuda.Device, ranks)
	f, _ := newSharedFixture(tb, sharedConfig{gpus: 1, devs: devs, dataBytes: 16 << 20, foreign: 1 << 20, opts: noopOpts(),
		wrap: func(d cuda.Driver) cuda.Driver { return &ctxCache{Driver: d, cur: map[int]cuda.Context{}} }})
	require.True(tb, f.c.oneCtx)
	return f, noopComm(tb, f, devs)
}

func noopOpts() []Option {
	return []Option{WithLLMax(2048), WithLLTwoBcastMax(64 << 10), WithStageBytes(256 << 10)}
}

func noopComm(tb testing.TB, f *fixture, devs []cuda.Device) *noopDriver {
	d := &noopDriver{foreign: f.foreign, devs: devs, streams: f.streams}
	for l := range f.n {
		d.ctxs = append(d.ctxs, f.t.Context(l))
	}
	real := f.c.d
	f.c.d = d
	tb.Cleanup(func() { f.c.d = real })
	return d
}

// ctxCache passes every call to the driver it wraps but answers
// cuCtxGetCurrent from what cuCtxSetCurrent set on the thread, without a
// call (the simulator's calls allocate; the driver's do not).
type ctxCache struct {
	cuda.Driver
	mu  sync.Mutex
	cur map[int]cuda.Context
}

func (d *ctxCache) CtxSetCurrent(c cuda.Context) error {
	if err := d.Driver.CtxSetCurrent(c); err != nil {
		return err
	}
	d.mu.Lock()
	d.cur[osthread.ID()] = c
	d.mu.Unlock()
	return nil
}

func (d *ctxCache) CtxGetCurrent() (cuda.Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur[osthread.ID()], nil
}

// TestLaunchAllocatesNothing: the launch path of every collective, on
// symmetric buffers and through the staging areas, allocates nothing per
// call, and each call launches on every rank: on the workers (4 GPUs, or
// 4 ranks on one GPU with LaunchWorkers) and from the calling goroutine (4
// ranks on one GPU). The streams, checked once, are not asked about again
// (no cuStreamGetCtx per call).
func TestLaunchAllocatesNothing(t *testing.T) {
	for _, way := range []string{"4 GPUs", "1 GPU, caller", "1 GPU, LaunchWorkers"} {
		t.Run(way, func(t *testing.T) { launchAllocs(t, way) })
	}
}

func launchAllocs(t *testing.T, way string) {
	const ranks = 4
	var f *fixture
	var d *noopDriver
	if way == "4 GPUs" {
		f, d = noopFixture(t, ranks)
	} else {
		f, d = noopSharedFixture(t, ranks)
		f.c.via = map[bool]Launch{true: LaunchWorkers, false: LaunchCaller}[way == "1 GPU, LaunchWorkers"]
	}
	a, b := f.alloc(1<<20), f.alloc(1<<20)
	send, recv := f.ptrs(a), f.ptrs(b)
	foreign := append([]cuda.DevicePtr(nil), f.foreign...)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		launches int64 // per call, all ranks
		copies   int64
		call     func() error
	}{
		{"all-reduce LL, cuMemAlloc memory", ranks, 0, func() error { return f.c.AllReduce(ctx, foreign, foreign, 500, F32, Sum, f.streams) }},
		{"all-reduce LL, team buffers", ranks, 0, func() error { return f.c.AllReduce(ctx, send, recv, 2048, U32, Max, f.streams) }},
		{"all-reduce zero-copy", ranks, 0, func() error { return f.c.AllReduce(ctx, send, recv, 1000, F32, Sum, f.streams) }},
		{"all-reduce two-shot", ranks, 0, func() error { return f.c.AllReduce(ctx, send, recv, 200000, BF16, Max, f.streams) }},
		{"all-reduce in place, one-shot with the stage", ranks, 0, func() error { return f.c.AllReduce(ctx, send, send, 4096, U64, Min, f.streams) }},
		{"all-reduce copy-in, 3 chunks", 3 * ranks, 6 * ranks, func() error {
			return f.c.AllReduce(ctx, foreign, foreign, (2*256<<10+4096)/2, F16, Sum, f.streams)
		}},
		{"all-reduce copy-in", ranks, 2 * ranks, func() error { return f.c.AllReduce(ctx, foreign, foreign, 1000, S32, Sum, f.streams) }},
		{"broadcast", ranks, 0, func() error { return f.c.Broadcast(ctx, send, recv, 1000, U32, 2, f.streams) }},
		{"broadcast LL in two steps, cuMemAlloc memory", ranks, 0, func() error { return f.c.Broadcast(ctx, foreign, foreign, 1000, U32, 1, f.streams) }},
		{"broadcast copy-in, 2 chunks", 2 * ranks, 2 * (ranks + 1), func() error {
			return f.c.Broadcast(ctx, foreign, foreign, 100000, U32, 1, f.streams) // above noopOpts's two-step limit
		}},
		{"barrier", ranks, 0, func() error { return f.c.Barrier(ctx, f.streams) }},
		{"reduce-scatter LL", ranks, 0, func() error { return f.c.ReduceScatter(ctx, foreign, recv, 100, F32, Sum, f.streams) }},
		{"reduce-scatter zero-copy", ranks, 0, func() error { return f.c.ReduceScatter(ctx, send, foreign, 1000, F32, Sum, f.streams) }},
		{"reduce-scatter copy-in, 2 chunks", 2 * ranks, 2 * ranks * ranks, func() error {
			return f.c.ReduceScatter(ctx, foreign, recv, 20000, F32, Sum, f.streams)
		}},
		{"all-gather LL", ranks, 0, func() error { return f.c.AllGather(ctx, foreign, recv, 100, U32, f.streams) }},
		{"all-gather zero-copy", ranks, 0, func() error { return f.c.AllGather(ctx, foreign, recv, 1000, U32, f.streams) }},
		{"all-gather copy-out, 2 chunks", 2 * ranks, 2 * ranks * ranks, func() error {
			return f.c.AllGather(ctx, send, foreign, 20000, F32, f.streams)
		}},
		{"reduce LL", ranks, 0, func() error { return f.c.Reduce(ctx, send, recv, 100, F32, Sum, 1, f.streams) }},
		{"reduce one-shot zero-copy", ranks, 0, func() error { return f.c.Reduce(ctx, send, foreign, 4096, U32, Max, 1, f.streams) }},
		{"reduce two-shot, 2 chunks through the root's stage", 2 * ranks, 2, func() error {
			return f.c.Reduce(ctx, send, foreign, 300000, BF16, Sum, 3, f.streams)
		}},
		{"reduce two-shot zero-copy", ranks, 0, func() error { return f.c.Reduce(ctx, send, recv, 300000, BF16, Sum, 3, f.streams) }},
		{"reduce two-shot copy-in, 3 chunks into the root's recv", 3 * ranks, 3 * ranks, func() error {
			return f.c.Reduce(ctx, foreign, recv, 300000, BF16, Sum, 3, f.streams)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.call())
			require.Equal(t, way == "1 GPU, caller", onCallerFor(f.c, f.streams), "launched from the caller")
			l0, c0, s0 := d.launches.Load(), d.copies.Load(), d.streamCtx.Load()
			allocs := testing.AllocsPerRun(100, func() {
				if err := tc.call(); err != nil {
					panic(err)
				}
			})
			assert.Zero(t, allocs, "allocations per call")
			// AllocsPerRun makes one more call to warm up.
			assert.Equal(t, tc.launches*101, d.launches.Load()-l0, "launches")
			assert.Equal(t, tc.copies*101, d.copies.Load()-c0, "copies")
			assert.Equal(t, s0, d.streamCtx.Load(), "cuStreamGetCtx calls for streams already checked")
		})
	}
	assert.Equal(t, int64(ranks), d.streamCtx.Load(), "cuStreamGetCtx calls: one per rank's stream, on the first call")
}

// TestCopyEngineAllocatesNothing: the copy-engine paths of a team of 2
// (the all-gather; the out-of-place all-reduce and reduce, whose pieces
// go to a range of peers) allocate nothing per call either, and make
// their copies: the all-gather one a peer and the own one a rank; the
// all-reduce a piece and a flag a piece (8 pieces, none empty at this
// size) and the all-gather half's one, a rank; the reduce the peer's
// pieces and flags.
func TestCopyEngineAllocatesNothing(t *testing.T) {
	const ranks = 2
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 16 << 20, opts: append(noopOpts(), WithCopyEngineMin(64<<10))})
	d := noopComm(t, f, nil)
	a, b := f.alloc(1<<20), f.alloc(1<<20)
	send, recv := f.ptrs(a), f.ptrs(b)
	ctx := context.Background()
	pieces := int64(kabi.CEPieces)
	require.Equal(t, kabi.CEPieces, nonEmptyPieces(1<<15, F32), "every piece of a 128 KiB slice holds data")
	for _, tc := range []struct {
		name   string
		copies int64 // per call, all ranks
		call   func() error
	}{
		{"all-gather", ranks * ranks, func() error { return f.c.AllGather(ctx, send, recv, 1<<15, U32, f.streams) }},
		{"all-reduce out of place", ranks * (2*pieces + 1), func() error { return f.c.AllReduce(ctx, send, recv, 1<<16, F32, Sum, f.streams) }},
		{"reduce", 2 * pieces, func() error { return f.c.Reduce(ctx, send, recv, 1<<16, F32, Sum, 1, f.streams) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.call())
			c0 := d.copies.Load()
			allocs := testing.AllocsPerRun(100, func() {
				if err := tc.call(); err != nil {
					panic(err)
				}
			})
			assert.Zero(t, allocs, "allocations per call")
			assert.Equal(t, tc.copies*101, d.copies.Load()-c0, "copies")
		})
	}
}

// onCallerFor is onCaller for a call on streams.
func onCallerFor(c *Comm, streams []cuda.Stream) bool {
	cl := c.getCall("onCallerFor")
	defer c.putCall(cl)
	for l := range cl.parts {
		cl.parts[l].stream = streams[l]
	}
	return c.onCaller(cl)
}

// BenchmarkLaunch is the host cost of one collective with a driver that
// does nothing: the dispatch (to the per-device workers, or none from the
// caller), the checks and the params. ns/op is the library's own launch
// overhead; "team.Run-noop" is the dispatch to the workers alone (a job
// that does nothing), for comparison. The ways: 4 ranks on 4 GPUs (the
// workers), 4 ranks and 1 rank on one GPU from the caller (RunHere) and
// on the workers (LaunchWorkers). It needs no GPU: run it on the machine
// whose numbers count.
func BenchmarkLaunch(b *testing.B) {
	for _, way := range []struct {
		name      string
		ranks     int
		shared    bool
		onWorkers bool
	}{
		{"4gpus", 4, false, false},
		{"4ranks-1gpu-caller", 4, true, false},
		{"4ranks-1gpu-workers", 4, true, true},
		{"1rank-caller", 1, true, false},
		{"1rank-workers", 1, true, true},
	} {
		// A fixture per way, closed before the next (the simulated nodes'
		// addresses overlap: a live one's workspace would look like
		// another team's to the next).
		b.Run(way.name, func(b *testing.B) { benchLaunch(b, way.ranks, way.shared, way.onWorkers) })
	}
}

func benchLaunch(b *testing.B, ranks int, shared, onWorkers bool) {
	newF := noopFixture
	if shared {
		newF = noopSharedFixture
	}
	f, _ := newF(b, ranks)
	f.c.via = map[bool]Launch{true: LaunchWorkers, false: LaunchCaller}[onWorkers]
	a, r := f.alloc(1<<20), f.alloc(1<<20)
	send, recv := f.ptrs(a), f.ptrs(r)
	foreign := append([]cuda.DevicePtr(nil), f.foreign...)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		call func() error
	}{
		{"allreduce-8B", func() error { return f.c.AllReduce(ctx, send, recv, 2, F32, Sum, f.streams) }},
		{"allreduce-1MiB", func() error { return f.c.AllReduce(ctx, send, recv, 1<<18, F32, Sum, f.streams) }},
		{"allreduce-copyin-8B", func() error { return f.c.AllReduce(ctx, foreign, foreign, 2, F32, Sum, f.streams) }},
		{"broadcast-8B", func() error { return f.c.Broadcast(ctx, send, recv, 2, F32, 0, f.streams) }},
		{"barrier", func() error { return f.c.Barrier(ctx, f.streams) }},
		{"sync-idle", func() error { return f.c.Sync(ctx, f.streams) }},
		{"team.Run-noop", func() error { return f.t.Run(team.JobFunc(nopJob)) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func nopJob(int) error { return nil }

// graphLaunchNoop is the simulator with a graph launch that does nothing
// (the simulator's own calls allocate; the driver's do not).
type graphLaunchNoop struct {
	cuda.Driver
	launches atomic.Int64
}

func (d *graphLaunchNoop) GraphLaunch(cuda.GraphExec, cuda.Stream) error {
	d.launches.Add(1)
	return nil
}

// TestGraphLaunchAllocatesNothing: a replay (Graph.Launch) allocates
// nothing, and launches every local rank's graph once.
func TestGraphLaunchAllocatesNothing(t *testing.T) {
	var d *graphLaunchNoop
	f, _ := newSharedFixture(t, sharedConfig{gpus: 2, devs: []cuda.Device{0, 1}, wrap: func(in cuda.Driver) cuda.Driver {
		d = &graphLaunchNoop{Driver: in}
		return d
	}})
	s, err := WrapStreams(f.t, f.streams)
	require.NoError(t, err)
	a := f.alloc(4096)
	ptrs := f.ptrs(a)
	g, err := s.Capture(func() error { return f.c.AllReduce(context.Background(), ptrs, ptrs, 256, F32, Sum, f.streams) })
	require.NoError(t, err)
	defer func() { assert.NoError(t, g.Close()) }()
	require.NoError(t, g.Launch(s))
	n0 := d.launches.Load()
	allocs := testing.AllocsPerRun(100, func() {
		if err := g.Launch(s); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "allocations per replay")
	assert.Equal(t, int64(2*101), d.launches.Load()-n0, "a launch a rank a replay")
}
