package collectives

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// The reduce's launch plan: one launch per rank and no copy when the send
// is symmetric and the root's recv is in its workspace (zero-copy: every
// rank stores its slice straight into the root's recv), the staged chunks
// only where a pointer needs them. Before, every two-shot reduce went
// through the root's staging area in chunks of the staging size, each
// chunk a launch on every rank and a copy on the root (nvls-bench, 256
// MiB on one H100 shared by 2 ranks: 128 chunks, 1827 us against the
// all-reduce's 397 us; docs/perf.md run 12).

// launchRec is one kernel launch as the driver saw it.
type launchRec struct {
	fn   cuda.Function
	grid uint32
}

// planRecorder wraps a Comm's driver and records its launches (function
// and grid); the sim's call log counts the launches and copies.
type planRecorder struct {
	cuda.Driver
	mu       sync.Mutex
	launches []launchRec
}

func (d *planRecorder) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	d.mu.Lock()
	d.launches = append(d.launches, launchRec{f, cfg.Grid.X})
	d.mu.Unlock()
	return d.Driver.LaunchKernelEx(f, cfg, params, paramSize)
}

// recordPlan makes f's Comm launch through a planRecorder.
func recordPlan(f *fixture) *planRecorder {
	d := &planRecorder{Driver: f.c.d}
	real := f.c.d
	f.c.d = d
	f.tb.Cleanup(func() { f.c.d = real })
	return d
}

// plan is what one call enqueued: its launches, and the copies of the
// sim's call log (cuMemcpyDtoDAsync).
type plan struct {
	launches []launchRec
	copies   int
}

// planOf runs call (which syncs) and returns its plan; every launch's
// count is checked against the sim's call log.
func planOf(t *testing.T, f *fixture, d *planRecorder, call func()) plan {
	t.Helper()
	f.sync()
	f.node.ResetCalls()
	d.mu.Lock()
	d.launches = nil
	d.mu.Unlock()
	call()
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Len(t, f.node.CallsOf("cuLaunchKernelEx"), len(d.launches), "launches: the recorder and the sim's call log")
	return plan{launches: append([]launchRec(nil), d.launches...), copies: len(f.node.CallsOf("cuMemcpyDtoDAsync"))}
}

// kernelOf asserts that every launch of p is kernel k, with grid.
func kernelOf(t *testing.T, f *fixture, p plan, k kernels.Kernel, grid uint64) {
	t.Helper()
	want := map[cuda.Function]bool{}
	for _, rs := range f.c.ranks {
		fn, ok := rs.mod.Func(k)
		require.True(t, ok, "%s loaded", k.Name())
		want[fn] = true
	}
	for _, l := range p.launches {
		assert.True(t, want[l.fn], "a launch of another kernel than %s", k.Name())
		assert.Equal(t, grid, uint64(l.grid), "%s grid", k.Name())
	}
}

// TestReduceZeroCopyPlan: on ranks sharing one GPU, as nvls-bench -g 1
// runs them (unicast, the grid clamped to the SMs over the ranks), a
// reduce of team buffers above the one-shot limit is one two-shot launch
// per rank with the all-reduce's grid and no copy, from every root, out of
// place and in place, and whatever the other ranks pass as recv; the
// results are right and no other rank's recv is touched. The staged chunks
// remain where a pointer needs them: a root recv outside the workspace or
// not 16-byte aligned (chunks of twice the staging size through the
// root's A and B, a copy out each), a send outside the workspace (copied
// in per chunk of the staging size, stored straight into the root's
// recv).
func TestReduceZeroCopyPlan(t *testing.T) {
	for _, ranks := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks on 1 GPU", ranks), func(t *testing.T) {
			const stage = 16 << 10
			f, _ := newSharedFixture(t, sharedConfig{gpus: 1, devs: make([]cuda.Device, ranks), foreign: 256 << 10,
				opts: []Option{WithLLMax(0), WithOneShotMax(4 << 10), WithStageBytes(stage)}})
			f.c.blockVecs = 16 // the largest grid from 64 KiB on
			d := recordPlan(f)
			rng := newRNG(t)
			o := collOp{coll: kernels.CollReduce, dt: F32, op: Sum, count: (128<<10)/4 + 3}
			bytes := uint64(o.count * 4)
			chunks := int((bytes + stage - 1) / stage)              // the send copied in through A
			stageChunks := int((bytes + 2*stage - 1) / (2 * stage)) // A and B the root's stage
			require.Greater(t, stageChunks, 1)
			sendB, recvB := f.alloc(bytes+guardBytes+16), f.alloc(bytes+guardBytes+16)
			send, recv := f.ptrs(sendB), f.ptrs(recvB)
			k := kernels.Kernel{Coll: kernels.CollReduce, Algo: kernels.TwoShot, DType: F32, Op: Sum}
			require.Equal(t, kernels.TwoShot, f.c.reduceAlgo(bytes, false))
			grid := f.c.grid(kernels.TwoShot, bytes)
			require.Equal(t, uint64(f.c.MaxGrid()), grid)
			ar := planOf(t, f, d, func() { runAllReduce(t, f, f.c, rng, send, recv, F32, Sum, o.count) })
			kernelOf(t, f, ar, kernels.Kernel{Coll: kernels.CollAllReduce, Algo: kernels.TwoShot, DType: F32, Op: Sum}, grid)

			zeroCopy := func(name string, s, r []cuda.DevicePtr) {
				t.Run(name, func(t *testing.T) {
					p := planOf(t, f, d, func() { runColl(t, f, f.c, rng, o, s, r) })
					assert.Len(t, p.launches, ranks, "one launch per rank")
					assert.Zero(t, p.copies, "copies")
					kernelOf(t, f, p, k, grid)
				})
			}
			staged := func(name string, s, r []cuda.DevicePtr, launches, copies int) {
				t.Run(name, func(t *testing.T) {
					p := planOf(t, f, d, func() { runColl(t, f, f.c, rng, o, s, r) })
					assert.Len(t, p.launches, launches, "launches")
					assert.Equal(t, copies, p.copies, "copies")
				})
			}
			for root := range ranks {
				o.root = root
				zeroCopy(fmt.Sprintf("root %d", root), send, recv)
				zeroCopy(fmt.Sprintf("root %d in place", root), send, send)
				only := make([]cuda.DevicePtr, ranks)
				only[root] = recv[root]
				zeroCopy(fmt.Sprintf("root %d, the others pass no recv", root), send, only)

				foreign := append([]cuda.DevicePtr(nil), recv...)
				foreign[root] = f.foreign[root]
				staged(fmt.Sprintf("root %d, recv outside the workspace", root), send, foreign, ranks*stageChunks, stageChunks)
				odd := append([]cuda.DevicePtr(nil), recv...)
				odd[root] += 4
				staged(fmt.Sprintf("root %d, recv not 16-byte aligned", root), send, odd, ranks*stageChunks, stageChunks)
				staged(fmt.Sprintf("root %d, send outside the workspace", root), f.foreign, recv, ranks*chunks, ranks*chunks)
			}
		})
	}
}

// TestReduceOneLaunchBothFlavors: on one GPU per rank, a reduce of team
// buffers is one launch per rank and no copy on both transports (unicast:
// two-shot into the root's recv; multicast: the root's one-shot).
func TestReduceOneLaunchBothFlavors(t *testing.T) {
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			const ranks = 3
			f := newFixture(t, fixtureConfig{ranks: ranks, transport: tr, opts: []Option{WithLLMax(0), WithOneShotMax(4 << 10), WithStageBytes(16 << 10)}})
			d := recordPlan(f)
			rng := newRNG(t)
			o := collOp{coll: kernels.CollReduce, dt: BF16, op: Max, count: (96<<10)/2 + 5, root: 1}
			bytes := uint64(o.count * 2)
			sendB, recvB := f.alloc(bytes+guardBytes), f.alloc(bytes+guardBytes)
			algo := f.c.reduceAlgo(bytes, true)
			p := planOf(t, f, d, func() { runColl(t, f, f.c, rng, o, f.ptrs(sendB), f.ptrs(recvB)) })
			assert.Len(t, p.launches, ranks, "one launch per rank")
			assert.Zero(t, p.copies, "copies")
			kernelOf(t, f, p, kernels.Kernel{Coll: kernels.CollReduce, Algo: algo, DType: BF16, Op: Max}, f.c.grid(algo, bytes))
		})
	}
}

// TestPerRankReduce: one Team and Comm per rank (team.NewRank, as under
// MPI), where no process sees the root's recv: every rank passing the
// root's recv buffer (the same team buffer) goes zero-copy, one launch per
// rank; a root recv outside the workspace with 0 on the other ranks goes
// staged, a launch per chunk of twice the staging size. Both right.
func TestPerRankReduce(t *testing.T) {
	const ranks, count, root = 3, 6000, 2
	node, boots := newPerRankNode(t, ranks, ranks)
	rng := newRNG(t)
	ins := make([][]byte, ranks)
	for r := range ranks {
		ins[r] = input(rng, F32, count)
	}
	res := make([]perRankReduce, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() { res[r] = runReduceRank(node, boots[r], r, root, ins[r], count) })
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, res[r].err, "rank %d", r)
	}
	for i, out := range res[root].outs {
		msg, bad := checkAllReduce(F32, Sum, ins, [][]byte{out}, count)
		assert.Zero(t, bad, "call %d: %s", i, msg)
	}
	chunks := (count*4 + 2*perRankStage - 1) / (2 * perRankStage) // A and B the root's stage
	for r := range ranks {
		assert.Equal(t, [2]int{1, chunks}, res[r].launches, "rank %d: launches, zero-copy and staged", r)
	}
}

const perRankStage = 4 << 10

// perRankReduce is what one rank of TestPerRankReduce saw: the root's
// results and every rank's launches, of the zero-copy call and the staged
// one.
type perRankReduce struct {
	outs     [2][]byte
	launches [2]int
	err      error
}

// runReduceRank is one rank's process of TestPerRankReduce: its team (on
// a planRecorder), its Comm, and the two reduces.
func runReduceRank(node *sim.Node, boot team.Bootstrap, r, root int, in []byte, count int) (res perRankReduce) {
	ctx := context.Background()
	d := &planRecorder{Driver: node}
	tm, err := team.NewRank(ctx, d, cuda.Device(r), boot, team.WithTransport(team.Unicast), team.WithWorkspaceSize(1<<20), team.WithLogger(quietLogger()))
	if err != nil {
		return perRankReduce{err: err}
	}
	defer func() { res.err = errors.Join(res.err, tm.Close()) }()
	c, err := New(tm, WithLLMax(0), WithOneShotMax(4096), WithStageBytes(perRankStage))
	if err != nil {
		return perRankReduce{err: err}
	}
	defer func() { res.err = errors.Join(res.err, c.Close()) }()
	a, errA := tm.Alloc(uint64(len(in)))
	b, errB := tm.Alloc(uint64(len(in)))
	if err := errors.Join(errA, errB); err != nil {
		return perRankReduce{err: err}
	}
	if err := node.WriteDevice(a.Ptr(0), in); err != nil {
		return perRankReduce{err: err}
	}
	var s cuda.Stream
	var foreign cuda.DevicePtr
	if err := tm.Run(team.JobFunc(func(int) (err error) {
		s, err = node.StreamCreate(cuda.StreamNonBlocking)
		if err == nil {
			foreign, err = node.MemAlloc(uint64(len(in)))
		}
		return err
	})); err != nil {
		return perRankReduce{err: err}
	}
	defer func() {
		res.err = errors.Join(res.err, tm.Run(team.JobFunc(func(int) error { return errors.Join(node.MemFree(foreign), node.StreamDestroy(s)) })))
	}()
	recvs := [2]cuda.DevicePtr{b.Ptr(0), 0}
	if r == root {
		recvs[1] = foreign
	}
	for i, recv := range recvs {
		res.outs[i], res.launches[i], res.err = reduceOnce(c, d, node, a.Ptr(0), recv, s, count, root, r == root, len(in))
		if res.err != nil {
			return res
		}
	}
	return res
}

// reduceOnce runs one reduce of TestPerRankReduce and returns the root's
// recv (on the root) and the launches it took.
func reduceOnce(c *Comm, d *planRecorder, node *sim.Node, send, recv cuda.DevicePtr, s cuda.Stream, count, root int, isRoot bool, n int) ([]byte, int, error) {
	ctx := context.Background()
	before := d.count()
	if err := c.Reduce(ctx, []cuda.DevicePtr{send}, []cuda.DevicePtr{recv}, uint64(count), F32, Sum, root, []cuda.Stream{s}); err != nil {
		return nil, 0, err
	}
	if err := c.Sync(ctx, []cuda.Stream{s}); err != nil {
		return nil, 0, err
	}
	launches := d.count() - before
	if !isRoot {
		return nil, launches, nil
	}
	out, err := node.ReadDevice(recv, n)
	return out, launches, err
}

// count is the number of launches recorded.
func (d *planRecorder) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.launches)
}

// TestReduceLLTwo: on the unicast transport a reduce above the LL limit
// runs the LL kernel in two steps (kabi.FlagLLTwo) up to WithLLTwoMax and
// as far as the LL area holds two slices a rank (n / 2 x the LL limit),
// one launch a rank on the pointers themselves, from every root, in and
// out of place, with a ragged tail; past either limit, and with the
// limit 0, the barrier kernels; on the multicast transport never. The
// results are checked as always.
func TestReduceLLTwo(t *testing.T) {
	const ll = 16 << 10
	runLLTwoCases(t, ll, WithLLTwoMax, []llTwoCase{
		{"4 ranks", 4, team.Unicast, DefaultLLTwoMax, []uint64{ll + 4, 2*ll - 28, 2 * ll}, []uint64{ll, 2*ll + 4}},
		{"3 ranks", 3, team.Unicast, DefaultLLTwoMax, []uint64{ll + 4, 3 * ll / 2}, []uint64{3*ll/2 + 8}},
		{"2 ranks", 2, team.Unicast, DefaultLLTwoMax, nil, []uint64{ll + 4}},
		{"4 ranks, limit", 4, team.Unicast, ll + 1024, []uint64{ll + 1024}, []uint64{ll + 1028}},
		{"4 ranks, off", 4, team.Unicast, 0, nil, []uint64{ll + 4}},
		{"4 ranks, multicast", 4, team.Multicast, DefaultLLTwoMax, nil, []uint64{ll + 4}},
	}, func(t *testing.T, f *fixture, rng *rand.Rand, send, recv []cuda.DevicePtr, bytes uint64, root int) {
		runColl(t, f, f.c, rng, collOp{coll: kernels.CollReduce, dt: F32, op: Sum, count: int(bytes / 4), root: root}, send, recv)
	}, func(t *testing.T, bytes uint64, two bool, fl uint32, msg string) {
		assert.Equal(t, two, fl&kabi.FlagLLTwo != 0, msg)
	})
}

// TestReducePushRouting: on the unicast transport from 3 ranks a reduce
// of team buffers from the push limit on runs the push reduce, one launch
// a rank with kabi.FlagPush and the grid the staging areas hold FIFOs
// for; below the limit, with the limit 0, in a team of 2, on the
// multicast transport, or with a send off a 16-byte boundary, it does
// not. From every root, in and out of place, the results checked.
func TestReducePushRouting(t *testing.T) {
	const limit = 512 << 10 // above DefaultLLTwoMax
	for _, tc := range []struct {
		name  string
		ranks int
		tr    team.Transport
		min   uint64
		shift uint64 // the send's offset into its buffer
		push  bool
		dt    DType
		ce    bool // the copy engines from the same size: they come first, out of place
	}{
		{"4 ranks", 4, team.Unicast, limit, 0, true, F32, false},
		{"3 ranks", 3, team.Unicast, limit, 0, true, F32, false},
		{"4 ranks, off", 4, team.Unicast, 0, 0, false, F32, false},
		{"4 ranks, below", 4, team.Unicast, 2 * limit, 0, false, F32, false},
		{"4 ranks, unaligned", 4, team.Unicast, limit, 4, false, F32, false},
		{"2 ranks", 2, team.Unicast, limit, 0, true, F32, false},
		{"2 ranks, copy engines on too", 2, team.Unicast, limit, 0, true, F32, true},
		{"1 rank", 1, team.Unicast, limit, 0, false, F32, false},
		{"4 ranks, multicast", 4, team.Multicast, limit, 0, false, F32, false},
		{"4 ranks, bf16: two-shot (no partial sum rounded at every hop)", 4, team.Unicast, limit, 0, false, BF16, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{WithRingMin(tc.min), WithRingBytes(2 << 20)}
			if tc.ce {
				opts = append(opts, WithCopyEngineMin(limit))
			}
			f := newFixture(t, fixtureConfig{ranks: tc.ranks, transport: tc.tr, opts: opts})
			rng := newRNG(t)
			const bytes = limit + 4*1000 + 12 // a tail past the last whole vector
			a, b := f.alloc(2*bytes+guardBytes), f.alloc(2*bytes+guardBytes)
			for root := range tc.ranks {
				for _, inPlace := range []bool{false, true} {
					send := f.ptrs(a)
					for l := range send {
						send[l] += cuda.DevicePtr(tc.shift)
					}
					recv := f.ptrs(b)
					if inPlace {
						recv = send
					}
					var grids []uint32
					d := &flagRecorder{Driver: f.c.d}
					f.c.d = d
					runColl(t, f, f.c, rng, collOp{coll: kernels.CollReduce, dt: tc.dt, op: Sum, count: bytes / tc.dt.Size(), root: root}, send, recv)
					f.c.d = d.Driver
					grids = d.grids
					msg := fmt.Sprintf("root %d in place %v: flags %#x grids %v", root, inPlace, d.flags, grids)
					if tc.push && !(tc.ce && !inPlace) {
						require.Len(t, d.flags, tc.ranks, msg)
						for r, fl := range d.flags {
							assert.Equal(t, uint32(kabi.FlagPush), fl&kabi.FlagPush, msg)
							assert.Equal(t, uint32(f.c.pushReduceGrid()), grids[r], msg)
						}
						// A 2 MiB FIFO: (2 MiB - the flags) / a block's slots.
						assert.Equal(t, (2<<20-uint64(kabi.PushFlagsBytes))/(kabi.PushDepth*kabi.RingChunks*kabi.BlockThreads*kabi.RingVecs*kabi.VecBytes), f.c.pushReduceGrid())
						continue
					}
					for _, fl := range d.flags {
						assert.Zero(t, fl&kabi.FlagPush, msg)
					}
				}
			}
		})
	}
}

// TestRingConfig: the ring's FIFO must hold one block's slots where the
// ring is on, and a workspace without room for it makes New fail naming
// it; with the ring off nothing is taken.
func TestRingConfig(t *testing.T) {
	_, err := resolve([]Option{WithRingMin(1), WithRingBytes(1 << 10)})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "WithRingBytes")
	_, err = resolve([]Option{WithRingBytes(1 << 10)})
	assert.NoError(t, err, "the ring off: its FIFO's size is not checked")

	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, opts: []Option{WithRingMin(1 << 20)}})
	assert.True(t, f.c.ringHeld)
	assert.Equal(t, uint64(DefaultRingBytes), f.c.ringBytes)
	off := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast})
	assert.False(t, off.c.ringHeld, "off by default")

	// A data area sized without the FIFO.
	ws, err := WorkspaceBytes(3)
	require.NoError(t, err)
	node := newSimNode(sim.Config{Devices: 3, MemoryPerDevice: 2*ws + 256<<20})
	tm, err := team.New(context.Background(), node, []cuda.Device{0, 1, 2}, team.WithTransport(team.Unicast),
		team.WithWorkspaceSize(ws), team.WithLogger(quietLogger()))
	require.NoError(t, err)
	defer func() { assert.NoError(t, tm.Close()) }()
	_, err = New(tm, WithRingMin(1<<20))
	require.Error(t, err)
	assert.ErrorIs(t, err, team.ErrNoSpace)
	assert.ErrorContains(t, err, "ring reduce's FIFO")
	c, err := New(tm)
	require.NoError(t, err, "the failed New gave back what it took")
	assert.NoError(t, c.Close())
}

// TestReducePullRouting: on the unicast transport a reduce from the pull
// limit on runs the one-shot kernel (the root alone loads every peer's
// send: kabi.FlagAbsRecv on every rank, no root slice), below it the
// two-shot; by default at 2 ranks from DefaultReducePullMin2, never at 3
// ranks or where 2 ranks share a GPU unless set. The copy engines and the
// ring come first where they apply. From every root, in and out of place,
// the results checked.
func TestReducePullRouting(t *testing.T) {
	const limit = 1 << 20
	const bytes = limit + 4*1000 + 12 // a tail past the last whole vector
	oneShot := func(fl uint32) bool { return fl&kabi.FlagAbsRecv != 0 && fl&(kabi.FlagRootSlice|kabi.FlagPush) == 0 }
	for _, tc := range []struct {
		name  string
		ranks int
		devs  []cuda.Device // ranks that share devices, else one a GPU
		tr    team.Transport
		opts  []Option
		pull  uint64 // the limit in effect
		ring  bool   // the ring takes it
		// copied: the send is cuMemAlloc memory (copied in, in chunks of
		// the staging size: two-shot whatever the limit)
		copied bool
	}{
		{"2 ranks", 2, nil, team.Unicast, []Option{WithReducePullMin(limit)}, limit, false, false},
		{"2 ranks, below", 2, nil, team.Unicast, []Option{WithReducePullMin(2 * limit)}, 2 * limit, false, false},
		{"2 ranks, off", 2, nil, team.Unicast, []Option{WithReducePullMin(0)}, 0, false, false},
		{"2 ranks, default", 2, nil, team.Unicast, nil, DefaultReducePullMin2, false, false},
		{"2 ranks, the ring first", 2, nil, team.Unicast, []Option{WithReducePullMin(limit), WithRingMin(limit), WithRingBytes(2 << 20)}, limit, true, false},
		{"3 ranks, default", 3, nil, team.Unicast, nil, 0, false, false},
		{"3 ranks, set", 3, nil, team.Unicast, []Option{WithReducePullMin(limit)}, limit, false, false},
		{"2 ranks on 1 GPU, default", 2, []cuda.Device{0, 0}, team.Unicast, nil, 0, false, false},
		{"2 ranks on 1 GPU, set", 2, []cuda.Device{0, 0}, team.Unicast, []Option{WithReducePullMin(limit)}, limit, false, false},
		{"2 ranks, the send copied in", 2, nil, team.Unicast, []Option{WithReducePullMin(limit)}, limit, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]Option{WithLLMax(0)}, tc.opts...)
			var f *fixture
			if tc.devs != nil {
				f, _ = newSharedFixture(t, sharedConfig{gpus: 1, devs: tc.devs, dataBytes: 8 << 20, opts: opts})
			} else {
				f = newFixture(t, fixtureConfig{ranks: tc.ranks, transport: tc.tr, opts: opts, foreign: 2*bytes + guardBytes})
			}
			assert.Equal(t, tc.pull, f.c.cfg.pullMin)
			assert.Equal(t, tc.pull, f.c.Settings().ReducePullMin)
			rng := newRNG(t)
			a, b := f.alloc(2*bytes+guardBytes), f.alloc(2*bytes+guardBytes)
			for root := range tc.ranks {
				for _, inPlace := range []bool{false, true} {
					send, recv := f.ptrs(a), f.ptrs(b)
					if tc.copied {
						copy(send, f.foreign)
					}
					if inPlace {
						recv = send
					}
					flags := launchFlags(f, func() {
						runColl(t, f, f.c, rng, collOp{coll: kernels.CollReduce, dt: F32, op: Sum, count: bytes / 4, root: root}, send, recv)
					})
					msg := fmt.Sprintf("root %d in place %v: flags %#x", root, inPlace, flags)
					if !tc.copied {
						require.Len(t, flags, tc.ranks, msg) // copied in: a launch a chunk
					}
					for _, fl := range flags {
						switch {
						case tc.ring:
							assert.NotZero(t, fl&kabi.FlagPush, msg)
						case tc.pull != 0 && bytes >= tc.pull && !tc.copied:
							assert.True(t, oneShot(fl), msg)
						default:
							assert.False(t, oneShot(fl), msg)
						}
					}
				}
			}
		})
	}
}
