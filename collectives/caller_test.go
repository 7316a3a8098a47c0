package collectives

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/osthread"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// Launch from the calling goroutine (onCaller, teamlink.Team.RunHere) against
// launch on the workers (LaunchWorkers).

// tidRecorder passes every call to the driver it wraps and records the OS
// thread of every kernel launch and copy.
type tidRecorder struct {
	cuda.Driver
	mu   sync.Mutex
	tids []int
}

func (d *tidRecorder) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	d.record()
	return d.Driver.LaunchKernelEx(f, cfg, params, paramSize)
}

func (d *tidRecorder) MemcpyDtoDAsync(dst, src cuda.DevicePtr, n uint64, s cuda.Stream) error {
	d.record()
	return d.Driver.MemcpyDtoDAsync(dst, src, n, s)
}

func (d *tidRecorder) record() {
	d.mu.Lock()
	d.tids = append(d.tids, osthread.ID())
	d.mu.Unlock()
}

func (d *tidRecorder) take() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tids
	d.tids = nil
	return t
}

// recordTids makes every Comm of cs launch through one tidRecorder (the
// real driver back at cleanup).
func recordTids(tb testing.TB, cs ...*Comm) *tidRecorder {
	rec := &tidRecorder{Driver: cs[0].d}
	for _, c := range cs {
		real := c.d
		c.d = rec
		tb.Cleanup(func() { c.d = real })
	}
	return rec
}

// onThread locks the test's goroutine to its OS thread (until the test
// ends) and returns the thread's id.
func onThread(t *testing.T) int {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	return osthread.ID()
}

// assertThreads checks where a call's launches ran: every one on the
// calling thread me (here), or none; with none, that nothing was launched.
func assertThreads(t *testing.T, tids []int, me int, here, none bool, what string) {
	t.Helper()
	if none {
		require.Empty(t, tids, "%s: launched", what)
		return
	}
	require.NotEmpty(t, tids, "%s: nothing launched", what)
	for _, tid := range tids {
		if here {
			require.Equal(t, me, tid, "%s: a launch off the calling thread", what)
		} else {
			require.NotEqual(t, me, tid, "%s: a launch on the calling thread", what)
		}
	}
}

var callerLayouts = []struct {
	name   string
	gpus   int
	devs   []cuda.Device
	oneCtx bool
}{
	{"1 rank", 1, []cuda.Device{0}, true},
	{"2 ranks on 1 GPU", 1, []cuda.Device{0, 0}, true},
	{"3 ranks on 1 GPU", 1, []cuda.Device{0, 0, 0}, true},
	{"2 ranks on 2 GPUs", 2, []cuda.Device{0, 1}, false},
}

// layoutFixture is newFixture (distinct devices) or newSharedFixture
// (devices repeated) over devs.
func layoutFixture(tb testing.TB, gpus int, devs []cuda.Device, foreign uint64, opts ...Option) *fixture {
	if gpus == len(devs) {
		return newFixture(tb, fixtureConfig{ranks: gpus, transport: team.Unicast, dataBytes: 16 << 20, foreign: foreign, opts: opts})
	}
	f, _ := newSharedFixture(tb, sharedConfig{gpus: gpus, devs: devs, dataBytes: 16 << 20, foreign: foreign, opts: opts})
	return f
}

// TestLaunchFromCaller: forced to the caller (LaunchCaller), a collective
// launches from the calling thread, whether every local rank runs in one
// context (1 rank, 2 and 3 ranks on one GPU) or each in its own (2 GPUs:
// RunHere switches contexts); LaunchWorkers always on the workers. Every collective (LL, one-shot, two-shot, copy-in in chunks,
// broadcast, barrier, reduce-scatter, all-gather, reduce), run both ways
// on the same fresh random inputs, matches the reference and gives the
// same bytes both ways.
func TestLaunchFromCaller(t *testing.T) {
	opts := []Option{WithLLMax(256), WithOneShotMax(4 << 10), WithStageBytes(8 << 10)}
	for _, lay := range callerLayouts {
		t.Run(lay.name, func(t *testing.T) {
			me := onThread(t)
			f := layoutFixture(t, lay.gpus, lay.devs, 64<<10, opts...)
			require.Equal(t, lay.oneCtx, f.c.oneCtx)
			caller := f.c
			workers, err := New(f.t, opts...)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, workers.Close()) })
			workers.via, caller.via = LaunchWorkers, LaunchCaller
			rec := recordTids(t, caller, workers)
			n := f.n
			sendB, recvB := f.alloc(64<<10), f.alloc(64<<10)
			send, recv, foreign := f.ptrs(sendB), f.ptrs(recvB), append([]cuda.DevicePtr(nil), f.foreign...)
			ar := func(s, r []cuda.DevicePtr, dt DType, op Op, count int) func(*Comm, *rand.Rand) [][]byte {
				return func(c *Comm, rng *rand.Rand) [][]byte {
					runAllReduce(t, f, c, rng, s, r, dt, op, count)
					return f.readAll(r, count*dt.Size())
				}
			}
			coll := func(o collOp, s, r []cuda.DevicePtr) func(*Comm, *rand.Rand) [][]byte {
				return func(c *Comm, rng *rand.Rand) [][]byte {
					runColl(t, f, c, rng, o, s, r)
					_, rb := o.bytesOf(n)
					if o.coll == kernels.CollReduce {
						return [][]byte{f.read(r[o.root], rb)}
					}
					return f.readAll(r, rb)
				}
			}
			for _, tc := range []struct {
				name string
				run  func(*Comm, *rand.Rand) [][]byte
				// none: a team of one rank enqueues nothing (oneRank:
				// in place, or a barrier).
				none bool
			}{
				{"all-reduce LL", ar(send, recv, F32, Sum, 50), false},
				{"all-reduce LL, cuMemAlloc memory", ar(foreign, foreign, S32, Max, 40), true},
				{"all-reduce one-shot", ar(send, recv, BF16, Sum, 1500), false},
				{"all-reduce two-shot in place", ar(send, send, F32, Sum, 3000), true},
				{"all-reduce copy-in, 3 chunks", ar(foreign, foreign, U32, Min, 5000), true},
				{"broadcast", func(c *Comm, rng *rand.Rand) [][]byte {
					runBroadcast(t, f, c, rng, send, recv, U64, 300, n-1)
					return f.readAll(recv, 300*8)
				}, false},
				{"broadcast copy-in", func(c *Comm, rng *rand.Rand) [][]byte {
					runBroadcast(t, f, c, rng, foreign, foreign, F16, 5000, 0)
					return f.readAll(foreign, 5000*2)
				}, true},
				{"barrier", func(c *Comm, _ *rand.Rand) [][]byte {
					require.NoError(t, c.Barrier(context.Background(), f.streams))
					require.NoError(t, c.Sync(context.Background(), f.streams))
					return nil
				}, true},
				{"reduce-scatter", coll(collOp{coll: kernels.CollReduceScatter, dt: F32, op: Sum, count: 700}, send, recv), false},
				{"all-gather copy-out", coll(collOp{coll: kernels.CollAllGather, dt: U32, count: 900}, send, foreign), false},
				{"reduce", coll(collOp{coll: kernels.CollReduce, dt: S32, op: Max, count: 2000, root: n / 2}, send, recv), false},
			} {
				seed := rand.Uint64()
				none := n == 1 && tc.none
				hereOut := tc.run(caller, rand.New(rand.NewPCG(seed, 1)))
				assertThreads(t, rec.take(), me, true, none, tc.name+" (LaunchCaller)")
				workersOut := tc.run(workers, rand.New(rand.NewPCG(seed, 1)))
				assertThreads(t, rec.take(), me, false, none, tc.name+" (LaunchWorkers)")
				require.Equal(t, workersOut, hereOut, "%s (seed %#x): the two ways differ", tc.name, seed)
			}
		})
	}
}

// readAll reads n bytes at p[l] of every rank (the streams idle).
func (f *fixture) readAll(p []cuda.DevicePtr, n int) [][]byte {
	out := make([][]byte, len(p))
	for l := range p {
		out[l] = f.read(p[l], n)
	}
	return out
}

// TestLaunchFromCallerChecksFirst: from the caller, a pointer that fails
// the driver's checks on the last rank launches nothing on any rank (not
// even rank 0's copy-in), names the rank, and leaves the team usable; a
// wrong pointer on rank 0 likewise. (A caller that checked each rank in
// its own turn would have launched rank 0 before it found rank 2's.)
func TestLaunchFromCallerChecksFirst(t *testing.T) {
	me := onThread(t)
	f := layoutFixture(t, 1, []cuda.Device{0, 0, 0}, 64<<10, WithLLMax(256), WithStageBytes(8<<10))
	f.c.via = LaunchCaller
	rec := recordTids(t, f.c)
	ctx := context.Background()
	for _, bad := range []int{2, 0} {
		for _, count := range []uint64{20, 5000} { // LL; copy-in in chunks
			send := append([]cuda.DevicePtr(nil), f.foreign...)
			send[bad] += 60 << 10 // 4 KiB left in the allocation
			f.node.ResetCalls()
			err := f.c.AllReduce(ctx, send, f.foreign, count, F32, Sum, f.streams)
			if count == 20 {
				require.NoError(t, err, "80 bytes fit")
				f.sync()
				rec.take()
				continue
			}
			require.ErrorIs(t, err, ErrInvalid)
			var ae *ArgError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, bad, ae.Rank)
			assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), "bad rank %d: launched despite the error", bad)
			assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "bad rank %d: copied despite the error", bad)
			assert.Empty(t, rec.take())
			require.NoError(t, f.t.Err(), "nothing launched: the team is fine")
		}
	}
	rng := newRNG(t)
	runAllReduce(t, f, f.c, rng, f.foreign, f.foreign, F32, Sum, 5000)
	assertThreads(t, rec.take(), me, true, false, "the all-reduce after the errors")
}

// TestLaunchDefaultStreamsOnWorkers: a default stream (0, 1 and 2 mean
// the current context's, 2 the thread's own) keeps a call, and Sync's poll,
// on the worker even where the ranks run in one context (one rank here:
// ranks that share a device may not share its default stream, and are
// refused one).
func TestLaunchDefaultStreamsOnWorkers(t *testing.T) {
	me := onThread(t)
	ctx := context.Background()
	f := layoutFixture(t, 1, []cuda.Device{0}, 0)
	require.True(t, f.c.oneCtx)
	rec := recordTids(t, f.c)
	q := recordQueries(t, f, false)
	p, o := f.ptrs(f.alloc(64<<10)), f.ptrs(f.alloc(64<<10))
	rng := newRNG(t)
	for _, s := range []cuda.Stream{0, 1, 2} {
		streams := []cuda.Stream{s}
		in := [][]byte{input(rng, F32, 1000)}
		f.write(p[0], in[0])
		// Out of place: one rank's copy (in place it enqueues nothing).
		require.NoError(t, f.c.AllReduce(ctx, p, o, 1000, F32, Sum, streams))
		assertThreads(t, rec.take(), me, false, false, "a default stream")
		q.take()
		require.NoError(t, f.c.Sync(ctx, streams))
		for _, c := range q.take() {
			assert.Equal(t, f.t.Context(0), c, "stream %d polled without its context", s)
		}
		msg, bad := checkAllReduce(F32, Sum, in, f.readAll(o, 4000), 1000)
		require.Zero(t, bad, msg)
	}
	// The same call on a created stream: from the caller.
	require.NoError(t, f.c.AllReduce(ctx, p, o, 1000, F32, Sum, f.streams))
	assertThreads(t, rec.take(), me, true, false, "a created stream")
	f.sync()
}

// TestLaunchFromCallerGraph: captured from the calling thread (the capture
// begun and ended on the workers, thread-local mode), an LL and a two-shot
// all-reduce on 2 ranks of one GPU replay right, 3 x 100 times on fresh
// inputs.
func TestLaunchFromCallerGraph(t *testing.T) {
	me := onThread(t)
	f := layoutFixture(t, 1, []cuda.Device{0, 0}, 0, WithLLMax(256), WithOneShotMax(1<<10))
	f.c.via = LaunchCaller
	rec := recordTids(t, f.c)
	rng := newRNG(t)
	const countA, countB = 30, 3000 // LL (120 B); two-shot (12000 B)
	a, aOut, b, bOut := f.alloc(4096), f.alloc(4096), f.alloc(16<<10), f.alloc(16<<10)
	execs := f.capture(func() {
		require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(a), f.ptrs(aOut), countA, F32, Sum, f.streams))
		require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(bOut), countB, U32, Sum, f.streams))
	})
	assertThreads(t, rec.take(), me, true, false, "the capture")
	for round := range 3 {
		insA, insB := make([][]byte, f.n), make([][]byte, f.n)
		for l := range f.n {
			insA[l], insB[l] = input(rng, F32, countA), input(rng, U32, countB)
			f.write(a.Ptr(l), insA[l])
			f.write(b.Ptr(l), insB[l])
		}
		require.NoError(t, f.t.Run(team.JobFunc(func(l int) error {
			for range 100 {
				if err := f.node.GraphLaunch(execs[l], f.streams[l]); err != nil {
					return err
				}
			}
			return nil
		})))
		f.sync()
		msg, bad := checkAllReduce(F32, Sum, insA, f.readAll(f.ptrs(aOut), countA*4), countA)
		require.Zero(t, bad, "round %d, LL: %s", round, msg)
		msg, bad = checkAllReduce(U32, Sum, insB, f.readAll(f.ptrs(bOut), countB*4), countB)
		require.Zero(t, bad, "round %d, two-shot: %s", round, msg)
	}
}

// TestLaunchWayAuto: left to itself a Comm launches from the caller only
// where it has one local rank in one context; ranks sharing a GPU launch
// on the workers (faster on the H100, run 13).
func TestLaunchWayAuto(t *testing.T) {
	for _, lay := range callerLayouts {
		t.Run(lay.name, func(t *testing.T) {
			me := onThread(t)
			f := layoutFixture(t, lay.gpus, lay.devs, 0)
			want := lay.oneCtx && len(lay.devs) == 1
			rec := recordTids(t, f.c)
			b, o := f.alloc(4096), f.alloc(4096)
			runAllReduce(t, f, f.c, newRNG(t), f.ptrs(b), f.ptrs(o), F32, Sum, 1000)
			assertThreads(t, rec.take(), me, want, false, lay.name)
		})
	}
}
