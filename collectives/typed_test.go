package collectives_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// typedRig is a team of ranks GPUs (typedNode's: simulated, or with the
// gpu tag this machine's), its Comm and library-made streams, closed at
// cleanup. On GPUs every team is unicast (the lent machines'), whatever
// tr asks.
type typedRig struct {
	t *team.Team
	c *collectives.Comm
	s *collectives.Streams
}

func newTypedRig(tb testing.TB, ranks int, tr team.Transport) *typedRig {
	tb.Helper()
	d, devs, opts, onGPU := typedNode(tb, ranks)
	if onGPU {
		tr = team.Unicast
	}
	ctx := context.Background()
	opts = append(opts, team.WithTransport(tr), team.WithWorkspaceSize(32<<20), team.WithLogger(slog.New(slog.DiscardHandler)))
	t, err := team.New(ctx, d, devs, opts...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = t.Close() })
	c, err := collectives.New(t)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Close() })
	s, err := collectives.NewStreams(t)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, s.Close()) })
	return &typedRig{t: t, c: c, s: s}
}

// randInts is n random int32s in [-1000, 1000] (sums of a few ranks are
// exact), never all zero.
func randInts(rng *rand.Rand, n int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(rng.IntN(2001)) - 1000
	}
	v[0] |= 1
	return v
}

func fill[T collectives.Type](tb testing.TB, b *collectives.Buffer[T], vals [][]T) {
	tb.Helper()
	for l, v := range vals {
		require.NoError(tb, b.CopyIn(l, v))
	}
}

func read[T collectives.Type](tb testing.TB, b *collectives.Buffer[T], l int) []T {
	tb.Helper()
	out := make([]T, b.Len())
	require.NoError(tb, b.CopyOut(out, l))
	return out
}

// TestTypedCollectives runs every typed collective, out of place, on
// fresh random int32 data over 3 ranks and each transport, against sums
// and copies computed here.
func TestTypedCollectives(t *testing.T) {
	const ranks, n = 3, 1000
	for _, tr := range []team.Transport{team.Unicast, team.Multicast} {
		t.Run(tr.String(), func(t *testing.T) {
			r := newTypedRig(t, ranks, tr)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(rand.Uint64(), 23))
			in := make([][]int32, ranks)
			for l := range in {
				in[l] = randInts(rng, ranks*n)
			}
			send, err := collectives.NewBuffer[int32](r.t, ranks*n)
			require.NoError(t, err)
			defer send.Close()
			recv, err := collectives.NewBuffer[int32](r.t, ranks*n)
			require.NoError(t, err)
			defer recv.Close()
			part, err := collectives.NewBuffer[int32](r.t, n)
			require.NoError(t, err)
			defer part.Close()
			assert.Equal(t, collectives.S32, send.DType())
			sum := make([]int32, ranks*n)
			for l := range in {
				for i, v := range in[l] {
					sum[i] += v
				}
			}
			run := func(name string, call func() error) {
				t.Helper()
				fill(t, send, in)
				require.NoError(t, call(), name)
				require.NoError(t, collectives.Wait(ctx, r.c, r.s), name)
			}

			run("AllReduce", func() error { return collectives.AllReduce(ctx, r.c, send, recv, collectives.Sum, r.s) })
			for l := range ranks {
				assert.Equal(t, sum, read(t, recv, l), "AllReduce rank %d", l)
			}

			const root = 2
			run("Broadcast", func() error { return collectives.Broadcast(ctx, r.c, send, recv, root, r.s) })
			for l := range ranks {
				assert.Equal(t, in[root], read(t, recv, l), "Broadcast rank %d", l)
			}

			fill(t, recv, make([][]int32, ranks)) // nothing: CopyIn of no elements
			run("Reduce", func() error { return collectives.Reduce(ctx, r.c, send, recv, collectives.Sum, 1, r.s) })
			assert.Equal(t, sum, read(t, recv, 1), "Reduce root")

			run("ReduceScatter", func() error { return collectives.ReduceScatter(ctx, r.c, send, part, collectives.Sum, r.s) })
			for l := range ranks {
				assert.Equal(t, sum[l*n:(l+1)*n], read(t, part, l), "ReduceScatter rank %d", l)
			}

			for l := range ranks {
				require.NoError(t, part.CopyIn(l, in[l][:n]))
			}
			require.NoError(t, collectives.AllGather(ctx, r.c, part, recv, r.s))
			require.NoError(t, collectives.Barrier(ctx, r.c, r.s))
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
			var gathered []int32
			for l := range ranks {
				gathered = append(gathered, in[l][:n]...)
			}
			for l := range ranks {
				assert.Equal(t, gathered, read(t, recv, l), "AllGather rank %d", l)
			}
		})
	}
}

// TestTypedInPlaceViews: a reduce-scatter in place (recv is the rank's
// view of send) and an all-reduce of float32s on a view, on random data.
func TestTypedInPlaceViews(t *testing.T) {
	const ranks, n = 2, 64
	r := newTypedRig(t, ranks, team.Unicast)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 5))
	buf, err := collectives.NewBuffer[float32](r.t, ranks*n)
	require.NoError(t, err)
	defer buf.Close()
	in := make([][]float32, ranks)
	for l := range in {
		in[l] = make([]float32, ranks*n)
		for i := range in[l] {
			in[l][i] = float32(rng.IntN(1<<20)) / 16 // exact in f32, sums too
		}
	}
	fill(t, buf, in)
	// The view starts at element n: 256 bytes, 16-byte aligned. Views
	// are per buffer, so in place means the same view on every rank: the
	// all-reduce runs on the second half.
	half, err := buf.Slice(n, 2*n)
	require.NoError(t, err)
	require.NoError(t, collectives.AllReduce(ctx, r.c, half, half, collectives.Sum, r.s))
	require.NoError(t, collectives.Wait(ctx, r.c, r.s))
	for l := range ranks {
		got := read(t, buf, l)
		assert.Equal(t, in[l][:n], got[:n], "rank %d: the first half is untouched", l)
		for i := range n {
			require.Equal(t, in[0][n+i]+in[1][n+i], got[n+i], "rank %d element %d", l, n+i)
		}
	}
	_, err = buf.Slice(n, 3*n)
	assert.ErrorIs(t, err, collectives.ErrInvalid)

	// In place by each rank's own slot: rank r's slice r of the sum stays
	// where it was, the other slice untouched.
	fill(t, buf, in)
	mine, err := buf.Own(n)
	require.NoError(t, err)
	require.NoError(t, collectives.ReduceScatter(ctx, r.c, buf, mine, collectives.Sum, r.s))
	require.NoError(t, collectives.Wait(ctx, r.c, r.s))
	for l := range ranks {
		got := read(t, buf, l)
		rk := r.t.Rank(l)
		for i := range ranks * n {
			want := in[l][i]
			if i/n == rk {
				want = in[0][i] + in[1][i]
			}
			require.Equal(t, want, got[i], "rank %d element %d", rk, i)
		}
	}
	_, err = buf.Own(n + 1)
	assert.ErrorIs(t, err, collectives.ErrInvalid)
}

// TestWrapBuffer: memory nvls did not allocate (cuMemAlloc's) works as a
// collective's send and recv, through the staging area.
func TestWrapBuffer(t *testing.T) {
	const ranks, n = 2, 300
	r := newTypedRig(t, ranks, team.Multicast)
	ctx := context.Background()
	d := r.t.Driver()
	ptrs := make([]cuda.DevicePtr, ranks)
	require.NoError(t, r.t.Run(team.JobFunc(func(l int) error {
		var err error
		ptrs[l], err = d.MemAlloc(n * 8)
		return err
	})))
	defer r.t.Run(team.JobFunc(func(l int) error { return d.MemFree(ptrs[l]) }))
	b, err := collectives.WrapBuffer[uint64](r.t, ptrs, n)
	require.NoError(t, err)
	defer b.Close()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 9))
	in := make([][]uint64, ranks)
	want := make([]uint64, n)
	for l := range in {
		in[l] = make([]uint64, n)
		for i := range in[l] {
			in[l][i] = rng.Uint64() >> 2
			want[i] = max(want[i], in[l][i])
		}
	}
	fill(t, b, in)
	require.NoError(t, collectives.AllReduce(ctx, r.c, b, b, collectives.Max, r.s))
	require.NoError(t, collectives.Wait(ctx, r.c, r.s))
	for l := range ranks {
		assert.Equal(t, want, read(t, b, l), "rank %d", l)
	}

	_, err = collectives.WrapBuffer[uint64](r.t, ptrs[:1], n)
	assert.ErrorIs(t, err, collectives.ErrInvalid)
	_, err = collectives.WrapBuffer[uint64](r.t, []cuda.DevicePtr{ptrs[0] + 4, ptrs[1]}, n)
	assert.ErrorIs(t, err, collectives.ErrInvalid, "not 8-byte aligned")
}

// TestTypedArgErrors: lengths that do not fit the collective, and a
// buffer of another team, are argument errors before any launch.
func TestTypedArgErrors(t *testing.T) {
	r := newTypedRig(t, 2, team.Unicast)
	other := newTypedRig(t, 2, team.Unicast)
	ctx := context.Background()
	a, err := collectives.NewBuffer[float32](r.t, 8)
	require.NoError(t, err)
	defer a.Close()
	b, err := collectives.NewBuffer[float32](r.t, 12)
	require.NoError(t, err)
	defer b.Close()
	x, err := collectives.NewBuffer[float32](other.t, 8)
	require.NoError(t, err)
	defer x.Close()

	var ae *collectives.ArgError
	err = collectives.AllReduce(ctx, r.c, a, b, collectives.Sum, r.s)
	require.ErrorAs(t, err, &ae)
	assert.ErrorIs(t, err, collectives.ErrInvalid)
	assert.Contains(t, err.Error(), "buffers of 8 and 12 f32 elements")
	err = collectives.ReduceScatter(ctx, r.c, a, a, collectives.Sum, r.s)
	assert.ErrorContains(t, err, "2 (ranks) times the length")
	err = collectives.AllReduce(ctx, r.c, a, x, collectives.Sum, r.s)
	assert.ErrorContains(t, err, "another team")
	err = collectives.AllReduce(ctx, r.c, a, nil, collectives.Sum, r.s)
	assert.ErrorIs(t, err, collectives.ErrInvalid)
	assert.ErrorIs(t, a.CopyIn(0, make([]float32, 9)), collectives.ErrBadCopy)
	assert.ErrorIs(t, a.CopyOut(make([]float32, 1), 2), collectives.ErrBadCopy)
	_, err = collectives.NewBuffer[float32](r.t, 0)
	assert.ErrorIs(t, err, collectives.ErrInvalid)
	_, err = collectives.WrapStreams(r.t, make([]cuda.Stream, 3))
	assert.ErrorIs(t, err, collectives.ErrInvalid)
	_, err = (*collectives.Streams)(nil).Capture(func() error { return nil })
	assert.ErrorIs(t, err, collectives.ErrInvalid)
}

// TestCaptureReplay: a graph of two all-reduces, replayed on fresh data
// several times, gives the sums every time; an error from the enqueue
// function ends the capture and comes back.
func TestCaptureReplay(t *testing.T) {
	const ranks, n = 3, 500
	r := newTypedRig(t, ranks, team.Multicast)
	ctx := context.Background()
	a, err := collectives.NewBuffer[int32](r.t, n)
	require.NoError(t, err)
	defer a.Close()
	out, err := collectives.NewBuffer[int32](r.t, n)
	require.NoError(t, err)
	defer out.Close()
	g, err := r.s.Capture(func() error {
		if err := collectives.AllReduce(ctx, r.c, a, out, collectives.Sum, r.s); err != nil {
			return err
		}
		return collectives.AllReduce(ctx, r.c, out, out, collectives.Max, r.s) // already equal: stays the sum
	})
	require.NoError(t, err)
	defer g.Close()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 11))
	for round := range 4 {
		in := make([][]int32, ranks)
		want := make([]int32, n)
		for l := range in {
			in[l] = randInts(rng, n)
			for i, v := range in[l] {
				want[i] += v
			}
		}
		fill(t, a, in)
		require.NoError(t, g.Launch(r.s))
		require.NoError(t, collectives.Wait(ctx, r.c, r.s))
		for l := range ranks {
			require.Equal(t, want, read(t, out, l), "round %d rank %d", round, l)
		}
	}

	boom := errors.New("boom")
	_, err = r.s.Capture(func() error { return boom })
	assert.ErrorIs(t, err, boom)
	// The streams are usable after the failed capture.
	require.NoError(t, collectives.AllReduce(ctx, r.c, a, out, collectives.Sum, r.s))
	require.NoError(t, collectives.Wait(ctx, r.c, r.s))
}

// TestClosedTeamSaysClosed: a collective on a Comm whose team was closed
// (a misuse: close the Comm first) says that the team is closed.
func TestClosedTeamSaysClosed(t *testing.T) {
	r := newTypedRig(t, 2, team.Unicast)
	ctx := context.Background()
	b, err := collectives.NewBuffer[float32](r.t, 64)
	require.NoError(t, err)
	require.NoError(t, r.s.Close())
	require.NoError(t, r.t.Close())
	for name, call := range map[string]func() error{
		"AllReduce": func() error { return collectives.AllReduce(ctx, r.c, b, b, collectives.Sum, nil) },
		"Barrier":   func() error { return collectives.Barrier(ctx, r.c, nil) },
	} {
		err := call()
		require.ErrorIs(t, err, team.ErrClosed, name)
		assert.Contains(t, err.Error(), "collectives: "+name+": the Comm's team is closed", name)
		assert.NotContains(t, err.Error(), "no live buffer", name)
	}
}

// TestNewBufferTooBig: a buffer the data area cannot hold says so, with a
// team.WithWorkspaceSize that fits it; a team made with that size does.
func TestNewBufferTooBig(t *testing.T) {
	simOnly(t) // its own simulated nodes (multicast, sizes)
	const data = 16 << 20
	mk := func(size uint64) (*team.Team, *collectives.Comm) {
		node := simnode.New(simnode.Config{Devices: 2})
		t.Cleanup(func() { _ = node.Close() })
		tm, err := team.New(context.Background(), node, []cuda.Device{0, 1}, team.WithWorkspaceSize(size),
			team.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = tm.Close() })
		c, err := collectives.New(tm)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return tm, c
	}
	tm, _ := mk(data)
	const n = 3 << 20 // 12 MiB of float32: more than 16 MiB less the Comm's areas leaves
	_, err := collectives.NewBuffer[float32](tm, n)
	require.ErrorIs(t, err, team.ErrNoSpace)
	m := regexp.MustCompile(`team\.WithWorkspaceSize\((\d+)\) fits`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "%v", err)
	assert.Contains(t, err.Error(), "collectives.WorkspaceBytes")
	fit, err := strconv.ParseUint(m[1], 10, 64)
	require.NoError(t, err)
	tm2, _ := mk(fit)
	b, err := collectives.NewBuffer[float32](tm2, n)
	require.NoError(t, err, "with the size the error named")
	require.NoError(t, b.Close())
}

// TestMulticastF32MinMax: on the multicast transport, where multimem has
// no f32 min or max, those calls run the unicast kernels over the UC
// aliases (and say so at debug level), with NCCL's results: every rank's
// min and max of fresh random floats, for all-reduce (one-shot, two-shot
// and LL sizes), reduce-scatter and reduce.
func TestMulticastF32MinMax(t *testing.T) {
	simOnly(t) // its own simulated nodes (multicast, sizes)
	const ranks = 3
	var logs strings.Builder
	var mu sync.Mutex
	node := simnode.New(simnode.Config{Devices: ranks})
	t.Cleanup(func() { _ = node.Close() })
	ctx := context.Background()
	h := slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})
	tm, err := team.New(ctx, node, []cuda.Device{0, 1, 2}, team.WithTransport(team.Multicast), team.WithLogger(slog.New(h)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tm.Close() })
	c, err := collectives.New(tm)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.Equal(t, team.Multicast, tm.Transport())
	s, err := collectives.NewStreams(tm)
	require.NoError(t, err)
	defer s.Close()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 17))
	for _, n := range []int{100, 30000, 600000} { // LL, one-shot, two-shot (by the default crossovers)
		send, err := collectives.NewBuffer[float32](tm, ranks*n)
		require.NoError(t, err)
		recv, err := collectives.NewBuffer[float32](tm, ranks*n)
		require.NoError(t, err)
		part, err := collectives.NewBuffer[float32](tm, n)
		require.NoError(t, err)
		in := make([][]float32, ranks)
		for l := range in {
			in[l] = make([]float32, ranks*n)
			for i := range in[l] {
				in[l][i] = float32(rng.NormFloat64() * 1e3)
			}
		}
		fill(t, send, in)
		for _, op := range []collectives.Op{collectives.Min, collectives.Max} {
			want := slices.Clone(in[0])
			for l := 1; l < ranks; l++ {
				for i, v := range in[l] {
					if op == collectives.Min {
						want[i] = min(want[i], v)
					} else {
						want[i] = max(want[i], v)
					}
				}
			}
			require.NoError(t, collectives.AllReduce(ctx, c, send, recv, op, s))
			require.NoError(t, collectives.Wait(ctx, c, s))
			for l := range ranks {
				require.Equal(t, want, read(t, recv, l), "all-reduce %v n=%d rank %d", op, n, l)
			}
			require.NoError(t, collectives.ReduceScatter(ctx, c, send, part, op, s))
			require.NoError(t, collectives.Wait(ctx, c, s))
			for l := range ranks {
				require.Equal(t, want[l*n:(l+1)*n], read(t, part, l), "reduce-scatter %v n=%d rank %d", op, n, l)
			}
			require.NoError(t, collectives.Reduce(ctx, c, send, recv, op, 2, s))
			require.NoError(t, collectives.Wait(ctx, c, s))
			require.Equal(t, want, read(t, recv, 2), "reduce %v n=%d", op, n)
		}
		require.NoError(t, errors.Join(send.Close(), recv.Close(), part.Close()))
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, logs.String(), "the unicast kernel runs over the UC aliases")
	assert.Contains(t, logs.String(), "dtype=f32 redop=max")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestRanks: one goroutine per GPU, each with its rank's handle, issues
// its part of an all-reduce, a broadcast and a barrier and waits; the
// results are every rank's sum and the root's data. Parts that differ fail
// every part; a part whose context ends before the others come is
// withdrawn, and the next call goes through.
func TestRanks(t *testing.T) {
	const ranks, n = 3, 777
	r := newTypedRig(t, ranks, team.Multicast)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 29))
	send, err := collectives.NewBuffer[int32](r.t, n)
	require.NoError(t, err)
	defer send.Close()
	recv, err := collectives.NewBuffer[int32](r.t, n)
	require.NoError(t, err)
	defer recv.Close()
	in := make([][]int32, ranks)
	want := make([]int32, n)
	for l := range in {
		in[l] = randInts(rng, n)
		for i, v := range in[l] {
			want[i] += v
		}
	}
	hs := r.c.Ranks()
	require.Len(t, hs, ranks)
	got, bcast := make([][]int32, ranks), make([][]int32, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for l, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[l] = func() error {
				if err := send.CopyIn(h.Local(), in[h.Local()]); err != nil {
					return err
				}
				if err := collectives.AllReduce(ctx, h, send, recv, collectives.Sum, r.s); err != nil {
					return err
				}
				if err := collectives.Wait(ctx, h, r.s); err != nil {
					return err
				}
				got[l] = make([]int32, n)
				if err := recv.CopyOut(got[l], h.Local()); err != nil {
					return err
				}
				if err := collectives.Broadcast(ctx, h, send, recv, 1, r.s); err != nil {
					return err
				}
				if err := collectives.Barrier(ctx, h, r.s); err != nil {
					return err
				}
				if err := collectives.Wait(ctx, h, r.s); err != nil {
					return err
				}
				bcast[l] = make([]int32, n)
				return recv.CopyOut(bcast[l], h.Local())
			}()
		}()
	}
	wg.Wait()
	for l := range ranks {
		require.NoError(t, errs[l], "rank %d", l)
		assert.Equal(t, hs[l].Rank(), r.t.Rank(l))
		assert.Equal(t, want, got[l], "all-reduce rank %d", l)
		assert.Equal(t, in[1], bcast[l], "broadcast rank %d", l)
	}

	// Parts that differ: rank 0 sums, the others take the max.
	for l, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := collectives.Max
			if l == 0 {
				op = collectives.Sum
			}
			errs[l] = collectives.AllReduce(ctx, h, send, recv, op, r.s)
		}()
	}
	wg.Wait()
	for l := range ranks {
		require.ErrorIs(t, errs[l], collectives.ErrInvalid, "rank %d: every part of the round fails", l)
		assert.Contains(t, errs[l].Error(), "differs from the part other local ranks issued")
	}

	// A part alone, whose context ends, is withdrawn.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	r2 := newTypedRig(t, ranks, team.Unicast)
	b2, err := collectives.NewBuffer[int32](r2.t, n)
	require.NoError(t, err)
	defer b2.Close()
	err = collectives.AllReduce(short, r2.c.Ranks()[0], b2, b2, collectives.Sum, r2.s)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "waiting for the other local ranks' parts")
	for l, h := range r2.c.Ranks() {
		require.NoError(t, b2.CopyIn(l, in[l]))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[l] = collectives.AllReduce(ctx, h, b2, b2, collectives.Sum, r2.s)
		}()
	}
	wg.Wait()
	for l := range ranks {
		require.NoError(t, errs[l], "rank %d", l)
	}
	require.NoError(t, collectives.Wait(ctx, r2.c, r2.s))
	for l := range ranks {
		assert.Equal(t, want, read(t, b2, l), "after the withdrawn part, rank %d", l)
	}
}

// TestElementAlignedViews: views of team buffers that start on an element
// but off the kernels' 16-byte grid run (staged), for every collective,
// on random data, against sums and copies computed here; both transports.
func TestElementAlignedViews(t *testing.T) {
	const ranks, n = 3, 301
	for _, tr := range []team.Transport{team.Unicast, team.Multicast} {
		t.Run(tr.String(), func(t *testing.T) {
			r := newTypedRig(t, ranks, tr)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(rand.Uint64(), 31))
			whole, err := collectives.NewBuffer[int32](r.t, 1+ranks*n+3)
			require.NoError(t, err)
			defer whole.Close()
			out, err := collectives.NewBuffer[int32](r.t, 3+ranks*n)
			require.NoError(t, err)
			defer out.Close()
			send, err := whole.Slice(1, 1+ranks*n) // 4 bytes past the grid
			require.NoError(t, err)
			recv, err := out.Slice(3, 3+ranks*n) // 12 bytes past it
			require.NoError(t, err)
			in := make([][]int32, ranks)
			sum := make([]int32, ranks*n)
			for l := range in {
				in[l] = randInts(rng, ranks*n)
				for i, v := range in[l] {
					sum[i] += v
				}
				require.NoError(t, send.CopyIn(l, in[l]))
			}
			require.NoError(t, collectives.AllReduce(ctx, r.c, send, recv, collectives.Sum, r.s))
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
			for l := range ranks {
				require.Equal(t, sum, read(t, recv, l), "all-reduce rank %d", l)
				assert.Equal(t, in[l], read(t, send, l), "all-reduce rank %d: send untouched", l)
			}
			require.NoError(t, collectives.AllReduce(ctx, r.c, send, send, collectives.Sum, r.s)) // in place
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
			for l := range ranks {
				require.Equal(t, sum, read(t, send, l), "in-place all-reduce rank %d", l)
				require.NoError(t, send.CopyIn(l, in[l]))
			}
			require.NoError(t, collectives.Broadcast(ctx, r.c, send, recv, 2, r.s))
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
			for l := range ranks {
				require.Equal(t, in[2], read(t, recv, l), "broadcast rank %d", l)
			}
			require.NoError(t, collectives.Reduce(ctx, r.c, send, recv, collectives.Sum, 0, r.s))
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
			require.Equal(t, sum, read(t, recv, 0), "reduce")
			part, err := out.Slice(1, 1+n)
			require.NoError(t, err)
			require.NoError(t, collectives.ReduceScatter(ctx, r.c, send, part, collectives.Sum, r.s))
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
			for l := range ranks {
				require.Equal(t, sum[l*n:(l+1)*n], read(t, part, l), "reduce-scatter rank %d", l)
			}
			mine, err := whole.Slice(1, 1+n)
			require.NoError(t, err)
			require.NoError(t, collectives.AllGather(ctx, r.c, mine, recv, r.s))
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
			var gathered []int32
			for l := range ranks {
				gathered = append(gathered, in[l][:n]...)
			}
			for l := range ranks {
				require.Equal(t, gathered, read(t, recv, l), "all-gather rank %d", l)
			}
		})
	}
}

// TestRanksArgMismatch: in one process, local ranks whose parts differ in
// one argument (collective, count, element type, operator, root) all fail
// with ErrArgMismatch naming that argument, nothing is issued, and the
// next call of every rank goes through.
func TestRanksArgMismatch(t *testing.T) {
	const ranks, n = 3, 600
	r := newTypedRig(t, ranks, team.Unicast)
	ctx := context.Background()
	f32, err := collectives.NewBuffer[float32](r.t, ranks*n)
	require.NoError(t, err)
	defer f32.Close()
	i32, err := collectives.NewBuffer[int32](r.t, ranks*n)
	require.NoError(t, err)
	defer i32.Close()
	small, err := f32.Slice(0, n/2)
	require.NoError(t, err)
	whole, err := f32.Slice(0, n)
	require.NoError(t, err)
	i32part, err := i32.Slice(0, n)
	require.NoError(t, err)
	odd := ranks - 1
	cases := []struct {
		arg  string
		call func(l int, h collectives.Handle) error
	}{
		{"collective", func(l int, h collectives.Handle) error {
			if l == odd {
				return collectives.Broadcast(ctx, h, whole, whole, 0, r.s)
			}
			return collectives.AllReduce(ctx, h, whole, whole, collectives.Sum, r.s)
		}},
		{"count", func(l int, h collectives.Handle) error {
			if l == odd {
				return collectives.AllReduce(ctx, h, small, small, collectives.Sum, r.s)
			}
			return collectives.AllReduce(ctx, h, whole, whole, collectives.Sum, r.s)
		}},
		{"dtype", func(l int, h collectives.Handle) error {
			if l == odd {
				return collectives.AllGather(ctx, h, i32part, i32, r.s)
			}
			return collectives.AllGather(ctx, h, whole, f32, r.s)
		}},
		{"op", func(l int, h collectives.Handle) error {
			op := collectives.Sum
			if l == odd {
				op = collectives.Max
			}
			return collectives.ReduceScatter(ctx, h, f32, whole, op, r.s)
		}},
		{"root", func(l int, h collectives.Handle) error {
			root := 0
			if l == odd {
				root = 1
			}
			return collectives.Reduce(ctx, h, whole, whole, collectives.Sum, root, r.s)
		}},
	}
	hs := r.c.Ranks()
	for _, tc := range cases {
		t.Run(tc.arg, func(t *testing.T) {
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for l, h := range hs {
				wg.Go(func() { errs[l] = tc.call(l, h) })
			}
			wg.Wait()
			for l, err := range errs {
				require.ErrorIs(t, err, collectives.ErrArgMismatch, "local rank %d", l)
				assert.ErrorIs(t, err, collectives.ErrInvalid, "local rank %d", l)
				assert.Contains(t, err.Error(), " in "+tc.arg+" (", "local rank %d names the argument", l)
			}
			// The next call of every rank goes through.
			for l, h := range hs {
				wg.Go(func() { errs[l] = collectives.AllReduce(ctx, h, whole, whole, collectives.Sum, r.s) })
			}
			wg.Wait()
			for l, err := range errs {
				require.NoError(t, err, "local rank %d", l)
			}
			require.NoError(t, collectives.Wait(ctx, r.c, r.s))
		})
	}
}
