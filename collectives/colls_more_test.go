package collectives

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

var threeColls = []kernels.Coll{kernels.CollReduceScatter, kernels.CollAllGather, kernels.CollReduce}

// TestCollsLL: reduce-scatter, all-gather and reduce up to the LL limit
// (bytes per slice) run the LL kernel on the pointers themselves (one
// launch per rank, no copy), for every dtype x op, the LL sizes and
// modes (team and cuMemAlloc memory, at an element's offset too, in place
// and not), 2, 3, 4 and 8 ranks, both transports.
func TestCollsLL(t *testing.T) {
	forEachTeam(t, func(t *testing.T, ranks int, tr team.Transport) {
		f := newLLFixture(t, ranks, tr)
		rng := newRNG(t)
		a, b := f.alloc(llSpan), f.alloc(llSpan)
		for _, coll := range threeColls {
			for _, dt := range DTypes {
				for _, op := range Ops {
					if coll == kernels.CollAllGather && op != Sum {
						continue
					}
					for i, sc := range llSizes {
						o := collOp{coll: coll, dt: dt, op: op, count: sc.count(dt.Size(), ranks), root: i % ranks}
						runCollLL(t, f, rng, o, a, b, sc.name)
					}
				}
			}
		}
	})
}

func runCollLL(t *testing.T, f *fixture, rng *rand.Rand, o collOp, a, b team.Buffer, size string) {
	for _, m := range llModes {
		send, recv := f.ptrs(a), f.ptrs(b)
		for l := range f.n {
			if m.foreign {
				send[l], recv[l] = f.foreign[l], f.foreign[l]+llSpan
			}
			if m.shift {
				send[l] += cuda.DevicePtr(o.dt.Size())
				recv[l] += cuda.DevicePtr(o.dt.Size())
			}
		}
		send, recv = o.layout(send, recv, m.inPlace)
		t.Run(fmt.Sprintf("%v %v %v %s (%d) %s", o.coll, o.dt, o.op, size, o.count, m.name), func(t *testing.T) {
			f.node.ResetCalls()
			runColl(t, f, f.c, rng, o, send, recv)
			assert.Len(t, f.node.CallsOf("cuLaunchKernelEx"), f.n)
			assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "LL needs no staging copy")
		})
	}
}

// TestCollsGraphReplay captures a reduce-scatter through the staging area,
// an all-gather into team buffers, two reduces (on the unicast transport
// two-shot: one launch straight into the root's team buffer, and in chunks
// through the root's staging area into cuMemAlloc memory) and an LL
// all-gather into one graph per rank and
// replays it, with fresh inputs and every result checked after every
// batch: the device-side epochs and the LL parity keep every replay in
// step.
func TestCollsGraphReplay(t *testing.T) {
	const ranks, batch = 4, 250
	for _, tc := range []struct {
		tr      team.Transport
		replays int
	}{{team.Unicast, 2000}, {team.Multicast, 1000}} {
		t.Run(tc.tr.String(), func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: ranks, transport: tc.tr, dataBytes: 1 << 20, foreign: 64 << 10,
				opts: []Option{WithLLMax(256), WithOneShotMax(2048), WithStageBytes(4096), WithMaxGrid(3)}})
			rng := newRNG(t)
			bufs := make([]team.Buffer, 7)
			for i := range bufs {
				bufs[i] = f.alloc(16 << 10)
			}
			foreign, mid, upper := append([]cuda.DevicePtr(nil), f.foreign...), make([]cuda.DevicePtr, ranks), make([]cuda.DevicePtr, ranks)
			for l := range upper {
				mid[l], upper[l] = foreign[l]+16<<10, foreign[l]+32<<10
			}
			calls := []struct {
				o          collOp
				send, recv []cuda.DevicePtr
			}{
				{collOp{coll: kernels.CollReduceScatter, dt: U32, op: Sum, count: 700}, foreign, f.ptrs(bufs[0])},
				{collOp{coll: kernels.CollAllGather, dt: F16, count: 999}, f.ptrs(bufs[1]), f.ptrs(bufs[2])},
				{collOp{coll: kernels.CollReduce, dt: BF16, op: Max, count: 3001, root: 2}, f.ptrs(bufs[3]), f.ptrs(bufs[4])},
				{collOp{coll: kernels.CollReduce, dt: F32, op: Sum, count: 2500, root: 1}, f.ptrs(bufs[6]), mid},
				{collOp{coll: kernels.CollAllGather, dt: U64, count: 5}, f.ptrs(bufs[5]), upper},
			}
			pend := make([]*pendingColl, len(calls))
			fresh := func() {
				for i, c := range calls {
					pend[i] = fillColl(f, rng, c.o, c.send, c.recv)
				}
			}
			fresh()
			execs := f.capture(func() {
				for _, c := range calls {
					require.NoError(t, c.o.enqueue(f.c, c.send, c.recv, f.streams))
				}
			})
			replay := team.JobFunc(func(l int) error {
				for range batch {
					if err := f.node.GraphLaunch(execs[l], f.streams[l]); err != nil {
						return err
					}
				}
				return nil
			})
			for done := 0; done < tc.replays; done += batch {
				require.NoError(t, f.t.Run(replay))
				f.sync()
				for i, pc := range pend {
					require.NoError(t, pc.verify(f), "call %d after %d replays", i, done+batch)
				}
				fresh()
			}
		})
	}
}

// TestCollsTimeout: rank 2 never launches the collective; the others give
// up after the timeout and Sync names the operation (one-shot and LL).
func TestCollsTimeout(t *testing.T) {
	for _, coll := range threeColls {
		for _, count := range []int{16, 4000} { // LL, then one-shot
			t.Run(fmt.Sprintf("%v %d", coll, count), func(t *testing.T) {
				f := newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, dataBytes: 1 << 20, opts: []Option{WithTimeout(150 * time.Millisecond), WithLLMax(1024), WithStageBytes(64 << 10)}})
				a, b := f.alloc(64<<10), f.alloc(64<<10)
				o := collOp{coll: coll, dt: F32, op: Sum, count: count, root: 1}
				f.c.skip = []bool{false, false, true, false}
				require.NoError(t, o.enqueue(f.c, f.ptrs(a), f.ptrs(b), f.streams))
				f.c.skip = nil
				err := f.c.Sync(context.Background(), f.streams)
				var te *TimeoutError
				require.ErrorAs(t, err, &te)
				assert.ErrorIs(t, err, team.ErrBroken)
				assert.Equal(t, kernels.OpName(coll.Opcode()), te.Op)
				assert.Equal(t, coll.Opcode(), te.Opcode)
				assert.Contains(t, err.Error(), "rank 2 reported no timeout")
				assert.ErrorIs(t, o.enqueue(f.c, f.ptrs(a), f.ptrs(b), f.streams), team.ErrBroken)
			})
		}
	}
}

// TestCollsArgErrors: every argument error of the three is reported
// before anything is launched.
func TestCollsArgErrors(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Multicast, dataBytes: 2 << 20, foreign: 4096, opts: []Option{WithStageBytes(64 << 10)}})
	a, b := f.alloc(64<<10), f.alloc(64<<10)
	ctx := context.Background()
	sa, sb := f.ptrs(a), f.ptrs(b)
	shifted := func(p []cuda.DevicePtr, d int) []cuda.DevicePtr {
		q := append([]cuda.DevicePtr(nil), p...)
		q[1] += cuda.DevicePtr(d)
		return q
	}
	peer := append([]cuda.DevicePtr(nil), sa...)
	peer[0] = a.PeerPtr(0, 1)
	for name, call := range map[string]func() error{
		"RS pointers":              func() error { return f.c.ReduceScatter(ctx, sa[:2], sb, 10, F32, Sum, f.streams) },
		"RS overlap":               func() error { return f.c.ReduceScatter(ctx, sa, shifted(sa, 4), 1000, F32, Sum, f.streams) },
		"RS nil recv":              func() error { return f.c.ReduceScatter(ctx, sa, make([]cuda.DevicePtr, 3), 10, F32, Sum, f.streams) },
		"RS peer mapping":          func() error { return f.c.ReduceScatter(ctx, peer, sb, 10, F32, Sum, f.streams) },
		"RS overflow":              func() error { return f.c.ReduceScatter(ctx, sa, sb, 1<<62, F32, Sum, f.streams) },
		"RS past data area":        func() error { return f.c.ReduceScatter(ctx, sa, sb, 200000, F32, Sum, f.streams) },
		"AG dtype":                 func() error { return f.c.AllGather(ctx, sa, sb, 10, DType(99), f.streams) },
		"AG overlap":               func() error { return f.c.AllGather(ctx, shifted(sb, 8), sb, 1000, U32, f.streams) },
		"AG recv off its elements": func() error { return f.c.AllGather(ctx, sa, shifted(sb, 2), 10, U32, f.streams) },
		"AG streams":               func() error { return f.c.AllGather(ctx, sa, sb, 10, U32, f.streams[:1]) },
		"Reduce root":              func() error { return f.c.Reduce(ctx, sa, sb, 10, F32, Sum, 3, f.streams) },
		"Reduce op":                func() error { return f.c.Reduce(ctx, sa, sb, 10, U32, Op(7), 0, f.streams) },
		"Reduce root overlap":      func() error { return f.c.Reduce(ctx, sa, shifted(sa, 16), 100, F32, Sum, 1, f.streams) },
		"Reduce foreign device": func() error {
			s := append([]cuda.DevicePtr(nil), f.foreign...)
			s[0], s[1] = s[1], s[0]
			return f.c.Reduce(ctx, s, sb, 10, F32, Sum, 0, f.streams)
		},
	} {
		f.node.ResetCalls()
		err := call()
		assert.ErrorIs(t, err, ErrInvalid, name)
		assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), name)
		assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), name)
	}
	require.NoError(t, f.t.Err())
	// A reduce's non-root ranks may pass no recv; count 0 launches nothing.
	recv := make([]cuda.DevicePtr, 3)
	recv[2] = b.Ptr(2)
	runColl(t, f, f.c, newRNG(t), collOp{coll: kernels.CollReduce, dt: F16, op: Max, count: 777, root: 2}, sa, recv)
	f.node.ResetCalls()
	require.NoError(t, f.c.ReduceScatter(ctx, sa, sb, 0, F32, Sum, f.streams))
	require.NoError(t, f.c.AllGather(ctx, sa, sb, 0, F32, f.streams))
	assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"))
}

// TestCollsPerRankTeams: the three on one Team and Comm per rank
// (team.NewRank, as under MPI): every rank decides alone, from its own
// pointers, and the results are right, on both transports.
func TestCollsPerRankTeams(t *testing.T) {
	const ranks = 3
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			node, boots := newPerRankNode(t, ranks, ranks)
			rng := newRNG(t)
			ops := []collOp{
				{coll: kernels.CollReduceScatter, dt: F32, op: Sum, count: 3001},
				{coll: kernels.CollAllGather, dt: BF16, count: 4097},
				{coll: kernels.CollReduce, dt: S32, op: Max, count: 5000, root: 1},
				{coll: kernels.CollReduceScatter, dt: U64, op: Min, count: 7}, // LL
			}
			seed := rng.Uint64() // every rank makes every rank's inputs from it
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for r := range ranks {
				wg.Go(func() { errs[r] = collsRank(node, boots[r], r, tr, ops, seed) })
			}
			wg.Wait()
			for r := range ranks {
				require.NoError(t, errs[r], "rank %d", r)
			}
		})
	}
}

// collsRank is one rank's process: its team and Comm, then each of ops on
// team buffers, its own result checked against every rank's inputs (made
// by every rank alike from seed).
func collsRank(node *sim.Node, boot team.Bootstrap, r int, tr team.Transport, ops []collOp, seed uint64) (err error) {
	ctx := context.Background()
	tm, err := team.NewRank(ctx, node, cuda.Device(r), boot, team.WithTransport(tr), team.WithWorkspaceSize(1<<20), team.WithLogger(quietLogger()))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tm.Close()) }()
	c, err := New(tm, WithLLMax(1024), WithOneShotMax(8192), WithStageBytes(8192))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	a, err := tm.Alloc(64 << 10)
	if err != nil {
		return err
	}
	b, err := tm.Alloc(64 << 10)
	if err != nil {
		return err
	}
	var s cuda.Stream
	if err := tm.Run(team.JobFunc(func(int) error { s, err = node.StreamCreate(cuda.StreamNonBlocking); return err })); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tm.Run(team.JobFunc(func(int) error { return node.StreamDestroy(s) }))) }()
	for i, o := range ops {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		sb, rb := o.bytesOf(tm.Size())
		ins := make([][]byte, tm.Size())
		for q := range ins {
			ins[q] = input(rng, o.dt, sb/o.dt.Size())
		}
		if err := errors.Join(node.WriteDevice(a.Ptr(0), ins[r]), node.WriteDevice(b.Ptr(0), randomBytes(rng, rb))); err != nil {
			return err
		}
		before, err := node.ReadDevice(b.Ptr(0), rb)
		if err != nil {
			return err
		}
		if err := o.enqueue(c, []cuda.DevicePtr{a.Ptr(0)}, []cuda.DevicePtr{b.Ptr(0)}, []cuda.Stream{s}); err != nil {
			return err
		}
		if err := c.Sync(ctx, []cuda.Stream{s}); err != nil {
			return err
		}
		got, err := node.ReadDevice(b.Ptr(0), rb)
		if err != nil {
			return err
		}
		if err := o.check(r, ins, got, before); err != nil {
			return fmt.Errorf("op %d (%v): %w", i, o.coll, err)
		}
	}
	return nil
}
