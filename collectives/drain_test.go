package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// drainTimeout is the kernels' timeout of the drain tests: 100 collectives
// that each waited it out would take 30 s.
const drainTimeout = 300 * time.Millisecond

// TestDrainQueuedCollectives: rank 2 never launches; 100 collectives are
// queued on the others, the first a broadcast (or an LL all-reduce, whose
// wait is the LL poll), then all-reduces of every algorithm, barriers,
// reduce-scatters, all-gathers, reduces and broadcasts. The first collective's kernels time out and mark the team
// failed; everything queued behind them returns at entry. Sync, with a
// deadline far away, returns within the timeout plus a second, every
// stream idle, with the first failure's error (every status word names the
// first collective); Close afterwards frees everything at once (the
// fixture's cleanup checks the node for leaks, the status words' host
// memory included).
func TestDrainQueuedCollectives(t *testing.T) {
	for _, tr := range transports() {
		for _, first := range []string{"broadcast", "all-reduce"} {
			t.Run(fmt.Sprintf("%v first %s", tr, first), func(t *testing.T) {
				drainQueued(t, tr, first)
			})
		}
	}
}

func drainQueued(t *testing.T, tr team.Transport, first string) {
	f := newFixture(t, fixtureConfig{ranks: 4, transport: tr, dataBytes: 8 << 20,
		opts: []Option{WithTimeout(drainTimeout), WithLLMax(4096)}})
	b, r := f.alloc(1<<20), f.alloc(1<<20)
	bg := context.Background()
	ops := []func() error{
		func() error { return f.c.AllReduce(bg, f.ptrs(b), f.ptrs(b), 500, F32, Sum, f.streams) },    // LL
		func() error { return f.c.AllReduce(bg, f.ptrs(b), f.ptrs(b), 30000, U32, Max, f.streams) },  // one-shot
		func() error { return f.c.AllReduce(bg, f.ptrs(b), f.ptrs(b), 200000, F32, Sum, f.streams) }, // two-shot
		func() error { return f.c.Barrier(bg, f.streams) },
		func() error { return f.c.ReduceScatter(bg, f.ptrs(b), f.ptrs(r), 1000, F32, Sum, f.streams) },
		func() error { return f.c.AllGather(bg, f.ptrs(b), f.ptrs(r), 20000, U32, f.streams) },
		func() error { return f.c.Reduce(bg, f.ptrs(b), f.ptrs(r), 2000, S32, Max, 1, f.streams) },
		func() error { return f.c.Broadcast(bg, f.ptrs(b), f.ptrs(b), 1000, U64, 1, f.streams) },
	}
	f.c.skip = []bool{false, false, true, false}
	if first == "broadcast" {
		require.NoError(t, ops[len(ops)-1]())
	} else {
		require.NoError(t, ops[0]())
	}
	for i := 1; i < 100; i++ {
		require.NoError(t, ops[i%len(ops)]())
	}
	f.c.skip = nil

	err := syncFar(t, f)
	f.requireIdle()
	requireFirstFailure(t, err, first)
	closeQuickly(t, f)
}

// syncFar is Sync with a deadline far past the drain: it must return
// because the streams drained, within the timeout plus a second.
func syncFar(t *testing.T, f *fixture) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := f.c.Sync(ctx, f.streams)
	took := time.Since(start)
	t.Logf("Sync returned after %v: %v", took, err)
	require.Error(t, err)
	assert.Less(t, took, drainTimeout+time.Second, "the queued work did not drain")
	return err
}

// requireIdle: every stream is idle (what was queued drained).
func (f *fixture) requireIdle() {
	f.tb.Helper()
	for l := range f.n {
		require.NoError(f.tb, onContext(f.node, f.t.Context(l), func() error { return f.node.StreamQuery(f.streams[l]) }), "rank %d's stream", l)
	}
}

// requireFirstFailure: err is the team's, a timeout of op (phase 0), and
// every rank's report is about op: what was queued behind it left no
// code of its own.
func requireFirstFailure(t *testing.T, err error, op string) {
	t.Helper()
	assert.ErrorIs(t, err, team.ErrBroken)
	assert.ErrorIs(t, err, ErrTimeout)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, op, te.Op)
	assert.Equal(t, uint32(0), te.Phase)
	assert.NotEqual(t, 2, te.Rank)
	msg := err.Error()
	assert.Contains(t, msg, "rank 2 reported no timeout")
	for _, other := range []string{"all-reduce", "broadcast", "barrier", "reduce-scatter", "all-gather", "reduce"} {
		if other != op {
			assert.NotContains(t, msg, "collectives: "+other+" (opcode", "a later collective's code")
		}
	}
	var ae *AbortError
	if errors.As(err, &ae) {
		assert.Equal(t, op, ae.Op)
		assert.NotEqual(t, 2, ae.FailedRank)
		assert.NotEqual(t, ae.Rank, ae.FailedRank)
	}
}

// closeQuickly: Close frees everything without waiting (the streams are
// idle).
func closeQuickly(t *testing.T, f *fixture) {
	t.Helper()
	start := time.Now()
	require.NoError(t, f.c.Close())
	assert.Less(t, time.Since(start), drainTimeout, "Close waited for streams that were idle")
}

// TestDrainGraphReplays: a graph of an LL all-reduce, a one-shot one and a
// barrier per rank, replayed 300 times on every rank but rank 2: the
// first replay's kernels time out, the other 299 replays drain at once.
func TestDrainGraphReplays(t *testing.T) {
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: 4, transport: tr, dataBytes: 8 << 20,
				opts: []Option{WithTimeout(drainTimeout), WithLLMax(4096)}})
			b := f.alloc(1 << 20)
			bg := context.Background()
			execs := f.capture(func() {
				require.NoError(t, f.c.AllReduce(bg, f.ptrs(b), f.ptrs(b), 500, F32, Sum, f.streams))
				require.NoError(t, f.c.AllReduce(bg, f.ptrs(b), f.ptrs(b), 30000, U32, Max, f.streams))
				require.NoError(t, f.c.Barrier(bg, f.streams))
			})
			require.NoError(t, f.t.Run(team.JobFunc(func(l int) error {
				if l == 2 {
					return nil
				}
				for range 300 {
					if err := f.node.GraphLaunch(execs[l], f.streams[l]); err != nil {
						return err
					}
				}
				return nil
			})))
			err := syncFar(t, f)
			f.requireIdle()
			requireFirstFailure(t, err, "all-reduce")
			closeQuickly(t, f)
		})
	}
}

// TestAbortOnly: the team-failed word is set on every rank (a rank of
// another process failed, say) and this process's ranks run an LL
// all-reduce: each gives up at entry, and Sync reports it, naming the
// failed rank: the process does not take skipped collectives for done.
func TestAbortOnly(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(20 * time.Second)}})
	b := f.alloc(4096)
	failed := kabi.FailedWord(kabi.TimeoutStatus(kernels.OpBroadcast, 1, 0), 7)
	for _, rs := range f.c.ranks {
		f.write(cuda.DevicePtr(rs.own+kabi.FailedOffset), binary.LittleEndian.AppendUint64(nil, failed))
	}
	require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 100, S32, Sum, f.streams))
	start := time.Now()
	err := f.c.Sync(context.Background(), f.streams)
	assert.Less(t, time.Since(start), 5*time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrAborted)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.ErrorIs(t, err, team.ErrBroken)
	var ae *AbortError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "all-reduce", ae.Op)
	assert.Equal(t, 7, ae.FailedRank)
	assert.Equal(t, uint32(PhaseEntry), ae.Phase)
	var te *TimeoutError
	assert.False(t, errors.As(err, &te), "no rank of this process timed out")
	msg := err.Error()
	for r := range 3 {
		assert.Contains(t, msg, fmt.Sprintf("all-reduce (opcode 2) on rank %d (device %d): gave up at entry (block 0): the barrier deadline WithTimeout(20s) expired on rank 7 first", r, r))
	}
	assert.NotContains(t, msg, "reported no timeout")
}

// TestCloseWaitsForLaunched: Close right after a collective that one rank
// never launched, without Sync: the launched ranks' kernels may still
// write their status words, so Close waits for their streams (they drain
// at the timeout) before it frees them; nothing leaks. With a stream kept
// busy past the wait, Close leaves that rank's status word allocated and
// says so (the context's release frees it with the team).
func TestCloseWaitsForLaunched(t *testing.T) {
	const timeout = 200 * time.Millisecond
	t.Run("drained", func(t *testing.T) {
		f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(timeout)}})
		f.c.skip = []bool{false, true, false}
		require.NoError(t, f.c.Barrier(context.Background(), f.streams))
		f.c.skip = nil
		start := time.Now()
		require.NoError(t, f.c.Close())
		took := time.Since(start)
		t.Logf("Close took %v", took)
		assert.GreaterOrEqual(t, took, timeout/2, "Close did not wait for the launched kernels")
		f.requireIdle()
	})
	t.Run("busy", func(t *testing.T) {
		f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(timeout)}})
		open := f.gate(1)
		defer open()
		require.NoError(t, f.c.Barrier(context.Background(), f.streams))
		err := f.c.Close()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "rank 1 (device 1): stream")
		assert.Contains(t, err.Error(), "stays allocated")
		open()
	})
}

// TestCloseWaitsForGraphLaunch: Close right after a graph replay (Graph.
// Launch) that no Sync saw finish waits for the replay's streams as it
// does for an eager launch, although a Sync found them idle after an
// earlier replay: with rank 1's stream held, ranks 0 and 2 drain at the
// timeout before Close frees their status words, and rank 1's stays
// allocated, said so. (Close used to return at once, freeing status
// words that the replay's kernels still wrote.)
func TestCloseWaitsForGraphLaunch(t *testing.T) {
	const timeout = 200 * time.Millisecond
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(timeout)}})
	ss, err := WrapStreams(f.t, f.streams)
	require.NoError(t, err)
	b := f.alloc(4096)
	g, err := ss.Capture(func() error {
		return f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 256, F32, Sum, f.streams)
	})
	require.NoError(t, err)
	defer func() { assert.NoError(t, g.Close()) }()
	require.NoError(t, g.Launch(ss))
	require.NoError(t, f.c.Sync(context.Background(), f.streams))
	open := f.gate(1)
	defer open()
	require.NoError(t, g.Launch(ss))
	start := time.Now()
	err = f.c.Close()
	took := time.Since(start)
	t.Logf("Close took %v: %v", took, err)
	assert.GreaterOrEqual(t, took, timeout/2, "Close did not wait for the replay's kernels")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 1 (device 1): stream")
	assert.Contains(t, err.Error(), "stays allocated")
	for _, l := range []int{0, 2} {
		require.NoError(t, onContext(f.node, f.t.Context(l), func() error { return f.node.StreamQuery(f.streams[l]) }), "rank %d's stream", l)
	}
	open()
}

// TestGraphAndStreamsCloseOnBrokenTeam: after a collective timed out (the
// team broken), Graph.Close and Streams.Close still destroy what they
// hold; they went through team.Run, which refuses a broken team, and left
// every graph instance and stream behind (issue 24 item 3: a survivor of
// a dead rank closing its replayed graph).
func TestGraphAndStreamsCloseOnBrokenTeam(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(200 * time.Millisecond)}})
	before := f.node.Live()
	ss, err := NewStreams(f.t)
	require.NoError(t, err)
	b := f.alloc(4096)
	list := []cuda.Stream{ss.Stream(0), ss.Stream(1), ss.Stream(2)}
	g, err := ss.Capture(func() error {
		return f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 256, F32, Sum, list)
	})
	require.NoError(t, err)
	f.c.skip = []bool{false, false, true}
	require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 256, F32, Sum, list))
	f.c.skip = nil
	require.ErrorIs(t, f.c.Sync(context.Background(), list), team.ErrBroken)
	require.NoError(t, g.Close())
	require.NoError(t, ss.Close())
	after := f.node.Live()
	assert.Equal(t, before.GraphExecs, after.GraphExecs, "graph instances left")
	assert.Equal(t, before.Streams, after.Streams, "streams left")
}
