package collectives

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// StreamQuery of the noopDriver (alloc_test.go): busy for the next
// notReady polls, then idle.
func (d *noopDriver) StreamQuery(cuda.Stream) error {
	if d.notReady.Add(-1) >= 0 {
		return cuda.ErrNotReady
	}
	return nil
}

// TestSyncAllocatesNothing: Sync's success path (streams polled a few
// times while busy, then idle; status words read) allocates nothing, with
// and without a deadline on its context, whether it polls from the
// calling goroutine without a context (4 GPUs, or 4 ranks on one), or
// with one current (noDirect): on the workers (4 GPUs) or on the calling
// goroutine (4 ranks on one GPU, RunHere).
func TestSyncAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates in Sync's poll (make race); make test counts")
	}
	const ranks = 4
	withDeadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, way := range []struct {
		name             string
		shared, noDirect bool
	}{{"4 GPUs", false, false}, {"4 GPUs, workers", false, true}, {"1 GPU", true, false}, {"1 GPU, caller", true, true}} {
		t.Run(way.name, func(t *testing.T) {
			newF := noopFixture
			if way.shared {
				newF = noopSharedFixture
			}
			f, d := newF(t, ranks)
			f.c.noDirect = way.noDirect
			for name, ctx := range map[string]context.Context{"background": context.Background(), "deadline": withDeadline} {
				allocs := testing.AllocsPerRun(100, func() {
					d.notReady.Store(3 * ranks)
					if err := f.c.Sync(ctx, f.streams); err != nil {
						panic(err)
					}
				})
				assert.Zero(t, allocs, "allocations per Sync (%s)", name)
			}
		})
	}
}

// queryRecorder passes every call to the driver it wraps and records, for
// each cuStreamQuery, the context current on the calling thread; with
// needCtx it fails the query as a driver that wants a current context
// would.
type queryRecorder struct {
	cuda.Driver
	needCtx bool
	mu      sync.Mutex
	ctxs    []cuda.Context
}

func (d *queryRecorder) StreamQuery(s cuda.Stream) error {
	cur, err := d.Driver.CtxGetCurrent()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.ctxs = append(d.ctxs, cur)
	d.mu.Unlock()
	if d.needCtx && cur == 0 {
		return &cuda.Error{Op: "cuStreamQuery", Code: cuda.ErrorInvalidContext}
	}
	return d.Driver.StreamQuery(s)
}

func (d *queryRecorder) take() []cuda.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.ctxs
	d.ctxs = nil
	return c
}

func recordQueries(tb testing.TB, f *fixture, needCtx bool) *queryRecorder {
	d := &queryRecorder{Driver: f.c.d, needCtx: needCtx}
	real := f.c.d
	f.c.d = d
	tb.Cleanup(func() { f.c.d = real })
	return d
}

// TestSyncPollsWhereNeeded: Sync polls created streams from the calling
// goroutine (no context current: no dispatch to the workers), and the
// default streams on the ranks' workers (each rank's context current, as
// cuStreamQuery(0) needs). A driver that refuses cuStreamQuery without a
// current context sends Sync to the workers from then on.
func TestSyncPollsWhereNeeded(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20})
	ctx := context.Background()
	d := recordQueries(t, f, false)
	require.NoError(t, f.c.Barrier(ctx, f.streams))
	require.NoError(t, f.c.Sync(ctx, f.streams))
	got := d.take()
	require.NotEmpty(t, got)
	for _, c := range got {
		assert.Zero(t, c, "a created stream polled on a worker")
	}

	def := []cuda.Stream{0, 1, 0}
	require.NoError(t, f.c.Barrier(ctx, def))
	require.NoError(t, f.c.Sync(ctx, def))
	seen := map[cuda.Context]bool{}
	for _, c := range d.take() {
		seen[c] = true
	}
	want := map[cuda.Context]bool{}
	for l := range 3 {
		want[f.t.Context(l)] = true
	}
	assert.Equal(t, want, seen, "the default streams are polled with their rank's context current")

	d.needCtx = true
	require.NoError(t, f.c.Barrier(ctx, f.streams))
	require.NoError(t, f.c.Sync(ctx, f.streams))
	assert.True(t, f.c.noDirect)
	d.take()
	require.NoError(t, f.c.Barrier(ctx, f.streams))
	require.NoError(t, f.c.Sync(ctx, f.streams))
	for _, c := range d.take() {
		assert.NotZero(t, c, "polled without a context after the driver asked for one")
	}
}

// TestSyncDeadlineMessage: a busy stream by the deadline reads "the stream
// of rank 1" (one rank), "the streams of ranks 0, 2" (several), and the
// wait in significant digits, also when the deadline had passed before
// Sync began (issue 15: "the streams of ranks 1 still had work after 0s").
func TestSyncDeadlineMessage(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20})
	open := f.gate(1)
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := f.c.Sync(past, f.streams)
	var de *DeadlineError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, []int{1}, de.Ranks)
	assert.Contains(t, err.Error(), "collectives: sync: the stream of rank 1 still had work after ")
	assert.NotContains(t, err.Error(), "after 0s")
	assert.Contains(t, err.Error(), roundWait(de.Waited).String())
	open()

	open0, open2 := f.gate(0), f.gate(2)
	soon, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	err = f.c.Sync(soon, f.streams)
	require.ErrorAs(t, err, &de)
	assert.Regexp(t, `the streams of ranks 0, 2 still had work after \d+(\.\d+)?ms `, err.Error())
	open0()
	open2()
	f.sync()
}

func TestRoundWait(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {999, "999ns"}, {1234, "1.23µs"}, {152_345, "152µs"}, {1_234_567, "1.23ms"},
		{601_048_643, "601ms"}, {3_000_577_616, "3s"}, {12_345_678_901, "12.3s"}, {90 * time.Minute, "1h30m0s"},
	} {
		assert.Equal(t, c.want, roundWait(c.d).String(), "%d", c.d)
	}
}

// TestSyncErrorsKept: what Sync reported before still comes back the same
// way: a kernel fault names the rank and its stream; a closed Comm is
// ErrClosed.
func TestSyncErrorsKept(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 8 << 20})
	real := f.c.d
	f.c.d = &failQuery{Driver: real, rank1: f.streams[1]}
	t.Cleanup(func() { f.c.d = real })
	err := f.c.Sync(context.Background(), f.streams)
	require.Error(t, err)
	assert.ErrorIs(t, err, team.ErrBroken)
	assert.ErrorIs(t, err, cuda.ErrIllegalAddress)
	assert.Contains(t, err.Error(), "collectives: rank 1 (device 1): stream ")
	assert.NotContains(t, err.Error(), "reported no timeout", "no kernel timed out")
	require.NoError(t, f.c.Close())
	assert.True(t, errors.Is(f.c.Sync(context.Background(), f.streams), ErrClosed))
}

// failQuery fails cuStreamQuery of one stream as a faulted context would.
type failQuery struct {
	cuda.Driver
	rank1 cuda.Stream
}

func (d *failQuery) StreamQuery(s cuda.Stream) error {
	if s == d.rank1 {
		return &cuda.Error{Op: "cuStreamQuery", Code: cuda.ErrorIllegalAddress}
	}
	return d.Driver.StreamQuery(s)
}
