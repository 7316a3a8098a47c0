package collectives

import (
	"bytes"
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
	"github.com/nvls-go/nvls/team"
)

// runBroadcast writes a fresh input on the root and poison everywhere
// else, broadcasts, and checks every rank's recv, the guards, and that the
// root's send is untouched.
func runBroadcast(t testing.TB, r rig, c *Comm, rng *rand.Rand, send, recv []cuda.DevicePtr, dt DType, count, root int) {
	t.Helper()
	require.NoError(t, broadcastChecked(r, c, rng, send, recv, dt, count, root))
}

func broadcastChecked(r rig, c *Comm, rng *rand.Rand, send, recv []cuda.DevicePtr, dt DType, count, root int) error {
	n := count * dt.Size()
	in := input(rng, dt, count)
	guards := make([][]byte, r.size())
	for l := range r.size() {
		guards[l] = randomBytes(rng, guardBytes)
		if l != root || send[l] != recv[l] {
			r.put(l, recv[l], randomBytes(rng, n))
		}
		r.put(l, recv[l]+cuda.DevicePtr(n), guards[l])
	}
	r.put(root, send[root], in)
	if err := c.Broadcast(context.Background(), send, recv, uint64(count), dt, root, r.streamList()); err != nil {
		return err
	}
	if err := c.Sync(context.Background(), r.streamList()); err != nil {
		return err
	}
	for l := range r.size() {
		got := r.get(l, recv[l], n+guardBytes)
		if !bytes.Equal(in, got[:n]) {
			i := 0
			for i < n && in[i] == got[i] {
				i++
			}
			return fmt.Errorf("%w: rank %d: recv differs from root %d's send (%d bytes; first difference at byte %d)", errWrong, l, root, n, i)
		}
		if !bytes.Equal(guards[l], got[n:]) {
			return fmt.Errorf("%w: rank %d: the %d bytes after recv were overwritten", errWrong, l, guardBytes)
		}
	}
	if send[root] != recv[root] && n <= 1<<20 && !bytes.Equal(in, r.get(root, send[root], n)) {
		return fmt.Errorf("%w: the root's send was modified", errWrong)
	}
	return nil
}

// TestBroadcastMatrix: from every root, for 2, 3, 4 and 8 ranks and both
// transports, sizes with a byte tail, one vector and several chunks and
// blocks, zero-copy and copy-in, in and out of place; on the unicast
// transport also with every launch pushed (pushMin 0).
func TestBroadcastMatrix(t *testing.T) {
	type size struct {
		dt    DType
		count int
	}
	sizes := []size{{F16, 1}, {F16, 7}, {U32, 4}, {BF16, 1021}, {U64, 750}}
	modes := append(bufModes, bufMode{name: "root's send outside, recv symmetric"})
	for _, ranks := range []int{2, 3, 4, 8} {
		for _, tr := range transports() {
			pushes := []bool{false}
			if tr == team.Unicast && ranks > 2 {
				pushes = append(pushes, true)
			}
			for _, push := range pushes {
				t.Run(fmt.Sprintf("%d ranks %v push %v", ranks, tr, push), func(t *testing.T) {
					f := newMatrixFixture(t, ranks, tr)
					if push {
						f.c.pushMin = 0
					}
					rng := newRNG(t)
					sendB, recvB := f.alloc(matrixMax+guardBytes), f.alloc(matrixMax+guardBytes)
					for root := range ranks {
						for _, sz := range sizes {
							for i, m := range modes {
								send, recv := f.caseBuffers(m, sendB, recvB)
								if i == len(bufModes) {
									send[root] = f.foreign[root]
								}
								t.Run(fmt.Sprintf("root %d %v x %d %s", root, sz.dt, sz.count, m.name), func(t *testing.T) {
									runBroadcast(t, f, f.c, rng, send, recv, sz.dt, sz.count, root)
								})
							}
						}
					}
				})
			}
		}
	}
}

// TestBroadcastNonRootSendIgnored: ranks other than the root may pass 0
// (or anything) as send: it is not read.
func TestBroadcastNonRootSendIgnored(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20})
	b := f.alloc(4096)
	send := make([]cuda.DevicePtr, 3)
	send[1] = b.Ptr(1)
	runBroadcast(t, f, f.c, newRNG(t), send, f.ptrs(b), S32, 1000, 1)
}

// TestBroadcastDefaults: 1 MiB with the default options, zero-copy, one
// launch per rank with the default grid.
func TestBroadcastDefaults(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, dataBytes: 12 << 20})
	a, b := f.alloc(1<<20+guardBytes), f.alloc(1<<20+guardBytes)
	f.node.ResetCalls()
	runBroadcast(t, f, f.c, newRNG(t), f.ptrs(a), f.ptrs(b), F32, 1<<18, 3)
	launches := f.node.CallsOf("cuLaunchKernelEx")
	assert.Len(t, launches, 4)
}

// TestBroadcastSlicedWhere: the broadcast kernels run sliced (every rank
// copies a slice of the root's send) on the unicast transport with three
// ranks or more, all in this process; root-only on the multicast
// transport and with two ranks.
func TestBroadcastSlicedWhere(t *testing.T) {
	for _, tc := range []struct {
		tr    team.Transport
		ranks int
		want  bool
	}{{team.Unicast, 3, true}, {team.Unicast, 4, true}, {team.Unicast, 2, false}, {team.Multicast, 3, false}, {team.Unicast, 1, false}} {
		f := newFixture(t, fixtureConfig{ranks: tc.ranks, transport: tc.tr})
		assert.Equal(t, tc.want, f.c.slicedBroadcast(), "%v, %d ranks", tc.tr, tc.ranks)
	}
}

// TestPerRankBroadcastSliced: teams of one rank each (the shape of a job
// under mpirun) run the sliced broadcast, the root's send at an offset no
// other rank's send has: every rank learns where the root's data is from
// the root's kernel (kabi.RootSendOffset), not from its own arguments.
// Zero-copy (the root's send a team buffer) and staged (a foreign send on
// the root), 2 ranks (one slice) and 3, every root, fresh random data,
// the other ranks' sends poisoned.
func TestPerRankBroadcastSliced(t *testing.T) {
	for _, tc := range []struct {
		ranks int
		push  bool
	}{{2, false}, {3, false}, {3, true}} {
		t.Run(fmt.Sprintf("%d ranks push %v", tc.ranks, tc.push), func(t *testing.T) { perRankBroadcastSliced(t, tc.ranks, tc.push) })
	}
}

func perRankBroadcastSliced(t *testing.T, ranks int, push bool) {
	const count = 5001 // 20004 bytes: nranks-1 slices of whole vectors, the last with a 4-byte tail
	rt := newRankTeams(t, ranks, team.WithWorkspaceSize(withRoom(t, ranks, 2<<20, WithStageBytes(4<<10))))
	comms, errs := rt.newComms(context.Background(), rt.all(), func(int) []Option { return []Option{WithStageBytes(4 << 10)} })
	require.NoError(t, errors.Join(errs...))
	defer func() {
		for _, c := range comms {
			assert.NoError(t, c.Close())
		}
	}()
	if push {
		for _, c := range comms {
			c.pushMin = 0
		}
	}
	rng := newRNG(t)
	n := count * 4
	for root := range ranks {
		for _, staged := range []bool{false, true} {
			in := randomBytes(rng, n)
			outs := make([][]byte, ranks)
			var wg sync.WaitGroup
			for r := range ranks {
				poison := randomBytes(rng, n)
				wg.Go(func() {
					outs[r], errs[r] = perRankBroadcast(rt.node, rt.teams[r], comms[r], r == root, staged, in, poison, count, root)
				})
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...), "root %d, staged %v", root, staged)
			for r := range ranks {
				assert.True(t, bytes.Equal(in, outs[r]), "root %d, staged %v: rank %d's recv is not the root's send", root, staged, r)
			}
		}
	}
}

// perRankBroadcast is one rank's part of TestPerRankBroadcastSliced: recv a
// team buffer at the same offset on every rank; send a team buffer placed
// after a pad on the root (so that its offset is the root's alone), or, on
// a staged root, device memory outside the workspace; the others' send
// holds poison. It returns the rank's recv.
func perRankBroadcast(node *sim.Node, tm *team.Team, c *Comm, isRoot, staged bool, in, poison []byte, count, root int) (out []byte, err error) {
	ctx := context.Background()
	n := uint64(len(in))
	recv, err := tm.Alloc(n)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, tm.Free(recv)) }()
	if isRoot {
		pad, err := tm.Alloc(4096)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, tm.Free(pad)) }()
	}
	send, err := tm.Alloc(n)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, tm.Free(send)) }()
	sendPtr := send.Ptr(0)
	var s cuda.Stream
	var foreign cuda.DevicePtr
	if err := tm.Run(team.JobFunc(func(int) (err error) {
		if s, err = node.StreamCreate(cuda.StreamNonBlocking); err == nil && isRoot && staged {
			foreign, err = node.MemAlloc(n)
		}
		return err
	})); err != nil {
		return nil, err
	}
	defer func() {
		err = errors.Join(err, tm.Run(team.JobFunc(func(int) error {
			if foreign != 0 {
				err = node.MemFree(foreign)
			}
			return errors.Join(err, node.StreamDestroy(s))
		})))
	}()
	if foreign != 0 {
		sendPtr = foreign
	}
	data := poison
	if isRoot {
		data = in
	}
	if err := node.WriteDevice(sendPtr, data); err != nil {
		return nil, err
	}
	if err := node.WriteDevice(recv.Ptr(0), poison); err != nil {
		return nil, err
	}
	if err := c.Broadcast(ctx, []cuda.DevicePtr{sendPtr}, []cuda.DevicePtr{recv.Ptr(0)}, uint64(count), F32, root, []cuda.Stream{s}); err != nil {
		return nil, err
	}
	if err := c.Sync(ctx, []cuda.Stream{s}); err != nil {
		return nil, err
	}
	return node.ReadDevice(recv.Ptr(0), len(in))
}

// flagRecorder records the Flags and the grid of every kernel launched
// through it.
type flagRecorder struct {
	cuda.Driver
	mu    sync.Mutex
	flags []uint32
	grids []uint32
}

// launchFlags runs fn with every kernel launch of f's Comm recorded, and
// returns each launch's params flags, in launch order.
func launchFlags(f *fixture, fn func()) []uint32 {
	d := &flagRecorder{Driver: f.c.d}
	f.c.d = d
	defer func() { f.c.d = d.Driver }()
	fn()
	return d.flags
}

func (d *flagRecorder) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	d.mu.Lock()
	d.flags = append(d.flags, (*kabi.Params)(params).Flags)
	d.grids = append(d.grids, cfg.Grid.X)
	d.mu.Unlock()
	return d.Driver.LaunchKernelEx(f, cfg, params, paramSize)
}

// TestBroadcastLaunchesSliced: on the unicast transport (3 ranks) every
// rank's broadcast kernel is launched with kabi.FlagPush from pushMin
// bytes and with kabi.FlagSliced below (which only speed would otherwise
// show: the root alone copying gives the same bytes), and on the multicast
// transport with neither; the grid is a block a piece of the largest
// slice pushed, sized for a rank's share sliced, all of the data
// otherwise. The results are checked as always.
func TestBroadcastLaunchesSliced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tr      team.Transport
		pushMin uint64
		flag    uint32
		grid    uint32
	}{
		// 1 MiB is 65536 vectors: pushed, 32768 for each of the 2 ranks
		// other than the root, 16 pieces of 2048; sliced, 32769 (the
		// grid's rounding) in blocks of 10000, 4; the root alone, 65537,
		// 7.
		{"push", team.Unicast, 1 << 20, kabi.FlagPush, 16},
		{"sliced", team.Unicast, 1<<20 + 1, kabi.FlagSliced, 4},
		{"multicast", team.Multicast, 1 << 20, 0, 7},
	} {
		// Not in two LL steps: the barrier kernel's paths.
		f := newFixture(t, fixtureConfig{ranks: 3, transport: tc.tr, dataBytes: 12 << 20, opts: []Option{WithLLTwoBcastMax(0)}})
		require.GreaterOrEqual(t, f.c.maxGrid, uint64(16))
		require.Equal(t, uint64(defaultPushMin), f.c.pushMin)
		f.c.blockVecs, f.c.minGrid, f.c.pushMin = 10000, 0, tc.pushMin // the grid from the share alone
		d := &flagRecorder{Driver: f.c.d}
		f.c.d = d
		a, b := f.alloc(1<<20+guardBytes), f.alloc(1<<20+guardBytes)
		runBroadcast(t, f, f.c, newRNG(t), f.ptrs(a), f.ptrs(b), F32, 1<<18, 2)
		f.c.d = d.Driver
		require.Len(t, d.flags, 3, "%s: one launch per rank", tc.name)
		for r, fl := range d.flags {
			assert.Equal(t, tc.flag, fl&(kabi.FlagPush|kabi.FlagSliced), "%s: launch %d: flags %#x", tc.name, r, fl)
			assert.Equal(t, tc.grid, d.grids[r], "%s: launch %d: grid", tc.name, r)
		}
	}
}
