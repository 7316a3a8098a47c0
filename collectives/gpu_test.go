//go:build gpu

package collectives

// The collectives on real GPUs, UNICAST ONLY. Build here, run on the GPU
// machine (2 to 8 GPUs; 4 on nvidia-h200-x4):
//
//	go test -c -tags gpu -o .devbin/collectives.test ./collectives
//	NCCL_NVLS_ENABLE=0 ./.devbin/collectives.test -test.v -test.run GPU -test.timeout 30m
//
// Freshly generated PTX instead of the embedded copy: NVLS_PTX_DIR=<dir
// holding the *_uc.ptx of every kernels/*.cu>. The soak
// runs only when named or asked for:
//
//	NVLS_SOAK=100000 ./.devbin/collectives.test -test.v -test.run GPUSoak -test.timeout 3h
//	NVLS_SOAK_DURATION=10m ./.devbin/collectives.test -test.v -test.run GPUSoak -test.timeout 1h
//
// No cuMulticast* entry point is ever called: every team is brought up
// with team.WithTransport(team.Unicast), and the driver is wrapped
// (internal/unicastonly) so that a multicast call fails the test without
// reaching the real driver (multicast on a shared NVSwitch fabric can take
// the host down). The tests take the device ordinals from the driver and
// skip with fewer than two GPUs, unless NVLS_GPU_VRANKS=N (2 to 8) is set:
// then a machine with one GPU runs N ranks on GPU 0
// (team.WithSharedDevices; the collectives cut their grid so that every
// rank's blocks are resident at once). That checks the algorithms and the
// flag protocols on hardware, not NVLink, and its timings are not a
// node's:
//
//	NVLS_GPU_VRANKS=2 NCCL_NVLS_ENABLE=0 ./.devbin/collectives.test -test.v -test.run GPU -test.timeout 30m
//	NVLS_GPU_VRANKS=2 NVLS_SOAK_DURATION=10m ./.devbin/collectives.test -test.v -test.run GPUSoak -test.timeout 1h

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/internal/gputest"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/teamlink"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// gpuRig is a unicast team over the machine's GPUs (up to 8), a
// non-blocking stream and a cuMemAlloc buffer per rank.
type gpuRig struct {
	teamRig
	d cuda.Driver
}

func newGPURig(tb testing.TB, dataBytes, foreignBytes uint64) *gpuRig {
	tb.Helper()
	lib, err := cuda.Load()
	if err != nil {
		tb.Skipf("no usable CUDA driver: %v", err)
	}
	devs, shared := gputest.Devices(tb, lib, 2, kabi.MaxRanks)
	// dataBytes is the test's own; room for up to 5 Comms (the matrices
	// make 5) at the largest default LL limit, each with a ring's FIFO of
	// gpuRingBytes.
	ws, err := WorkspaceBytes(len(devs), WithLLMax(DefaultLLMax2), WithRingMin(1), WithRingBytes(gpuRingBytes))
	require.NoError(tb, err)
	opts := []team.Option{team.WithTransport(team.Unicast), team.WithWorkspaceSize(dataBytes + 5*ws)}
	if shared {
		opts = append(opts, team.WithSharedDevices())
	}
	d := unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { tb.Errorf("%s called", op) }}
	tm, err := team.New(context.Background(), d, devs, opts...)
	require.NoError(tb, err)
	require.Equal(tb, team.Unicast, tm.Transport())
	r := &gpuRig{teamRig: newTeamRig(tb, tm, len(devs)), d: d}
	tb.Cleanup(r.close)
	require.NoError(tb, r.open(d, foreignBytes))
	tb.Logf("%d ranks (at most %d on one GPU), unicast team, %d-byte data area", r.n, teamlink.Of(tm).MaxRanksOnDevice(), tm.DataSize())
	return r
}

func (r *gpuRig) close() {
	for l := range r.n {
		assert.NoError(r.tb, onContext(r.d, r.t.Context(l), func() error {
			var errs []error
			if r.streams[l] != 0 {
				errs = append(errs, r.d.StreamSynchronize(r.streams[l]), r.d.StreamDestroy(r.streams[l]))
			}
			if r.foreign[l] != 0 {
				errs = append(errs, r.d.MemFree(r.foreign[l]))
			}
			return errors.Join(errs...)
		}))
	}
	assert.NoError(r.tb, r.t.Close())
}

func (r *gpuRig) put(l int, p cuda.DevicePtr, b []byte) {
	require.NoError(r.tb, onContext(r.d, r.t.Context(l), func() error {
		if err := cuda.CopyHtoD(r.d, p, b); err != nil {
			return err
		}
		return r.d.CtxSynchronize() // the DMA from pageable memory has landed (cuda.CopyHtoD)
	}))
}

func (r *gpuRig) get(l int, p cuda.DevicePtr, n int) []byte {
	b := make([]byte, n)
	require.NoError(r.tb, onContext(r.d, r.t.Context(l), func() error { return cuda.CopyDtoH(r.d, b, p) }))
	return b
}

func (r *gpuRig) comm(opts ...Option) *Comm {
	c, err := New(r.t, opts...)
	require.NoError(r.tb, err)
	r.tb.Cleanup(func() { assert.NoError(r.tb, c.Close()) })
	return c
}

// buffers are send and recv for a mode: team buffers or the cuMemAlloc
// ones (split in two halves of half bytes), in place or not.
func (r *gpuRig) buffers(foreign, inPlace bool, sendB, recvB team.Buffer, half uint64) (s, d []cuda.DevicePtr) {
	s, d = r.ptrs(sendB), r.ptrs(recvB)
	if foreign {
		for l := range r.n {
			s[l], d[l] = r.foreign[l], r.foreign[l]+cuda.DevicePtr(half)
		}
	}
	if inPlace {
		copy(d, s)
	}
	return s, d
}

const gpuBig = 64 << 20

// gpuRingBytes is the ring's FIFO in the GPU tests: 7 blocks.
const gpuRingBytes = 4 << 20

// newMatrixRig is the rig of the matrices: two 64 MiB team buffers (and
// two cuMemAlloc ones) and a Comm per forced algorithm.
func newMatrixRig(t *testing.T) (r *gpuRig, algos map[string]*Comm, sendB, recvB team.Buffer, half uint64) {
	half = uint64(gpuBig + 4096)
	r = newGPURig(t, 2*half+16<<20, 2*half)
	algos = map[string]*Comm{
		"ll":       r.comm(WithLLMax(DefaultLLMax2)), // the largest default limit
		"one-shot": r.comm(WithLLMax(0), WithOneShotMax(math.MaxUint64)),
		"two-shot": r.comm(WithLLMax(0), WithOneShotMax(0), WithReducePullMin(0)), // the 2-rank reduce too
		// The reduce in two LL steps above DefaultLLMax (from 3 ranks).
		"ll-two": r.comm(WithLLMax(DefaultLLMax), WithLLTwoMax(math.MaxUint64)),
		// The ring reduce at every size of team buffers (from 2 ranks).
		"push": r.comm(WithLLMax(0), WithOneShotMax(0), WithRingMin(1), WithRingBytes(gpuRingBytes)),
	}
	require.Equal(t, uint64(DefaultLLMax2), algos["ll"].LLMax(), "the PTX has the LL kernels (NVLS_PTX_DIR: freshly generated PTX)")
	return r, algos, r.alloc(half), r.alloc(half), half
}

// TestGPUAllReduceMatrix: every dtype x op x size (1 element, a tail, one
// vector, ragged, several blocks, 64 MiB) x algorithm (forced) x in/out of
// place x zero-copy/copy-in (64 MiB: zero-copy, plus copy-in for f32 sum),
// fresh random inputs, poisoned outputs and guards, every rank checked.
func TestGPUAllReduceMatrix(t *testing.T) {
	start := time.Now()
	r, algos, sendB, recvB, half := newMatrixRig(t)
	rng := newRNG(t)
	for _, dt := range DTypes {
		e := dt.Size()
		per := 16 / e
		counts := []int{1, 2*per + per - 1, per, 4097, (1<<20)/e + 3, gpuBig / e}
		// LL: up to its limit (8 bytes = one line, a tail, exactly the
		// limit).
		llCounts := []int{1, 8 / e, 8/e + 1, 2*per + per - 1, 4097, DefaultLLMax / e, DefaultLLMax2/e - 1, DefaultLLMax2 / e}
		for _, op := range Ops {
			for _, algo := range []string{"ll", "one-shot", "two-shot"} {
				c := algos[algo]
				cs := counts
				if algo == "ll" {
					cs = llCounts
				}
				for _, count := range cs {
					for _, foreign := range []bool{false, true} {
						if foreign && count == gpuBig/e && (dt != F32 || op != Sum) {
							continue
						}
						for _, inPlace := range []bool{false, true} {
							s, d := r.buffers(foreign, inPlace, sendB, recvB, half)
							name := fmt.Sprintf("%v %v %s count %d foreign %v in-place %v", dt, op, algo, count, foreign, inPlace)
							t.Run(name, func(t *testing.T) {
								runAllReduce(t, r, c, rng, s, d, dt, op, count)
							})
						}
					}
				}
			}
		}
	}
	t.Logf("matrix took %v", time.Since(start))
}

// TestGPUCollsMatrix: reduce-scatter, all-gather and reduce, every dtype x
// op (all-gather: every dtype) x size (1 element, a tail, one vector,
// ragged slices, several blocks, 1 MiB, 64 MiB in all: f32 sum and bf16
// max only) x algorithm (LL, one-shot, two-shot, the reduce in two LL
// steps from 3 ranks; forced) x in/out of place
// x zero-copy/copy-in (64 MiB: zero-copy, plus copy-in for f32 sum), fresh
// random inputs,
// poisoned outputs and guards, every rank checked (a reduce's other ranks:
// recv untouched).
func TestGPUCollsMatrix(t *testing.T) {
	start := time.Now()
	r, algos, sendB, recvB, half := newMatrixRig(t)
	rng := newRNG(t)
	for _, coll := range threeColls {
		for _, dt := range DTypes {
			for _, op := range Ops {
				if coll == kernels.CollAllGather && op != Sum {
					continue
				}
				for _, algo := range []string{"ll", "one-shot", "two-shot", "ll-two", "push"} {
					if (algo == "two-shot" || algo == "ll-two" || algo == "push") && coll != kernels.CollReduce {
						continue // reduce-scatter and all-gather have one algorithm besides LL
					}
					gpuCollCases(t, r, algos[algo], rng, collOp{coll: coll, dt: dt, op: op}, algo, sendB, recvB, half)
				}
			}
		}
	}
	t.Logf("matrix took %v", time.Since(start))
}

// gpuCollCases runs o at every size of the matrix (LL: up to its limit per
// slice) and buffer mode.
func gpuCollCases(t *testing.T, r *gpuRig, c *Comm, rng *rand.Rand, o collOp, algo string, sendB, recvB team.Buffer, half uint64) {
	e := o.dt.Size()
	per := 16 / e
	div := r.n // the sliced side holds ranks x count elements
	if o.coll == kernels.CollReduce {
		div = 1
	}
	counts := []int{1, 2*per + per - 1, per, 3*per + 1, 4097, (1<<20)/e/div + 3, gpuBig / e / div}
	if algo == "ll" {
		counts = []int{1, 8 / e, 8/e + 1, 2*per + per - 1, 4097, DefaultLLMax / e, DefaultLLMax2/e - 1, DefaultLLMax2 / e}
	}
	if algo == "ll-two" { // above the LL limit, as far as the LL area holds two steps at 3 ranks
		counts = []int{DefaultLLMax/e + 1, DefaultLLMax/e + 8/e + 1, 3 * DefaultLLMax / 2 / e}
		if r.n >= 4 {
			counts = append(counts, 2*DefaultLLMax/e-1, 2*DefaultLLMax/e)
		}
		if r.n >= 3 {
			require.True(t, c.llTwo(uint64(counts[len(counts)-1]*e)), "the reduce in two LL steps")
		}
	}
	for _, count := range counts {
		o.count, o.root = count, count%r.n
		for mode := range 4 {
			foreign, inPlace := mode&1 != 0, mode&2 != 0
			// 64 MiB for f32 sum (copy-in too) and bf16 max (zero-copy)
			// only: every other pair runs the other sizes.
			big := count == gpuBig/e/div
			f32sum := o.dt == F32 && o.op == Sum
			if big && !f32sum && (foreign || o.dt != BF16 || (o.op != Max && o.coll != kernels.CollAllGather)) {
				continue
			}
			s, d := r.buffers(foreign, false, sendB, recvB, half)
			s, d = o.layout(s, d, inPlace)
			t.Run(fmt.Sprintf("%v %v %v %s count %d foreign %v in-place %v", o.coll, o.dt, o.op, algo, count, foreign, inPlace), func(t *testing.T) {
				runColl(t, r, c, rng, o, s, d)
			})
		}
	}
}

// TestGPUBroadcast: from every root, byte tails to 64 MiB, zero-copy and
// copy-in, in and out of place, and a root whose send is outside the
// workspace with symmetric recv buffers.
func TestGPUBroadcast(t *testing.T) {
	start := time.Now()
	half := uint64(gpuBig + 4096)
	r := newGPURig(t, 2*half+16<<20, 2*half)
	c := r.comm()
	sendB, recvB := r.alloc(half), r.alloc(half)
	rng := newRNG(t)
	type size struct {
		dt    DType
		count int
	}
	for root := range r.n {
		for _, sz := range []size{{F16, 1}, {F16, 7}, {U32, 4}, {BF16, 1021}, {U32, 300001}, {F32, gpuBig / 4}} {
			for mode := range 5 {
				foreign, inPlace := mode&1 != 0, mode&2 != 0
				s, d := r.buffers(foreign, inPlace, sendB, recvB, half)
				if mode == 4 {
					s[root] = r.foreign[root]
				}
				if sz.count == gpuBig/4 && foreign {
					continue
				}
				t.Run(fmt.Sprintf("root %d %v x %d mode %d", root, sz.dt, sz.count, mode), func(t *testing.T) {
					runBroadcast(t, r, c, rng, s, d, sz.dt, sz.count, root)
				})
			}
		}
	}
	t.Logf("broadcasts took %v", time.Since(start))
}

// TestGPUBarrier: 1000 barriers; every rank's start-barrier sequence of
// block 0 moved by 1000; reports the mean time.
func TestGPUBarrier(t *testing.T) {
	r := newGPURig(t, 8<<20, 0)
	c := r.comm()
	own := func(l int) uint64 { return c.ranks[l].own }
	before := make([]uint32, r.n)
	for l := range r.n {
		before[l] = le32(r.get(l, cuda.DevicePtr(own(l)+kabi.EpochOffset), 4))
	}
	const k = 1000
	start := time.Now()
	for range k {
		require.NoError(t, c.Barrier(context.Background(), r.streams))
	}
	require.NoError(t, c.Sync(context.Background(), r.streams))
	took := time.Since(start)
	for l := range r.n {
		seq := le32(r.get(l, cuda.DevicePtr(own(l)+kabi.EpochOffset), 4))
		assert.Equal(t, before[l]+k, seq, "rank %d sequence", l)
	}
	t.Logf("%d barriers on %d ranks: %v each (host launch + device, no graph)", k, r.n, took/k)
}

// TestGPUGraphReplay: an all-reduce per rank captured into a graph and
// replayed 10,000 times, inputs renewed and results checked every 1000:
// symmetric buffers (two-shot, bf16) and through the staging areas in
// chunks (u32, copies captured too).
func TestGPUGraphReplay(t *testing.T) {
	const replays, batch = 10000, 1000
	r := newGPURig(t, 64<<20, 16<<20)
	c := r.comm()
	require.NotZero(t, c.LLMax(), "the PTX has the LL kernels (NVLS_PTX_DIR: freshly generated PTX)")
	for _, tc := range []struct {
		name    string
		dt      DType
		op      Op
		count   int
		foreign bool
	}{
		{"symmetric bf16 sum", BF16, Sum, 1 << 20, false},
		{"staged u32 max", U32, Max, (5 << 20) / 4, true},
		{"LL 8 bytes f32 sum", F32, Sum, 2, false},
		{"LL cuMemAlloc 32 KiB u64 max", U64, Max, 4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := uint64(tc.count * tc.dt.Size())
			sendB, recvB := r.alloc(n+guardBytes), r.alloc(n+guardBytes)
			send, recv := r.ptrs(sendB), r.ptrs(recvB)
			if tc.foreign {
				copy(send, r.foreign)
			}
			rng := newRNG(t)
			ins := make([][]byte, r.n)
			fresh := func() {
				for l := range r.n {
					ins[l] = input(rng, tc.dt, tc.count)
					r.put(l, send[l], ins[l])
					r.put(l, recv[l], randomBytes(rng, int(n)))
				}
			}
			fresh()
			execs := make([]cuda.GraphExec, r.n)
			require.NoError(t, r.t.Run(team.JobFunc(func(l int) error {
				return r.d.StreamBeginCapture(r.streams[l], cuda.CaptureModeThreadLocal)
			})))
			aerr := c.AllReduce(context.Background(), send, recv, uint64(tc.count), tc.dt, tc.op, r.streams)
			require.NoError(t, r.t.Run(team.JobFunc(func(l int) error {
				g, err := r.d.StreamEndCapture(r.streams[l])
				if err != nil {
					return err
				}
				defer func() { _ = r.d.GraphDestroy(g) }()
				execs[l], err = r.d.GraphInstantiate(g)
				return err
			})))
			require.NoError(t, aerr)
			defer func() {
				for l, x := range execs {
					assert.NoError(t, onContext(r.d, r.t.Context(l), func() error { return r.d.GraphExecDestroy(x) }))
				}
			}()
			start := time.Now()
			for done := 0; done < replays; done += batch {
				// Replay i of every rank is enqueued before replay i+1 of
				// any: ranks that share a device share its context, and a
				// thread that runs far ahead can block in the driver (the
				// stream's queue full of kernels that wait for a peer)
				// while the peer's thread waits to enqueue (seen on one
				// H100 with 1000 replays per rank enqueued at once).
				for range batch {
					require.NoError(t, r.t.Run(team.JobFunc(func(l int) error {
						return r.d.GraphLaunch(execs[l], r.streams[l])
					})))
				}
				require.NoError(t, c.Sync(context.Background(), r.streams))
				gots := make([][]byte, r.n)
				for l := range r.n {
					gots[l] = r.get(l, recv[l], int(n))
				}
				msg, bad := checkParallel(tc.dt, tc.op, ins, gots, tc.count)
				require.Zero(t, bad, "after %d replays: %s", done+batch, msg)
				fresh()
			}
			t.Logf("%d replays checked in %v", replays, time.Since(start))
		})
	}
}

// TestGPUTimeout: the last rank never launches; the others' kernels give
// up after 1 s and Sync returns the error naming the operation and ranks
// well before its 30 s deadline; the team is broken; Close frees.
func TestGPUTimeout(t *testing.T) {
	r := newGPURig(t, 8<<20, 0)
	c := r.comm(WithTimeout(time.Second))
	b := r.alloc(1 << 20)
	c.skip = make([]bool, r.n)
	c.skip[r.n-1] = true
	require.NoError(t, c.AllReduce(context.Background(), r.ptrs(b), r.ptrs(b), 1<<18, F32, Sum, r.streams))
	c.skip = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Sync(ctx, r.streams)
	took := time.Since(start)
	t.Logf("Sync returned after %v: %v", took, err)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, team.ErrBroken)
	assert.Less(t, took, 10*time.Second)
	assert.Contains(t, err.Error(), fmt.Sprintf("rank %d reported no timeout", r.n-1))
	assert.ErrorIs(t, c.Barrier(context.Background(), r.streams), team.ErrBroken)
}

var soakFlag = flag.Bool("soak", false, "run TestGPUSoak (also: NVLS_SOAK=N, NVLS_SOAK_DURATION=d, or -test.run naming it)")

// soakPlan reads NVLS_SOAK (operations) and NVLS_SOAK_DURATION (a Go
// duration); with neither, 100000 operations when -test.run names the soak
// (or -soak), else skip.
func soakPlan(t *testing.T) (ops int, dur time.Duration) {
	ops, _, err := env.OS.Int("NVLS_SOAK", 1, math.MaxInt)
	require.NoError(t, err)
	dur, _, err = env.OS.Duration("NVLS_SOAK_DURATION")
	require.NoError(t, err)
	if ops == 0 && dur == 0 {
		run := flag.Lookup("test.run")
		if !*soakFlag && (run == nil || !strings.Contains(run.Value.String(), "Soak")) {
			t.Skip("the soak runs when named (-test.run GPUSoak), with -soak, or with NVLS_SOAK / NVLS_SOAK_DURATION")
		}
		ops = 100000
	}
	return ops, dur
}

// TestGPUSoak: mixed collectives until NVLS_SOAK operations or
// NVLS_SOAK_DURATION (whichever comes first): all-reduces of random type,
// operator, size (1 element to 1 MiB, log-uniform, now and then up to 16
// MiB), algorithm (default, forced one-shot, forced two-shot), in or out of
// place, symmetric or staged; broadcasts from random roots; barriers.
// reduce-scatters, all-gathers and reduces (random root) likewise. Every
// result is checked; it logs the count of operations and #wrong every 30 s
// and at the end, and fails if anything was wrong.
func TestGPUSoak(t *testing.T) {
	maxOps, maxDur := soakPlan(t)
	const big = 16 << 20
	half := uint64(big + 4096)
	r := newGPURig(t, 2*half+32<<20, 2*half)
	comms := []*Comm{r.comm(), r.comm(WithLLMax(0), WithOneShotMax(math.MaxUint64)), r.comm(WithLLMax(0), WithOneShotMax(0))}
	sendB, recvB := r.alloc(half), r.alloc(half)
	rng := newRNG(t)
	var ops, ars, bcs, bars, rss, ags, reds, wrong int
	start, last := time.Now(), time.Now()
	report := func(what string) {
		t.Logf("soak %s: %d ops (%d all-reduce, %d broadcast, %d barrier, %d reduce-scatter, %d all-gather, %d reduce), #wrong %d, %v elapsed",
			what, ops, ars, bcs, bars, rss, ags, reds, wrong, time.Since(start).Round(time.Second))
	}
	for (maxOps == 0 || ops < maxOps) && (maxDur == 0 || time.Since(start) < maxDur) {
		c := comms[rng.IntN(len(comms))]
		foreign, inPlace := rng.IntN(4) == 0, rng.IntN(2) == 0
		s, d := r.buffers(foreign, inPlace, sendB, recvB, half)
		dt := DTypes[rng.IntN(len(DTypes))]
		maxBytes := 1 << 20
		if rng.IntN(50) == 0 {
			maxBytes = big
		}
		count := max(1, int(math.Exp(rng.Float64()*math.Log(float64(maxBytes/dt.Size())))))
		var err error
		switch k := rng.IntN(16); {
		case k < 7:
			op := Ops[rng.IntN(len(Ops))]
			err = enqueueAllReduce(r, c, rng, s, d, dt, op, count).check(t, r, c)
			ars++
		case k < 9:
			err = broadcastChecked(r, c, rng, s, d, dt, count, rng.IntN(r.n))
			bcs++
		case k < 15:
			colls := [...]*int{&rss, &ags, &reds}
			i := (k - 9) / 2
			err = soakColl(r, c, rng, threeColls[i], dt, count, inPlace, foreign, sendB, recvB, half)
			*colls[i]++
		default:
			if err = c.Barrier(context.Background(), r.streams); err == nil {
				err = c.Sync(context.Background(), r.streams)
			}
			bars++
		}
		ops++
		if errors.Is(err, errWrong) {
			wrong++
			if wrong <= 10 {
				t.Errorf("op %d: %v", ops, err)
			}
		} else if err != nil {
			report("stopped")
			t.Fatalf("op %d: %v", ops, err)
		}
		if time.Since(last) >= 30*time.Second {
			report("progress")
			last = time.Now()
		}
	}
	report("done")
	assert.Zero(t, wrong)
}

// soakColl runs one reduce-scatter, all-gather or reduce of the soak, its
// sliced side holding at most the buffer (count scaled down to fit).
func soakColl(r *gpuRig, c *Comm, rng *rand.Rand, coll kernels.Coll, dt DType, count int, inPlace, foreign bool, sendB, recvB team.Buffer, half uint64) error {
	o := collOp{coll: coll, dt: dt, op: Ops[rng.IntN(len(Ops))], count: count, root: rng.IntN(r.n)}
	if coll != kernels.CollReduce {
		o.count = max(1, count/r.n)
	}
	s, d := r.buffers(foreign, false, sendB, recvB, half)
	s, d = o.layout(s, d, inPlace)
	return collChecked(r, c, rng, o, s, d)
}

// BenchmarkGPULaunch: the host cost of an 8-byte all-reduce (launch only,
// no sync) on the machine's GPUs, and the time of one including Sync.
func BenchmarkGPULaunch(b *testing.B) {
	r := newGPURig(b, 8<<20, 0)
	c := r.comm()
	a, d := r.alloc(4096), r.alloc(4096)
	send, recv := r.ptrs(a), r.ptrs(d)
	b.Run("enqueue", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := c.AllReduce(context.Background(), send, recv, 2, F32, Sum, r.streams); err != nil {
				b.Fatal(err)
			}
			if i++; i%1000 == 0 {
				require.NoError(b, c.Sync(context.Background(), r.streams))
			}
		}
		require.NoError(b, c.Sync(context.Background(), r.streams))
	})
	b.Run("enqueue+sync", func(b *testing.B) {
		for b.Loop() {
			if err := c.AllReduce(context.Background(), send, recv, 2, F32, Sum, r.streams); err != nil {
				b.Fatal(err)
			}
			if err := c.Sync(context.Background(), r.streams); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// TestGPULaunchFromCaller: a Comm that launches from the calling
// goroutine (WithLaunch(LaunchCaller)), switching to each GPU's context
// in turn, runs every algorithm and collective on fresh random data, in
// and out of place, on team buffers and cuMemAlloc memory, checked on
// every rank against the reference (the sliced collectives out of place:
// the matrices test their in-place layout), then a Barrier and its Sync.
func TestGPULaunchFromCaller(t *testing.T) {
	const size = 4 << 20
	r := newGPURig(t, 2*size, 2*size)
	c := r.comm(WithLaunch(LaunchCaller))
	require.Equal(t, LaunchCaller, c.via)
	sendB, recvB := r.alloc(size), r.alloc(size)
	rng := newRNG(t)
	for mode := range 4 {
		foreign, inPlace := mode&1 != 0, mode&2 != 0
		s, d := r.buffers(foreign, inPlace, sendB, recvB, size)
		for _, count := range []int{3, 5000, 70001, size/4/r.n - 5} { // LL, LL several blocks, one-shot or two-shot, two-shot
			t.Run(fmt.Sprintf("mode %d count %d", mode, count), func(t *testing.T) {
				runAllReduce(t, r, c, rng, s, d, F32, Sum, count)
				runBroadcast(t, r, c, rng, s, d, BF16, count, count%r.n)
				for _, o := range []collOp{
					{coll: kernels.CollReduceScatter, dt: F32, op: Sum, count: count / r.n},
					{coll: kernels.CollAllGather, dt: U32, count: count / r.n},
					{coll: kernels.CollReduce, dt: F16, op: Max, count: count, root: (count + 1) % r.n},
				} {
					if o.count == 0 || (inPlace && o.coll != kernels.CollReduce) {
						continue // in place, the sliced collectives want the sliced layout: the matrices test it
					}
					runColl(t, r, c, rng, o, s, d)
				}
			})
		}
	}
	require.NoError(t, c.Barrier(context.Background(), r.streams))
	require.NoError(t, c.Sync(context.Background(), r.streams))
}
