package collectives

import (
	"context"
	"fmt"
	"strings"
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

// Ranks sharing devices (team.WithSharedDevices) on the simulated node.
// The simulator runs each launch as one Go call on its stream's goroutine:
// it does not model blocks, so it cannot show the deadlock of more blocks
// than a device holds at once; these tests check the results, and that no
// launch's grid exceeds the share of the SMs that keeps every rank's
// blocks resident.

// launchRecorder records the grid of every kernel launch.
type launchRecorder struct {
	cuda.Driver
	mu    sync.Mutex
	grids []uint32
}

func (d *launchRecorder) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	d.mu.Lock()
	d.grids = append(d.grids, cfg.Grid.X)
	d.mu.Unlock()
	return d.Driver.LaunchKernelEx(f, cfg, params, paramSize)
}

func (d *launchRecorder) reset() []uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.grids
	d.grids = nil
	return g
}

type sharedConfig struct {
	gpus      int
	devs      []cuda.Device
	sm        int // the simulated devices' SM count (0: the default, 132)
	dataBytes uint64
	foreign   uint64
	opts      []Option
	// wrap, if set, wraps the driver the team is brought up on.
	wrap func(cuda.Driver) cuda.Driver
}

// newSharedFixture is newFixture over a device list that repeats devices,
// the team brought up with team.WithSharedDevices (auto transport) on a
// launch recorder.
func newSharedFixture(tb testing.TB, sc sharedConfig) (*fixture, *launchRecorder) {
	tb.Helper()
	if sc.dataBytes == 0 {
		sc.dataBytes = 8 << 20
	}
	sc.dataBytes = withRoom(tb, len(sc.devs), sc.dataBytes, sc.opts...)
	perDev := 0
	for _, d := range sc.devs {
		k := 0
		for _, e := range sc.devs {
			if e == d {
				k++
			}
		}
		perDev = max(perDev, k)
	}
	node := newSimNode(sim.Config{Devices: sc.gpus, SMCount: sc.sm, MemoryPerDevice: uint64(perDev)*(2*sc.dataBytes+2*sc.foreign) + 256<<20})
	rec := &launchRecorder{Driver: node}
	var drv cuda.Driver = rec
	if sc.wrap != nil {
		drv = sc.wrap(rec)
	}
	tm, err := team.New(context.Background(), drv, sc.devs, team.WithSharedDevices(),
		team.WithWorkspaceSize(sc.dataBytes), team.WithLogger(quietLogger()))
	require.NoError(tb, err)
	require.Equal(tb, team.Unicast, tm.Transport())
	n := len(sc.devs)
	f := &fixture{teamRig: newTeamRig(tb, tm, n), node: node}
	require.NoError(tb, f.open(node, sc.foreign))
	f.c, err = New(tm, sc.opts...)
	if err != nil {
		f.c = nil
		f.close()
		require.NoError(tb, err)
	}
	tb.Cleanup(f.close)
	return f, rec
}

var sharedLayouts = []struct {
	name string
	gpus int
	devs []cuda.Device
}{
	{"2 ranks on 1 GPU", 1, []cuda.Device{0, 0}},
	{"3 ranks on 1 GPU", 1, []cuda.Device{0, 0, 0}},
	{"4 ranks on 2 GPUs", 2, []cuda.Device{0, 1, 0, 1}},
}

// TestSharedDevicesCollectives: on 2 and 3 ranks over 1 GPU and 4 over 2,
// every dtype x op x size class x buffer mode of the one-shot and two-shot
// all-reduce, the LL all-reduce, broadcasts from every root, barriers (the
// counters moved by every rank), and the reduce-scatter, all-gather and
// reduce matrix, all right.
func TestSharedDevicesCollectives(t *testing.T) {
	for _, lay := range sharedLayouts {
		t.Run(lay.name, func(t *testing.T) {
			ranks := len(lay.devs)
			f, _ := newSharedFixture(t, sharedConfig{gpus: lay.gpus, devs: lay.devs, dataBytes: 1 << 20,
				foreign: max(4*(matrixMax+guardBytes), 2*collMax), opts: matrixOpts()})
			f.c.blockVecs = matrixBlock
			ll, err := New(f.t, WithLLMax(llTestMax), WithOneShotMax(8<<10), WithStageBytes(4<<10), WithMaxGrid(3))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, ll.Close()) })
			require.Equal(t, uint64(llTestMax), ll.LLMax())
			rng := newRNG(t)
			sendB, recvB := f.alloc(matrixMax+guardBytes), f.alloc(matrixMax+guardBytes)
			t.Run("all-reduce", func(t *testing.T) { runMatrix(t, f, rng, sendB, recvB) })
			t.Run("LL all-reduce", func(t *testing.T) {
				for _, dt := range DTypes {
					for _, sc := range llSizes {
						count := sc.count(dt.Size(), ranks)
						for _, m := range bufModes {
							send, recv := f.caseBuffers(m, sendB, recvB)
							t.Run(fmt.Sprintf("%v %s (%d) %s", dt, sc.name, count, m.name), func(t *testing.T) {
								require.Equal(t, kernels.LL, ll.algo(uint64(count*dt.Size())))
								runAllReduce(t, f, ll, rng, send, recv, dt, Sum, count)
							})
						}
					}
				}
			})
			t.Run("broadcast", func(t *testing.T) {
				for root := range ranks {
					for _, sz := range []struct {
						dt    DType
						count int
					}{{F16, 7}, {U32, 4}, {BF16, 1021}, {U64, 750}} {
						for _, m := range bufModes {
							send, recv := f.caseBuffers(m, sendB, recvB)
							t.Run(fmt.Sprintf("root %d %v x %d %s", root, sz.dt, sz.count, m.name), func(t *testing.T) {
								runBroadcast(t, f, f.c, rng, send, recv, sz.dt, sz.count, root)
							})
						}
					}
				}
			})
			t.Run("reduce-scatter, all-gather, reduce", func(t *testing.T) { runCollCases(t, f, rng, ranks) })
			t.Run("barrier", func(t *testing.T) {
				before := make([]uint32, ranks)
				for l := range ranks {
					before[l] = f.slot(l, kabi.EpochOffset, 0, 0)
				}
				const k = 20
				for range k {
					require.NoError(t, f.c.Barrier(context.Background(), f.streams))
				}
				f.sync()
				for l := range ranks {
					assert.Equal(t, before[l]+k, f.slot(l, kabi.EpochOffset, 0, 0), "rank %d start-barrier sequence", l)
				}
			})
		})
	}
}

// TestSharedDevicesBarrierOrders: a rank held back holds back the others,
// those of its own device included.
func TestSharedDevicesBarrierOrders(t *testing.T) {
	f, _ := newSharedFixture(t, sharedConfig{gpus: 1, devs: []cuda.Device{0, 0, 0}, foreign: 4096})
	checkBarrierHolds(t, f, 1)
}

// TestSharedDevicesGrid: where ranks share a device, the largest grid is
// the SM count over the most ranks on one device (at least 1): the
// default, and an explicit grid above it clamped with a note in its
// source; an explicit grid below it stays as given.
func TestSharedDevicesGrid(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus int
		devs []cuda.Device
		sm   int
		env  string // NVLS_GRID
		opts []Option
		want int
		src  string // gridSrc, or its start when it ends with "..."
	}{
		{"default, 2 on 1", 1, []cuda.Device{0, 0}, 0, "", nil, 66,
			"default (SM count 132 / 2 ranks per device, so that every rank's blocks are resident at once)"},
		{"default, 3 on 1", 1, []cuda.Device{0, 0, 0}, 0, "", nil, 44, "default (SM count 132 / 3 ranks per device..."},
		{"default, 4 on 2", 2, []cuda.Device{0, 1, 0, 1}, 0, "", nil, 66, "default (SM count 132 / 2 ranks per device..."},
		{"default, 3 on 2: the most ranks on a device", 2, []cuda.Device{0, 1, 0}, 0, "", nil, 66, "default (SM count 132 / 2 ranks per device..."},
		{"default, 8 on 1 GPU of 4 SMs: at least 1", 1, []cuda.Device{0, 0, 0, 0, 0, 0, 0, 0}, 4, "", nil, 1, "default (SM count 4 / 8 ranks per device..."},
		{"option above, clamped", 1, []cuda.Device{0, 0, 0}, 0, "", []Option{WithMaxGrid(100)}, 44,
			"WithMaxGrid (clamped from 100 to 44: 3 ranks share a device of 132 SMs, and every rank's blocks must be resident at once)"},
		{"env above, clamped", 1, []cuda.Device{0, 0}, 16, "12", nil, 8,
			"NVLS_GRID (clamped from 12 to 8: 2 ranks share a device of 16 SMs..."},
		{"option below, kept", 1, []cuda.Device{0, 0}, 0, "", []Option{WithMaxGrid(10)}, 10, "WithMaxGrid"},
		{"option at the limit, kept", 1, []cuda.Device{0, 0}, 0, "", []Option{WithMaxGrid(66)}, 66, "WithMaxGrid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(EnvGrid, tc.env)
			}
			f, _ := newSharedFixture(t, sharedConfig{gpus: tc.gpus, devs: tc.devs, sm: tc.sm, opts: tc.opts})
			assert.Equal(t, tc.want, f.c.MaxGrid())
			if s, ok := strings.CutSuffix(tc.src, "..."); ok {
				assert.True(t, strings.HasPrefix(f.c.cfg.gridSrc, s), "grid source %q", f.c.cfg.gridSrc)
			} else {
				assert.Equal(t, tc.src, f.c.cfg.gridSrc)
			}
			// Every rank's blocks fit on its device at once.
			sm := tc.sm
			if sm == 0 {
				sm = sim.DefaultSMCount
			}
			if f.c.tl.MaxRanksOnDevice() <= sm {
				assert.LessOrEqual(t, f.c.MaxGrid()*f.c.tl.MaxRanksOnDevice(), sm)
			}
		})
	}
}

// TestGridNotShared: a team of distinct devices keeps the full SM count,
// and an explicit grid above it is capped with a note.
func TestGridNotShared(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 16 << 20})
	assert.Equal(t, 132, f.c.MaxGrid())
	assert.Equal(t, gridSrcDefault, f.c.cfg.gridSrc)
	c, err := New(f.t, WithMaxGrid(200))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, 132, c.MaxGrid())
	assert.Equal(t, "WithMaxGrid (clamped from 200 to 132, the SM count)", c.cfg.gridSrc)
}

// TestSharedDevicesLaunchGrids: the launches of large all-reduces and
// broadcasts (many blocks of work) use the clamped grid and never more,
// so the ranks of a device together launch no more blocks than it has
// SMs.
func TestSharedDevicesLaunchGrids(t *testing.T) {
	f, rec := newSharedFixture(t, sharedConfig{gpus: 1, devs: []cuda.Device{0, 0, 0}, sm: 12, dataBytes: 1 << 20, opts: []Option{WithLLMax(0), WithStageBytes(64 << 10)}})
	f.c.blockVecs = 16 // 256 bytes of a rank's share per block
	require.Equal(t, 4, f.c.MaxGrid())
	rng := newRNG(t)
	a, b := f.alloc(64<<10+guardBytes), f.alloc(64<<10+guardBytes)
	rec.reset()
	runAllReduce(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), F32, Sum, (64<<10)/4)
	runBroadcast(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), U32, (64<<10)/4, 2)
	grids := rec.reset()
	require.Len(t, grids, 2*3, "one launch per rank per collective")
	for _, g := range grids {
		assert.Equal(t, uint32(4), g, "every launch at the clamped grid (12 SMs / 3 ranks)")
	}
}

// TestSharedDevicesKeepKernels: where ranks share a device the kernels
// take their one-GPU shapes (docs/perf.md run 57): no copy engines (the
// all-gather and the 2-rank broadcast above the copy-engine limit run
// kernels), no push, the broadcast sliced with the root's slice
// (kabi.FlagRootSlice) at 2 and 3 ranks, the two-shot all-reduce in one
// pass (kabi.FlagOnePass), the two-shot reduce with the root's slice; on
// devices of their own the same calls copy (the 2-rank reduce too), push
// or slice without the root, in two passes. The results are checked as
// always.
func TestSharedDevicesKeepKernels(t *testing.T) {
	const count = 64 << 10 // f32: 256 KiB a rank
	for _, tc := range []struct {
		name string
		gpus int
		devs []cuda.Device
		// want: the flags of every launch of each collective (push,
		// sliced, root slice, one pass), or copies for none.
		allReduce, broadcast, reduce uint32
		copies                       bool
	}{
		{"2 ranks on 1 GPU", 1, []cuda.Device{0, 0}, kabi.FlagOnePass, kabi.FlagSliced | kabi.FlagRootSlice, kabi.FlagRootSlice, false},
		{"3 ranks on 1 GPU", 1, []cuda.Device{0, 0, 0}, kabi.FlagOnePass, kabi.FlagSliced | kabi.FlagRootSlice, kabi.FlagRootSlice, false},
		{"2 ranks on 2 GPUs", 2, []cuda.Device{0, 1}, 0, 0, 0, true},
		{"3 ranks on 3 GPUs", 3, []cuda.Device{0, 1, 2}, 0, kabi.FlagPush, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newSharedFixture(t, sharedConfig{gpus: tc.gpus, devs: tc.devs, dataBytes: 8 << 20,
				opts: []Option{WithCopyEngineMin(256 << 10), WithLLMax(0), WithOneShotMax(0)}})
			f.c.pushMin = 0
			n := len(tc.devs)
			assert.Equal(t, tc.copies, f.c.usesCE())
			rng := newRNG(t)
			a, b := f.alloc(uint64(n*count*4+guardBytes)), f.alloc(uint64(n*count*4+guardBytes))
			d := &flagRecorder{Driver: f.c.d}
			f.c.d = d
			defer func() { f.c.d = d.Driver }()
			check := func(what string, want uint32, copies bool) {
				t.Helper()
				if copies {
					assert.NotZero(t, len(f.node.CallsOf("cuMemcpyDtoDAsync")), "%s: the copy engines", what)
				} else {
					assert.Zero(t, len(f.node.CallsOf("cuMemcpyDtoDAsync")), "%s: kernels, no copies", what)
					require.Len(t, d.flags, n, "%s: one kernel a rank", what)
				}
				for r, fl := range d.flags {
					if !copies || fl&^kabi.FlagLaunchDependents != 0 {
						assert.Equal(t, want, fl&(kabi.FlagPush|kabi.FlagSliced|kabi.FlagRootSlice|kabi.FlagOnePass), "%s: launch %d: flags %#x", what, r, fl)
					}
				}
				f.node.ResetCalls()
				d.flags, d.grids = nil, nil
			}
			f.node.ResetCalls()
			runColl(t, f, f.c, rng, collOp{coll: kernels.CollAllGather, dt: F32, count: count}, f.ptrs(a), f.ptrs(b))
			check("all-gather", 0, tc.copies)
			runBroadcast(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), F32, count, n-1)
			check("broadcast", tc.broadcast, tc.copies && n == 2)
			runAllReduce(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), F32, Sum, n*count)
			check("all-reduce", tc.allReduce, tc.copies)
			runColl(t, f, f.c, rng, collOp{coll: kernels.CollReduce, dt: F32, op: Sum, count: n * count, root: 1}, f.ptrs(a), f.ptrs(b))
			check("reduce", tc.reduce, tc.copies && n == 2)
		})
	}
}

// TestSharedDevicesPerRankTeams: one Team and one Comm per rank
// (team.NewRank, as under MPI, here with in-process bootstraps), 3 ranks
// on one GPU: each Comm sizes its grid from the whole team (every rank
// the same), and an LL and a one-shot all-reduce and a barrier come out
// right.
func TestSharedDevicesPerRankTeams(t *testing.T) {
	const ranks = 3
	node, boots := newPerRankNode(t, 1, ranks)
	rng := newRNG(t)
	counts := []int{3000, 40000} // f32: LL (12 KB), one-shot (160 KB)
	ins := make([][][]byte, len(counts))
	outs := make([][][]byte, len(counts))
	for i, n := range counts {
		ins[i], outs[i] = make([][]byte, ranks), make([][]byte, ranks)
		for r := range ranks {
			ins[i][r] = input(rng, F32, n)
		}
	}
	grids := make([]int, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			topts := []team.Option{team.WithSharedDevices(), team.WithWorkspaceSize(2 << 20)}
			errs[r] = withRankComm(node, 0, boots[r], topts, []Option{WithStageBytes(64 << 10)}, func(tm *team.Team, c *Comm, streams []cuda.Stream) error {
				ctx := context.Background()
				grids[r] = c.MaxGrid()
				for i, n := range counts {
					b, err := tm.Alloc(uint64(4 * n))
					if err != nil {
						return err
					}
					if err := node.WriteDevice(b.Ptr(0), ins[i][r]); err != nil {
						return err
					}
					p := []cuda.DevicePtr{b.Ptr(0)}
					if err := c.AllReduce(ctx, p, p, uint64(n), F32, Sum, streams); err != nil {
						return err
					}
					if err := c.Barrier(ctx, streams); err != nil {
						return err
					}
					if err := c.Sync(ctx, streams); err != nil {
						return err
					}
					if outs[i][r], err = node.ReadDevice(b.Ptr(0), 4*n); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, sim.DefaultSMCount/ranks, grids[r], "rank %d's grid", r)
	}
	for i, n := range counts {
		msg, bad := checkAllReduce(F32, Sum, ins[i], outs[i], n)
		assert.Zero(t, bad, "count %d: %s", n, msg)
	}
}

// TestSharedDevicesAgreedPerRank: one Team and one Comm per rank (as
// under MPI), ranks 0 and 1 on GPU 0 and rank 2 alone on GPU 1. Every
// Comm, rank 2's too, takes the shared shapes, since the team agreed that
// a device is shared, and a broadcast (sliced with the root's slice) and
// a two-shot all-reduce (one pass) from each rank's Comm come out right:
// had rank 2 cut the broadcast into nranks-1 slices where the others cut
// nranks, the recvs would hold stale bytes.
func TestSharedDevicesAgreedPerRank(t *testing.T) {
	const ranks, count = 3, 3 << 16 // f32: 768 KiB, above the LL and one-shot limits set below
	node, boots := newPerRankNode(t, 2, ranks)
	devs := []int{0, 0, 1}
	rng := newRNG(t)
	data := input(rng, F32, count)
	ins := make([][]byte, ranks)
	for r := range ranks {
		ins[r] = input(rng, F32, count)
	}
	shared := make([]bool, ranks)
	bcast, reduced := make([][]byte, ranks), make([][]byte, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			topts := []team.Option{team.WithSharedDevices(), team.WithTransport(team.Unicast), team.WithWorkspaceSize(16 << 20)}
			copts := []Option{WithStageBytes(64 << 10), WithLLMax(0), WithOneShotMax(0)}
			errs[r] = withRankComm(node, cuda.Device(devs[r]), boots[r], topts, copts, func(tm *team.Team, c *Comm, streams []cuda.Stream) error {
				ctx := context.Background()
				shared[r] = c.sharedDevs
				a, err := tm.Alloc(4 * count)
				if err != nil {
					return err
				}
				b, err := tm.Alloc(4 * count)
				if err != nil {
					return err
				}
				if r == 1 {
					if err := node.WriteDevice(a.Ptr(0), data); err != nil {
						return err
					}
				}
				if err := node.WriteDevice(b.Ptr(0), ins[r]); err != nil {
					return err
				}
				pa, pb := []cuda.DevicePtr{a.Ptr(0)}, []cuda.DevicePtr{b.Ptr(0)}
				if err := c.Broadcast(ctx, pa, pa, count, F32, 1, streams); err != nil {
					return err
				}
				if err := c.AllReduce(ctx, pb, pb, count, F32, Sum, streams); err != nil {
					return err
				}
				if err := c.Sync(ctx, streams); err != nil {
					return err
				}
				if bcast[r], err = node.ReadDevice(a.Ptr(0), 4*count); err != nil {
					return err
				}
				reduced[r], err = node.ReadDevice(b.Ptr(0), 4*count)
				return err
			})
		})
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
		assert.True(t, shared[r], "rank %d's Comm: a device of the team is shared", r)
		assert.Equal(t, data, bcast[r], "rank %d's broadcast", r)
	}
	msg, bad := checkAllReduce(F32, Sum, ins, reduced, count)
	assert.Zero(t, bad, "all-reduce: %s", msg)
}

// TestSharedDevicesPushReduce: where ranks share a device the ring
// reduce runs as anywhere once NVLS_RING_MIN turns it on (how the GPU
// matrices test it on one GPU): its grid stays within the rank's share of
// the SMs, and the results come out right.
func TestSharedDevicesPushReduce(t *testing.T) {
	const count = 256 << 10 // f32, 1 MiB
	t.Setenv(EnvRingMin, "1")
	t.Setenv(EnvRingBytes, "4M")
	f, _ := newSharedFixture(t, sharedConfig{gpus: 1, devs: []cuda.Device{0, 0, 0}, sm: 12, dataBytes: 8 << 20, opts: []Option{WithLLMax(0), WithOneShotMax(0)}})
	require.True(t, f.c.ringHeld)
	require.Equal(t, 4, f.c.MaxGrid())
	rng := newRNG(t)
	a, b := f.alloc(count*4+guardBytes), f.alloc(count*4+guardBytes)
	d := &flagRecorder{Driver: f.c.d}
	f.c.d = d
	defer func() { f.c.d = d.Driver }()
	runColl(t, f, f.c, rng, collOp{coll: kernels.CollReduce, dt: F32, op: Sum, count: count, root: 2}, f.ptrs(a), f.ptrs(b))
	require.Len(t, d.flags, 3)
	for r := range d.flags {
		assert.Equal(t, uint32(kabi.FlagPush), d.flags[r]&kabi.FlagPush, "rank %d", r)
		assert.LessOrEqual(t, d.grids[r], uint32(4), "rank %d: within 12 SMs / 3 ranks", r)
	}
}
