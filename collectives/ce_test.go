package collectives

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// TestCopyEngine: in a unicast team with a copy-engine limit, an
// all-gather (2 ranks or more) and a broadcast (2 ranks) at or above it
// run as two barrier kernels around copies (one to every peer a sending
// rank, and its own beside them out of place), in and out of place, from
// every root, and give the right bytes; below the limit, without a limit,
// and broadcasts in bigger teams run their kernels.
func TestCopyEngine(t *testing.T) {
	const count = 64 << 10 // f32: 256 KiB a rank
	for _, tc := range []struct {
		name      string
		ranks     int
		opts      []Option
		ag, bcast bool
	}{
		{"2 ranks, limit 256K", 2, []Option{WithCopyEngineMin(256 << 10), WithLLMax(0)}, true, true},
		{"2 ranks, limit 512K", 2, []Option{WithCopyEngineMin(512 << 10), WithLLMax(0)}, false, false},
		{"2 ranks, no limit", 2, []Option{WithLLMax(0)}, false, false},
		{"3 ranks, limit 256K", 3, []Option{WithCopyEngineMin(256 << 10), WithLLMax(0)}, true, false},
		{"4 ranks, limit 256K", 4, []Option{WithCopyEngineMin(256 << 10), WithLLMax(0)}, true, false},
		{"4 ranks, limit 512K", 4, []Option{WithCopyEngineMin(512 << 10), WithLLMax(0)}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: tc.ranks, transport: team.Unicast, dataBytes: 8 << 20, opts: tc.opts})
			rng := newRNG(t)
			a, b := f.alloc(uint64(tc.ranks)*count*4+guardBytes), f.alloc(uint64(tc.ranks)*count*4+guardBytes)
			for _, inPlace := range []bool{false, true} {
				send, recv := f.ptrs(a), f.ptrs(b)
				if inPlace {
					recv = send
				}
				for root := range tc.ranks {
					f.node.ResetCalls()
					runBroadcast(t, f, f.c, rng, send, recv, F32, count, root)
					copies, launches := len(f.node.CallsOf("cuMemcpyDtoDAsync")), len(f.node.CallsOf("cuLaunchKernelEx"))
					if tc.bcast {
						assert.Equal(t, 2*tc.ranks, launches, "broadcast: two barrier kernels a rank")
						want := 1 // the root's copy to the peer
						if !inPlace {
							want = 2 // and its own
						}
						assert.Equal(t, want, copies, "broadcast, root %d, in place %v", root, inPlace)
					} else {
						assert.Equal(t, tc.ranks, launches, "broadcast: one kernel a rank")
						assert.Zero(t, copies, "broadcast, root %d, in place %v", root, inPlace)
					}
				}
				agSend, agRecv := f.ptrs(a), f.ptrs(b)
				if inPlace {
					for l := range agSend {
						agSend[l] = agRecv[l] + cuda.DevicePtr(f.t.Rank(l)*count*4)
					}
				}
				f.node.ResetCalls()
				runColl(t, f, f.c, rng, collOp{coll: kernels.CollAllGather, dt: F32, count: count}, agSend, agRecv)
				copies, launches := len(f.node.CallsOf("cuMemcpyDtoDAsync")), len(f.node.CallsOf("cuLaunchKernelEx"))
				if tc.ag {
					assert.Equal(t, 2*tc.ranks, launches, "all-gather: two barrier kernels a rank")
					want := tc.ranks * (tc.ranks - 1) // a copy to every peer a rank
					if !inPlace {
						want += tc.ranks // and its own
					}
					assert.Equal(t, want, copies, "all-gather, in place %v", inPlace)
				} else {
					assert.Equal(t, tc.ranks, launches, "all-gather: one kernel a rank")
					assert.Zero(t, copies, "all-gather, in place %v", inPlace)
				}
			}
		})
	}
}

// TestCopyEngineGraph: a broadcast, an all-gather, an out-of-place
// all-reduce and a reduce captured into one graph and replayed give the
// right bytes every time; the sums of small integers in f32, exact in any
// order. With 4 ranks the all-gather and the all-reduce's all-gather half
// go by copy engine (the side stream forked and joined inside the
// capture); with 2 ranks the broadcast does, and the other three are
// within the default LL limit. With 2 ranks and WithLLMax(0) all four go
// by copy engine, the all-reduce's reduce-scatter half and the reduce as
// the 2-rank pipelines (a local reduce a rank, and the root's): the
// all-reduce's local reduce, on the side stream, waits for flags that the
// call's stream's copies, captured after it, set, so the graph must run
// the capture's streams concurrently, as GPUs do (docs/perf.md runs
// 73-80) and the simulator's graphs do; replayed one op after another,
// the kernels wait until their deadline and the test fails.
func TestCopyEngineGraph(t *testing.T) {
	const count = 64 << 10
	for _, tc := range []struct {
		ranks int
		noLL  bool
	}{{2, false}, {2, true}, {4, false}} {
		ranks := tc.ranks
		opts := []Option{WithCopyEngineMin(64 << 10)}
		name := fmt.Sprintf("%d ranks", ranks)
		if tc.noLL {
			opts = append(opts, WithLLMax(0))
			name += ", no LL"
		}
		f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 16 << 20, opts: opts})
		rng := newRNG(t)
		src, dst, all := f.alloc(count*4), f.alloc(count*4), f.alloc(uint64(ranks)*count*4)
		arSend, arRecv := f.alloc(uint64(ranks)*count*4), f.alloc(uint64(ranks)*count*4)
		rdRecv := f.alloc(uint64(ranks) * count * 4)
		var execs []cuda.GraphExec
		_, _, local, _ := countCE(f, func() {
			execs = f.capture(func() {
				require.NoError(t, f.c.Broadcast(context.Background(), f.ptrs(src), f.ptrs(dst), count, F32, 1, f.streams))
				require.NoError(t, f.c.AllGather(context.Background(), f.ptrs(src), f.ptrs(all), count, F32, f.streams))
				require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(arSend), f.ptrs(arRecv), uint64(ranks)*count, F32, Sum, f.streams))
				require.NoError(t, f.c.Reduce(context.Background(), f.ptrs(arSend), f.ptrs(rdRecv), uint64(ranks)*count, F32, Sum, 1, f.streams))
			})
		})
		if tc.ranks == 2 && tc.noLL {
			assert.Equal(t, 3, local, "%s: the pipelines' local reduces are in the graphs: the all-reduce's on each rank, the reduce's on the root", name)
		} else {
			assert.Zero(t, local, name)
		}
		for range 5 {
			ins := make([][]byte, ranks)
			sum := make([]float32, ranks*count)
			for l := range ranks {
				ins[l] = randomBytes(rng, count*4)
				f.write(src.Ptr(l), ins[l])
				f.write(dst.Ptr(l), randomBytes(rng, count*4))
				f.write(all.Ptr(l), randomBytes(rng, ranks*count*4))
				v := make([]byte, ranks*count*4)
				for i := range sum {
					x := float32(rng.IntN(2001) - 1000)
					sum[i] += x
					binary.LittleEndian.PutUint32(v[4*i:], math.Float32bits(x))
				}
				f.write(arSend.Ptr(l), v)
				f.write(arRecv.Ptr(l), randomBytes(rng, ranks*count*4))
				f.write(rdRecv.Ptr(l), randomBytes(rng, ranks*count*4))
			}
			want := make([]byte, ranks*count*4)
			for i, x := range sum {
				binary.LittleEndian.PutUint32(want[4*i:], math.Float32bits(x))
			}
			require.NoError(t, f.t.Run(team.JobFunc(func(l int) error { return f.node.GraphLaunch(execs[l], f.streams[l]) })))
			f.sync()
			root := 0
			for l := range ranks {
				if f.t.Rank(l) == 1 {
					root = l
				}
			}
			for l := range ranks {
				assert.Equal(t, ins[root], f.read(dst.Ptr(l), count*4), "%s: broadcast on rank %d", name, f.t.Rank(l))
				got := f.read(all.Ptr(l), ranks*count*4)
				for q := range ranks {
					assert.Equal(t, ins[q], got[f.t.Rank(q)*count*4:(f.t.Rank(q)+1)*count*4], "%s: all-gather on rank %d, slot %d", name, f.t.Rank(l), f.t.Rank(q))
				}
				assert.True(t, bytes.Equal(want, f.read(arRecv.Ptr(l), ranks*count*4)), "%s: all-reduce on rank %d", name, f.t.Rank(l))
			}
			assert.True(t, bytes.Equal(want, f.read(rdRecv.Ptr(root), ranks*count*4)), "%s: reduce to rank 1", name)
		}
	}
}

// TestCopyEngineAllReduce: with a copy-engine limit, an all-reduce of team
// buffers whose count nranks slices of whole vectors make up, at a slice
// of at least the limit, copies its reduced slice to every peer by copy
// engine before the end barrier. The slice comes from a reduce-scatter
// kernel, except out of place in a team of 2: from copies of the peer's
// slice into the own recv in kabi.CEPieces pieces, each followed by a flag
// copy, beside one local reduce (kabi.FlagLocal, FlagPieces) on the side
// stream, then a barrier. It
// gives the reference's bytes for sums, 16-bit sums and min/max, 2 to 4
// ranks; from twice the limit in all, whatever the slice. A count that
// does not slice so, less than twice the limit, or no limit run the
// kernels.
func TestCopyEngineAllReduce(t *testing.T) {
	for _, ranks := range []int{2, 3, 4} {
		f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithCopyEngineMin(16 << 10), WithLLMax(0)}})
		rng := newRNG(t)
		const most = 3 * 64 << 10 // bytes of the largest count below
		a, b := f.alloc(most+guardBytes), f.alloc(most+guardBytes)
		for _, tc := range []struct {
			dt    DType
			op    Op
			count int // elements
			ce    bool
		}{
			{F32, Sum, ranks * 4096, true},        // 16 KiB a slice
			{BF16, Sum, ranks * 8192, true},       // 16 KiB a slice
			{S32, Max, ranks * 8192, true},        // 32 KiB a slice
			{F32, Sum, ranks*4096 - ranks, false}, // slices of 4095 elements: not whole vectors
			{F32, Sum, ranks*4096 + 1, false},     // no whole slices
			{F32, Sum, 12288, true},               // 48 KiB in all: slices below the limit at 4 ranks, twice the limit in all
			{F32, Sum, 3072, false},               // 12 KiB in all, below twice the limit
		} {
			for _, inPlace := range []bool{false, true} {
				send, recv := f.ptrs(a), f.ptrs(b)
				if inPlace {
					recv = send
				}
				name := fmt.Sprintf("%d ranks %v %v x %d in place %v", ranks, tc.dt, tc.op, tc.count, inPlace)
				copies, launches, local, flags := countCE(f, func() { runAllReduce(t, f, f.c, rng, send, recv, tc.dt, tc.op, tc.count) })
				switch {
				case tc.ce && (inPlace || ranks != 2):
					assert.Equal(t, 2*ranks, launches, "%s: a reduce-scatter and a barrier a rank", name)
					assert.Equal(t, ranks*(ranks-1), copies, "%s: a copy to every peer a rank", name)
					assert.Zero(t, local, name)
				case tc.ce:
					pieces := nonEmptyPieces(uint64(tc.count/ranks), tc.dt)
					assert.Equal(t, ranks, local, "%s: one local reduce a rank", name)
					assert.Contains(t, flags, uint32(kabi.FlagLocal|kabi.FlagPieces), "%s: the local reduce waits for the pieces", name)
					assert.Equal(t, 4*ranks, launches, "%s: three barriers and the local reduce a rank", name)
					assert.Equal(t, ranks*(ranks-1)*(pieces+kabi.CEPieces+1), copies, "%s: a copy and a flag a piece and peer, and the all-gather half's a peer", name)
				default:
					assert.Zero(t, copies, name)
					assert.Zero(t, local, name)
				}
			}
		}
	}
	// No limit: the kernels.
	f := newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithCopyEngineMin(0), WithLLMax(0)}})
	a := f.alloc(4*4096*4 + guardBytes)
	f.node.ResetCalls()
	runAllReduce(t, f, f.c, newRNG(t), f.ptrs(a), f.ptrs(a), F32, Sum, 4*4096)
	assert.Zero(t, len(f.node.CallsOf("cuMemcpyDtoDAsync")))
}

// TestCopyEngineReduce: with a copy-engine limit, a 2-rank reduce of team
// buffers out of place at or above it goes by copy engine: after a start
// barrier, the peer's send copied into the root's recv in kabi.CEPieces
// pieces (the last one ragged where the count is), each followed by a flag
// copy, and the root's one local reduce (kabi.FlagLocal, FlagPieces). It gives
// the reference's result from either root for sums, 16-bit sums and
// min/max, and leaves the peer's recv alone. In place, below the limit,
// or in a team of 3, the kernels run.
func TestCopyEngineReduce(t *testing.T) {
	for _, ranks := range []int{2, 3} {
		f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithCopyEngineMin(16 << 10), WithLLMax(0)}})
		rng := newRNG(t)
		const most = 64 << 10 // bytes of the largest count below
		a, b := f.alloc(most+guardBytes), f.alloc(most+guardBytes)
		for _, tc := range []struct {
			dt    DType
			op    Op
			count int
			ce    bool
		}{
			{F32, Sum, 4096, true},       // 16 KiB
			{BF16, Sum, 8192 + 5, true},  // 16 KiB and a ragged tail
			{S32, Max, 16384, true},      // 64 KiB
			{F32, Min, 3*4096 + 3, true}, // pieces of whole vectors, the last ragged
			{F32, Sum, 4096 - 4, false},  // below the limit
		} {
			for _, inPlace := range []bool{false, true} {
				for root := range ranks {
					send, recv := f.ptrs(a), f.ptrs(b)
					if inPlace {
						recv = send
					}
					name := fmt.Sprintf("%d ranks %v %v x %d root %d in place %v", ranks, tc.dt, tc.op, tc.count, root, inPlace)
					copies, launches, local, flags := countCE(f, func() {
						runColl(t, f, f.c, rng, collOp{coll: kernels.CollReduce, dt: tc.dt, op: tc.op, count: tc.count, root: root}, send, recv)
					})
					if !tc.ce || inPlace || ranks != 2 {
						assert.Zero(t, copies, name)
						assert.Zero(t, local, name)
						continue
					}
					pieces := nonEmptyPieces(uint64(tc.count), tc.dt)
					assert.Equal(t, pieces+kabi.CEPieces, copies, "%s: a copy a piece that is not empty, and a flag a piece", name)
					assert.Equal(t, 1, local, "%s: one local reduce", name)
					assert.Contains(t, flags, uint32(kabi.FlagLocal|kabi.FlagPieces), "%s: the local reduce waits for the pieces", name)
					assert.Equal(t, 3, launches, "%s: a start barrier a rank, the root's local reduce", name)
				}
			}
		}
	}
}

// TestCopyEngineAllReduceWideTeams: in teams of 3 and 4 the copy-engine
// all-reduce keeps its reduce-scatter half on the SMs (the pipelined copy
// half lost 100-120 us at 4 x H100 and 512 MiB: docs/perf.md run 72):
// no local reduce, the reference's results.
func TestCopyEngineAllReduceWideTeams(t *testing.T) {
	for _, ranks := range []int{3, 4} {
		f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithCopyEngineMin(16 << 10), WithLLMax(0)}})
		rng := newRNG(t)
		count := ranks * 8192
		a, b := f.alloc(uint64(count*4)+guardBytes), f.alloc(uint64(count*4)+guardBytes)
		for _, dt := range []DType{F32, BF16} {
			copies, _, local, _ := countCE(f, func() { runAllReduce(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), dt, Sum, count) })
			assert.Zero(t, local, "%d ranks %v: the reduce-scatter half is a kernel", ranks, dt)
			assert.Equal(t, ranks*(ranks-1), copies, "%d ranks %v: the all-gather half's copies, one a peer", ranks, dt)
		}
	}
}

// nonEmptyPieces counts the pieces of a pipelined copy-engine reduction of
// count elements of dt that hold data (kabi.CEPieceStart): each is a copy.
func nonEmptyPieces(count uint64, dt DType) int {
	per, n := uint64(kabi.VecBytes/dt.Size()), 0
	for i := range kabi.CEPieces {
		if kabi.CEPieceStart(i+1, count, per) > kabi.CEPieceStart(i, count, per) {
			n++
		}
	}
	return n
}

// countCE runs run on f's Comm and counts its copies, its launches and
// its local reduces (kabi.FlagLocal), with every launch's flags.
func countCE(f *fixture, run func()) (copies, launches, local int, flags []uint32) {
	f.node.ResetCalls()
	d := &flagRecorder{Driver: f.c.d}
	f.c.d = d
	run()
	f.c.d = d.Driver
	for _, fl := range d.flags {
		if fl&kabi.FlagLocal != 0 {
			local++
		}
	}
	return len(f.node.CallsOf("cuMemcpyDtoDAsync")), len(f.node.CallsOf("cuLaunchKernelEx")), local, d.flags
}
