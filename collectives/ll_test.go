package collectives

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// llTestMax is the LL limit of the LL tests (small, so that the LL area is
// too and "exactly the limit" is cheap on the simulator).
const llTestMax = 2 << 10

func newLLFixture(t testing.TB, ranks int, tr team.Transport, opts ...Option) *fixture {
	opts = append([]Option{WithLLMax(llTestMax), WithOneShotMax(8 << 10), WithStageBytes(4 << 10), WithMaxGrid(3)}, opts...)
	// cuMemAlloc memory for a send and a recv of up to 8 slices (the
	// reduce-scatter's and all-gather's), each with a guard.
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: tr, dataBytes: 1 << 20, foreign: 2 * llSpan, opts: opts})
	require.Equal(t, uint64(llTestMax), f.c.LLMax(), "LL is on (the PTX has the LL kernels)")
	return f
}

// llSpan is the room of one LL test buffer: 8 slices at the LL limit.
const llSpan = kabi.MaxRanks*llTestMax + guardBytes + 16

var llSizes = []sizeClass{
	{"one element", func(e, r int) int { return 1 }},
	{"a tail", func(e, r int) int { return max(3, 8/e+1) }}, // 3 halves, 5 words, 2 u64: past one line
	{"odd tail", func(e, r int) int { return 2*(16/e) + 1 }},
	{"one line", func(e, r int) int { return 8 / e }},
	{"exactly the LL limit", func(e, r int) int { return llTestMax / e }},
}

// llModes: team buffers and cuMemAlloc memory (at an element-size offset
// too, so that the kernel's unaligned path runs), in and out of place.
type llMode struct {
	name    string
	inPlace bool
	foreign bool
	shift   bool
}

var llModes = []llMode{
	{"team out-of-place", false, false, false},
	{"team in-place", true, false, false},
	{"cuMemAlloc out-of-place", false, true, false},
	{"cuMemAlloc in-place", true, true, false},
	{"cuMemAlloc shifted by an element", false, true, true},
}

// llBuffers are every rank's send and recv in LL buffer mode m, for
// elements of dt: team buffers sendB and recvB, or the cuMemAlloc memory
// (shifted by an element where m says so), in or out of place.
func llBuffers(f *fixture, m llMode, dt DType, sendB, recvB team.Buffer) (send, recv []cuda.DevicePtr) {
	send, recv = make([]cuda.DevicePtr, f.n), make([]cuda.DevicePtr, f.n)
	for l := range f.n {
		if m.foreign {
			send[l] = f.foreign[l]
			recv[l] = f.foreign[l] + 2*(llTestMax+guardBytes)
			if m.shift {
				send[l] += cuda.DevicePtr(dt.Size())
				recv[l] += cuda.DevicePtr(dt.Size())
			}
		} else {
			send[l], recv[l] = sendB.Ptr(l), recvB.Ptr(l)
		}
		if m.inPlace {
			recv[l] = send[l]
		}
	}
	return send, recv
}

// TestAllReduceLLMatrix: every dtype x op the flavor has x LL size x
// buffer mode, for 2, 3, 4 and 8 ranks and both transports; LL runs on the
// pointers themselves (no staging copy, one launch per rank).
func TestAllReduceLLMatrix(t *testing.T) {
	forEachTeam(t, func(t *testing.T, ranks int, tr team.Transport) {
		f := newLLFixture(t, ranks, tr)
		rng := newRNG(t)
		sendB, recvB := f.alloc(llTestMax+guardBytes), f.alloc(llTestMax+guardBytes)
		for _, dt := range DTypes {
			for _, op := range Ops { // every pair: what multimem cannot reduce runs the unicast kernel
				for _, sc := range llSizes {
					count := sc.count(dt.Size(), ranks)
					require.Equal(t, kernels.LL, f.c.algo(uint64(count*dt.Size())))
					for _, m := range llModes {
						send, recv := llBuffers(f, m, dt, sendB, recvB)
						t.Run(fmt.Sprintf("%v %v %s (%d) %s", dt, op, sc.name, count, m.name), func(t *testing.T) {
							f.node.ResetCalls()
							runAllReduce(t, f, f.c, rng, send, recv, dt, op, count)
							assert.Len(t, f.node.CallsOf("cuLaunchKernelEx"), ranks)
							assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "LL needs no staging copy")
						})
					}
				}
			}
		}
	})
}

// TestAllReduceLLInterleaved: LL calls of different sizes (stale lines of
// both parities lie around) between one-shot and two-shot calls, enqueued
// back to back with one Sync at the end, each on its own buffers, so that
// a rank can run calls ahead of the others; then the same again, checked
// one by one. (This caught a layout whose slots depended on the call's
// size: a fast rank's next call overwrote lines a slow one had yet to
// read.)
func TestAllReduceLLInterleaved(t *testing.T) {
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			const ranks = 3
			f := newLLFixture(t, ranks, tr, WithTimeout(2*time.Second))
			rng := newRNG(t)
			sizes := []int{8, llTestMax, 5000, 24, llTestMax - 8, 20000, 1000, 8, 12000, 16, llTestMax, 2}
			want := []kernels.Algo{kernels.LL, kernels.LL, kernels.OneShot, kernels.LL, kernels.LL, kernels.TwoShot, kernels.LL, kernels.LL, kernels.TwoShot, kernels.LL, kernels.LL, kernels.LL}
			dts := []DType{F32, U64, BF16, S32, F16, U32}
			for round := range 2 {
				var pend []*pendingAllReduce
				for i, n := range sizes {
					require.Equal(t, want[i], f.c.algo(uint64(n)), "%d bytes", n)
					dt := dts[i%len(dts)]
					if n%dt.Size() != 0 {
						dt = F16
					}
					b := f.alloc(uint64(n) + guardBytes)
					pa := enqueueAllReduce(f, f.c, rng, f.ptrs(b), f.ptrs(b), dt, Sum, n/dt.Size())
					if round == 1 {
						require.NoError(t, pa.check(t, f, f.c), "call %d (%d bytes)", i, n)
					} else {
						pend = append(pend, pa)
					}
				}
				for i, pa := range pend {
					require.NoError(t, pa.check(t, f, f.c), "call %d (%d bytes)", i, sizes[i])
				}
			}
			// Every rank's LL epoch counts the LL calls.
			for l := range ranks {
				e := binary.LittleEndian.Uint32(f.read(cuda.DevicePtr(f.c.ranks[l].own+kabi.LLOffset), 4))
				assert.Equal(t, uint32(2*9), e, "rank %d", l)
			}
		})
	}
}

// TestAllReduceLLEpochWrap: every rank's LL epoch set just below 2^32;
// the calls across the wrap (0 is skipped, the parity keeps alternating)
// are right.
func TestAllReduceLLEpochWrap(t *testing.T) {
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			const ranks = 4
			f := newLLFixture(t, ranks, tr)
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], 1<<32-3)
			for l := range ranks {
				f.write(cuda.DevicePtr(f.c.ranks[l].own+kabi.LLOffset), b[:])
			}
			rng := newRNG(t)
			buf := f.alloc(llTestMax + guardBytes)
			for i, want := range []uint32{1<<32 - 2, 1<<32 - 1, 2, 3, 4} {
				runAllReduce(t, f, f.c, rng, f.ptrs(buf), f.ptrs(buf), U32, Sum, 100+i*37)
				for l := range ranks {
					got := binary.LittleEndian.Uint32(f.read(cuda.DevicePtr(f.c.ranks[l].own+kabi.LLOffset), 4))
					require.Equal(t, want, got, "rank %d after call %d", l, i)
				}
			}
		})
	}
}

// TestGraphReplayLL captures two LL all-reduces per rank (cuMemAlloc
// memory out of place; a team buffer in place) into a graph and replays it
// many times, checking the results and renewing the inputs every batch:
// the device-side epoch keeps every replay in step.
func TestGraphReplayLL(t *testing.T) {
	const (
		ranks  = 4
		batch  = 1000
		countA = 300 // f32: 1200 bytes
		countB = 13  // bf16: 26 bytes, in place
	)
	for _, tc := range []struct {
		tr      team.Transport
		replays int
	}{{team.Unicast, 10000}, {team.Multicast, 2000}} {
		t.Run(tc.tr.String(), func(t *testing.T) {
			f := newLLFixture(t, ranks, tc.tr)
			rng := newRNG(t)
			sendA := append([]cuda.DevicePtr(nil), f.foreign...)
			recvA := make([]cuda.DevicePtr, ranks)
			for l := range ranks {
				recvA[l] = sendA[l] + 4096
			}
			bufB := f.alloc(countB * 2)
			insA, insB := make([][]byte, ranks), make([][]byte, ranks)
			fresh := func() {
				for l := range ranks {
					insA[l], insB[l] = input(rng, F32, countA), input(rng, BF16, countB)
					f.write(sendA[l], insA[l])
					f.write(bufB.Ptr(l), insB[l])
					f.write(recvA[l], randomBytes(rng, countA*4))
				}
			}
			fresh()
			execs := f.capture(func() {
				require.NoError(t, f.c.AllReduce(context.Background(), sendA, recvA, countA, F32, Sum, f.streams))
				require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(bufB), f.ptrs(bufB), countB, BF16, Sum, f.streams))
			})
			replay := team.JobFunc(func(l int) error {
				for range batch {
					if err := f.node.GraphLaunch(execs[l], f.streams[l]); err != nil {
						return err
					}
				}
				return nil
			})
			start := time.Now()
			for done := 0; done < tc.replays; done += batch {
				require.NoError(t, f.t.Run(replay))
				f.sync()
				gotA := make([][]byte, ranks)
				for l := range ranks {
					gotA[l] = f.read(recvA[l], countA*4)
				}
				msg, bad := checkAllReduce(F32, Sum, insA, gotA, countA)
				require.Zero(t, bad, "after %d replays: %s", done+batch, msg)
				// B is in place: each replay reduces the previous
				// one's result; it is checked once, below.
				fresh()
			}
			// One more replay on fresh inputs checks the in-place one.
			require.NoError(t, f.t.Run(team.JobFunc(func(l int) error { return f.node.GraphLaunch(execs[l], f.streams[l]) })))
			f.sync()
			gotB := make([][]byte, ranks)
			for l := range ranks {
				gotB[l] = f.read(bufB.Ptr(l), countB*2)
			}
			msg, bad := checkAllReduce(BF16, Sum, insB, gotB, countB)
			require.Zero(t, bad, msg)
			e := binary.LittleEndian.Uint32(f.read(cuda.DevicePtr(f.c.ranks[0].own+kabi.LLOffset), 4))
			assert.Equal(t, uint32(2*(tc.replays+1)), e, "two LL calls per replay")
			t.Logf("%d replays of 2 LL all-reduces (%v) in %v", tc.replays+1, tc.tr, time.Since(start))
		})
	}
}

// TestLLOff: WithLLMax(0) runs no LL kernel and allocates no LL area; the
// LL area is refused as a user buffer; an LL limit whose area cannot fit
// the workspace is an error naming the option.
func TestLLOff(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 1 << 20, opts: []Option{WithLLMax(0), WithStageBytes(4096)}})
	assert.Zero(t, f.c.LLMax())
	assert.Equal(t, kernels.OneShot, f.c.algo(8))
	_, err := New(f.t, WithLLMax(1<<20), WithStageBytes(4096))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "WithLLMax")

	c, err := New(f.t, WithLLMax(1024), WithStageBytes(4096))
	require.NoError(t, err)
	defer c.Close()
	ll := make([]cuda.DevicePtr, 2)
	for l := range ll {
		ll[l] = cuda.DevicePtr(c.ranks[l].own + c.llOff)
	}
	err = c.AllReduce(context.Background(), ll, ll, 4, F32, Sum, f.streams)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "LL area")
}

// TestBroadcastLLMatrix: the broadcast up to the LL limit is one LL launch
// a rank (kabi.FlagLL, no staging copy), from every root, for 2, 3, 4 and
// 8 ranks and both transports, at the LL sizes and in every buffer mode;
// two bytes past the limit it is the barrier kernel or two LL steps, and
// with LL off the barrier kernel.
func TestBroadcastLLMatrix(t *testing.T) {
	forEachTeam(t, func(t *testing.T, ranks int, tr team.Transport) {
		f := newLLFixture(t, ranks, tr)
		rng := newRNG(t)
		sendB, recvB := f.alloc(llTestMax+guardBytes), f.alloc(llTestMax+guardBytes)
		for i, sc := range llSizes {
			dt := []DType{F16, U32, U64, BF16, F32}[i%5]
			count := sc.count(dt.Size(), ranks)
			for j, m := range llModes {
				root := (i + j) % ranks
				send, recv := llBuffers(f, m, dt, sendB, recvB)
				t.Run(fmt.Sprintf("root %d %v %s (%d) %s", root, dt, sc.name, count, m.name), func(t *testing.T) {
					f.node.ResetCalls()
					flags := launchFlags(f, func() { runBroadcast(t, f, f.c, rng, send, recv, dt, count, root) })
					require.Len(t, flags, ranks, "one launch a rank")
					for r, fl := range flags {
						assert.Equal(t, uint32(kabi.FlagLL|kabi.FlagAbsPtrs), fl&^kabi.FlagLaunchDependents, "launch %d", r)
					}
					assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "LL needs no staging copy")
				})
			}
		}
		// Past the limit: the barrier kernel, or two LL steps
		// (TestBroadcastLLTwo).
		flags := launchFlags(f, func() { runBroadcast(t, f, f.c, rng, f.ptrs(sendB), f.ptrs(recvB), F16, llTestMax/2+1, ranks-1) })
		two := f.c.llTwoBcast(llTestMax + 2)
		assert.Equal(t, tr == team.Unicast && ranks > 2, two)
		for r, fl := range flags {
			assert.Equal(t, two, fl&kabi.FlagLL != 0, "launch %d past the LL limit", r)
		}
	})
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 1 << 20, opts: []Option{WithLLMax(0), WithStageBytes(4096)}})
	b := f.alloc(64 + guardBytes)
	flags := launchFlags(f, func() { runBroadcast(t, f, f.c, newRNG(t), f.ptrs(b), f.ptrs(b), U32, 16, 1) })
	require.Len(t, flags, 3)
	for r, fl := range flags {
		assert.Zero(t, fl&kabi.FlagLL, "launch %d with LL off", r)
	}
}

// TestBroadcastLLInterleaved: LL broadcasts from changing roots among LL
// all-reduces and broadcasts above the LL limit, enqueued back to back on
// their own buffers with one Sync at the end, so that a rank may run calls
// ahead of the others; checked at the end, then the same again checked
// call by call. (That a rank waits for the one line of every rank, which
// this drift need not hit, is kernels/simkern's
// TestBroadcastLLWaitsForEveryRank.)
func TestBroadcastLLInterleaved(t *testing.T) {
	const ranks = 4
	f := newLLFixture(t, ranks, team.Unicast, WithTimeout(2*time.Second))
	rng := newRNG(t)
	type pending struct {
		bcast bool
		root  int
		in    []byte
		recv  []cuda.DevicePtr
		ar    *pendingAllReduce
	}
	sizes := []int{8, llTestMax, 24, 5000, llTestMax - 8, 2, 16, 3000, llTestMax, 40} // bytes of F16
	for round := range 2 {
		var pend []pending
		for i, n := range sizes {
			b := f.alloc(uint64(n) + guardBytes)
			if i%3 == 2 { // an all-reduce, LL or not
				pa := enqueueAllReduce(f, f.c, rng, f.ptrs(b), f.ptrs(b), F16, Sum, n/2)
				pend = append(pend, pending{ar: pa})
				continue
			}
			p := pending{bcast: true, root: (i * 7) % ranks, in: randomBytes(rng, n), recv: f.ptrs(b)}
			for l := range ranks {
				if l != p.root {
					f.put(l, p.recv[l], randomBytes(rng, n))
				}
			}
			f.put(p.root, p.recv[p.root], p.in)
			require.NoError(t, f.c.Broadcast(context.Background(), p.recv, p.recv, uint64(n/2), F16, p.root, f.streams))
			pend = append(pend, p)
			if round == 1 {
				require.NoError(t, f.c.Sync(context.Background(), f.streams))
			}
		}
		require.NoError(t, f.c.Sync(context.Background(), f.streams))
		for i, p := range pend {
			if !p.bcast {
				require.NoError(t, p.ar.check(t, f, f.c), "round %d call %d", round, i)
				continue
			}
			for l := range ranks {
				assert.Equal(t, p.in, f.get(l, p.recv[l], len(p.in)), "round %d call %d (%d bytes, root %d): rank %d", round, i, len(p.in), p.root, l)
			}
		}
	}
}

// TestBroadcastLLTwo: on the unicast transport from 3 ranks, a broadcast
// above the LL limit, up to WithLLTwoBcastMax (for which the LL area is
// sized), runs LL in two steps (kabi.FlagLL | kabi.FlagLLTwo); not at the
// LL limit (one step), past the limit, in a team of 2, or on the
// multicast transport. From every root, in and out of place, the results
// checked.
func TestBroadcastLLTwo(t *testing.T) {
	const ll = 2 << 10 // 256 lines
	runLLTwoCases(t, ll, WithLLTwoBcastMax, []llTwoCase{
		{"4 ranks", 4, team.Unicast, 4 * ll, []uint64{ll + 2, 3 * ll, 4 * ll}, []uint64{ll, 4*ll + 2}},
		{"3 ranks", 3, team.Unicast, 4 * ll, []uint64{ll + 6, 2*ll + 2, 4 * ll}, []uint64{4*ll + 2}},
		{"2 ranks", 2, team.Unicast, 4 * ll, nil, []uint64{ll + 2}},
		{"4 ranks, limit", 4, team.Unicast, ll + 1024, []uint64{ll + 1024}, []uint64{ll + 1026}},
		{"4 ranks, off", 4, team.Unicast, 0, nil, []uint64{ll + 2}},
		{"4 ranks, multicast", 4, team.Multicast, 4 * ll, nil, []uint64{ll + 2}},
	}, func(t *testing.T, f *fixture, rng *rand.Rand, send, recv []cuda.DevicePtr, bytes uint64, root int) {
		runBroadcast(t, f, f.c, rng, send, recv, F16, int(bytes/2), root)
	}, func(t *testing.T, bytes uint64, two bool, fl uint32, msg string) {
		assert.Equal(t, two, fl&kabi.FlagLLTwo != 0, msg)
		assert.Equal(t, two || bytes <= ll, fl&kabi.FlagLL != 0, msg)
	})
}

// TestBroadcastLLTwoArea: the LL area is sized for the two-step
// broadcast's limit where that takes more lines than the LL limit
// (ceil(lines / (n - 1)) + 1 a slot). A workspace too small for it takes
// New all the same with the default limit, the broadcast then in two
// steps as far as the LL limit's lines go (as before the limit had an
// area of its own); with the limit set, New refuses it, naming the
// option.
func TestBroadcastLLTwoArea(t *testing.T) {
	const ll = 2 << 10 // 256 lines
	f := newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, opts: []Option{WithLLMax(ll), WithLLTwoBcastMax(9000)}})
	// 9000 bytes: 1125 lines, 375 a slice, 376 a slot.
	assert.Equal(t, uint64(376), f.c.llLines)
	assert.Equal(t, uint64(2*4*376*16), f.c.llBytes)
	assert.True(t, f.c.llTwoBcast(9000))
	assert.False(t, f.c.llTwo(3*ll), "the reduce's reach stays on the LL limit's lines (2 x 768 / 4 = 384 > 256)")
	assert.True(t, f.c.llTwo(2*ll))
	ws, err := WorkspaceBytes(4, WithLLMax(ll), WithLLTwoBcastMax(9000))
	require.NoError(t, err)
	assert.Equal(t, uint64(2*DefaultStageBytes+2*4*376*16), ws)

	// 4 MiB of staging and the LL limit's 32 KiB area fit 4.5 MiB; the
	// default limit's 5.6 MB area does not.
	const data = 4<<20 + 512<<10
	f = newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, dataBytes: data, exact: true, opts: []Option{WithLLMax(ll)}})
	assert.Equal(t, uint64(256), f.c.llLines, "the default gave way")
	assert.True(t, f.c.llTwoBcast(3*255*8), "3 slices of 255 lines and a line fit 256")
	assert.False(t, f.c.llTwoBcast(3*255*8+2))
	rng := newRNG(t)
	a, b := f.alloc(8<<10), f.alloc(8<<10)
	runBroadcast(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), F16, 3*255*4, 1)
	runBroadcast(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), F16, 3*255*4+1, 2)

	node := newSimNode(sim.Config{Devices: 4})
	tm, err := team.New(context.Background(), node, []cuda.Device{0, 1, 2, 3},
		team.WithTransport(team.Unicast), team.WithWorkspaceSize(data), team.WithLogger(quietLogger()))
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	_, err = New(tm, WithLLMax(ll), WithLLTwoBcastMax(DefaultLLTwoBcastMax))
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "broadcasts in two LL steps up to 1048576 bytes (option WithLLTwoBcastMax)")
}

// llTwoCase is a team whose calls of the sizes in bytes run in two LL
// steps and of those in not do not, with LL two-step limit max.
type llTwoCase struct {
	name  string
	ranks int
	tr    team.Transport
	max   uint64
	bytes []uint64
	not   []uint64
}

// runLLTwoCases makes, for each case, a fixture with LL limit ll and the
// case's two-step limit (the option limit), runs call (which checks its results) for each of
// its sizes from every root, in and out of place, and hands check every
// launch's flags (one launch a rank), whether the size should run in two
// steps, and a message naming the launch.
func runLLTwoCases(t *testing.T, ll uint64, limit func(uint64) Option, cases []llTwoCase, call func(t *testing.T, f *fixture, rng *rand.Rand, send, recv []cuda.DevicePtr, bytes uint64, root int),
	check func(t *testing.T, bytes uint64, two bool, fl uint32, msg string)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: tc.ranks, transport: tc.tr, opts: []Option{WithLLMax(ll), limit(tc.max)}})
			rng := newRNG(t)
			sendB, recvB := f.alloc(4*ll+guardBytes), f.alloc(4*ll+guardBytes)
			run := func(bytes uint64, two bool) {
				for root := range tc.ranks {
					for _, inPlace := range []bool{false, true} {
						recv := f.ptrs(recvB)
						if inPlace {
							recv = f.ptrs(sendB)
						}
						flags := launchFlags(f, func() { call(t, f, rng, f.ptrs(sendB), recv, bytes, root) })
						require.Len(t, flags, tc.ranks, "%d bytes: one launch a rank", bytes)
						for r, fl := range flags {
							check(t, bytes, two, fl, fmt.Sprintf("%d bytes root %d in place %v: launch %d: flags %#x", bytes, root, inPlace, r, fl))
						}
					}
				}
			}
			for _, b := range tc.bytes {
				run(b, true)
			}
			for _, b := range tc.not {
				run(b, false)
			}
		})
	}
}
