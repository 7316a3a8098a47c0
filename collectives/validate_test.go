package collectives

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// TestValidation: every kind of bad argument is an error naming what is
// wrong, before anything is launched or copied.
func TestValidation(t *testing.T) {
	const ranks = 3
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Multicast, dataBytes: 8 << 20, foreign: 64 << 10})
	a, b := f.alloc(64<<10), f.alloc(64<<10)
	send, recv := f.ptrs(a), f.ptrs(b)
	foreign := append([]cuda.DevicePtr(nil), f.foreign...)

	// Another team (unicast, same devices) with a Comm of its own.
	other, err := team.New(context.Background(), f.node, []cuda.Device{0, 1, 2}, team.WithTransport(team.Unicast),
		team.WithWorkspaceSize(8<<20), team.WithLogger(quietLogger()))
	require.NoError(t, err)
	oc, err := New(other)
	require.NoError(t, err)
	ob, err := other.Alloc(4096)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, other.Free(ob))
		assert.NoError(t, oc.Close())
		assert.NoError(t, other.Close())
	})

	with := func(p []cuda.DevicePtr, l int, v cuda.DevicePtr) []cuda.DevicePtr {
		q := append([]cuda.DevicePtr(nil), p...)
		q[l] = v
		return q
	}
	streams := f.streams
	dup := append([]cuda.Stream(nil), streams...)
	dup[2] = dup[0]
	ctx := context.Background()
	ar := func(s, r []cuda.DevicePtr, count uint64, dt DType, op Op, st []cuda.Stream) func() error {
		return func() error { return f.c.AllReduce(ctx, s, r, count, dt, op, st) }
	}
	bc := func(s, r []cuda.DevicePtr, count uint64, root int) func() error {
		return func() error { return f.c.Broadcast(ctx, s, r, count, U32, root, streams) }
	}
	own := f.c.ranks[1].own
	for _, tc := range []struct {
		name string
		call func() error
		want []string
		is   error
	}{
		{"too few send pointers", ar(send[:2], recv, 10, F32, Sum, streams), []string{"AllReduce", "2 send and 3 recv pointers for 3 local ranks"}, ErrInvalid},
		{"too many recv pointers", ar(send, append(recv, recv[0]), 10, F32, Sum, streams), []string{"3 send and 4 recv"}, ErrInvalid},
		{"too few streams", ar(send, recv, 10, F32, Sum, streams[:1]), []string{"1 streams for 3 local ranks"}, ErrInvalid},
		{"a stream for two ranks", ar(send, recv, 10, F32, Sum, dup), []string{"streams (rank 2)", "also given for rank 0", "belongs to one device"}, ErrInvalid},
		{"invalid dtype", ar(send, recv, 10, DType(9), Sum, streams), []string{"dtype/op", "invalid element type"}, kernels.ErrUnsupported},
		{"invalid op", ar(send, recv, 10, F32, Op(7), streams), []string{"invalid reduction operator"}, kernels.ErrUnsupported},
		{"count overflows", ar(send, recv, math.MaxUint64/2, F32, Sum, streams), []string{"count", "overflow 64 bits"}, ErrInvalid},
		{"nil send", ar(with(send, 1, 0), recv, 10, F32, Sum, streams), []string{"send[1] (rank 1): nil pointer"}, ErrInvalid},
		{"team pointer off its elements", ar(with(send, 2, send[2]+2), recv, 10, F32, Sum, streams), []string{"send[2] (rank 2)", "not aligned to its 4-byte elements"}, ErrInvalid},
		{"past the data area", ar(recv, recv, (8<<20)/4, F32, Sum, streams), []string{"send[0] (rank 0)", "run past the team's data area"}, ErrInvalid},
		{"signal area", ar(send, with(recv, 1, cuda.DevicePtr(own+kabi.CounterOffset)), 10, F32, Sum, streams), []string{"recv[1] (rank 1)", "signal area"}, ErrInvalid},
		{"peer mapping", ar(with(send, 0, a.PeerPtr(0, 1)), recv, 10, F32, Sum, streams), []string{"send[0] (rank 0)", "rank 1's workspace as device 0 maps it"}, ErrInvalid},
		{"multicast alias", ar(with(send, 0, a.MulticastPtr(0)), recv, 10, F32, Sum, streams), []string{"multicast alias"}, ErrInvalid},
		{"the collectives' staging area", ar(with(send, 0, f.c.stage.Ptr(0)), recv, 10, F32, Sum, streams), []string{"staging area"}, ErrInvalid},
		{"another team's buffer", ar(send, with(recv, 2, ob.Ptr(2)), 10, F32, Sum, streams), []string{"recv[2] (rank 2)", "another team's workspace"}, ErrInvalid},
		{"memory of another device", ar(with(foreign, 0, foreign[1]), foreign, 10, F32, Sum, streams), []string{"send[0] (rank 0)", "memory of device 1; rank 0 runs on device 0"}, ErrInvalid},
		{"past its allocation", ar(foreign, foreign, (64<<10)/4+1, F32, Sum, streams), []string{"run past the end of the allocation"}, ErrInvalid},
		{"not device memory", ar(with(send, 1, 0x1000), recv, 10, F32, Sum, streams), []string{"send[1] (rank 1)", "0x1000 is not device memory", "cuPointerGetAttribute"}, cuda.ErrInvalidValue},
		{"send and recv overlap", ar(send, send2(send, 16), 100, U32, Sum, streams), []string{"overlap without being the same buffer"}, ErrInvalid},
		{"broadcast root -1", bc(send, recv, 10, -1), []string{"Broadcast: root: -1 is out of range: the team has ranks 0 to 2"}, ErrInvalid},
		{"broadcast root past the team", bc(send, recv, 10, 3), []string{"root: 3 is out of range"}, ErrInvalid},
		{"broadcast nil recv", bc(send, with(recv, 2, 0), 10, 0), []string{"recv[2] (rank 2): nil pointer"}, ErrInvalid},
		{"broadcast the root's send off its elements", bc(with(send, 1, send[1]+6), recv, 10, 1), []string{"send[1] (rank 1)", "not aligned to its 4-byte elements"}, ErrInvalid},
		{"broadcast invalid dtype", func() error { return f.c.Broadcast(ctx, send, recv, 10, DType(6), 0, streams) }, []string{"invalid element type DType(6) (want one of f32, f16, bf16, s32, u32, u64)"}, ErrInvalid},
		{"barrier without streams", func() error { return f.c.Barrier(ctx, nil) }, []string{"Barrier", "0 streams for 3 local ranks"}, ErrInvalid},
		{"sync with too many streams", func() error { return f.c.Sync(ctx, append(streams, streams[0])) }, []string{"Sync", "4 streams"}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.node.ResetCalls()
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			if !errors.Is(tc.is, kernels.ErrUnsupported) {
				assert.ErrorIs(t, err, ErrInvalid)
			}
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), "launched despite the error")
			assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "copied despite the error")
		})
	}

	// Count 0 launches nothing and is fine, even with nil pointers; a
	// cancelled context launches nothing.
	f.node.ResetCalls()
	nils := make([]cuda.DevicePtr, ranks)
	assert.NoError(t, f.c.AllReduce(ctx, nils, nils, 0, BF16, Max, streams))
	assert.NoError(t, f.c.Broadcast(ctx, nils, nils, 0, BF16, 2, streams))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, f.c.AllReduce(cctx, send, recv, 10, F32, Sum, streams), context.Canceled)
	assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"))
	f.sync()

	// A closed Comm.
	c2, err := New(f.t, WithStageBytes(64<<10))
	require.NoError(t, err)
	require.NoError(t, c2.Close())
	require.NoError(t, c2.Close(), "a second Close is a no-op")
	assert.ErrorIs(t, c2.AllReduce(ctx, send, recv, 10, F32, Sum, streams), ErrClosed)
	assert.ErrorIs(t, c2.Barrier(ctx, streams), ErrClosed)
	assert.ErrorIs(t, c2.Sync(ctx, streams), ErrClosed)
}

func send2(p []cuda.DevicePtr, shift cuda.DevicePtr) []cuda.DevicePtr {
	q := make([]cuda.DevicePtr, len(p))
	for i := range p {
		q[i] = p[i] + shift
	}
	return q
}

// TestBrokenTeamRefused: a team marked broken by anyone refuses every
// collective before anything is launched, with the team's error.
func TestBrokenTeamRefused(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 8 << 20})
	b := f.alloc(4096)
	cause := errors.New("something fatal")
	f.c.tl.Fail(cause)
	f.node.ResetCalls()
	err := f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 10, F32, Sum, f.streams)
	assert.ErrorIs(t, err, team.ErrBroken)
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, f.c.Err(), cause)
	assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"))
}

// TestNewErrors: New refuses a nil team, options out of range, staging
// that does not fit.
func TestNewErrors(t *testing.T) {
	_, err := New(nil)
	assert.ErrorIs(t, err, ErrInvalid)
	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 8 << 20})
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithMaxGrid(0), "WithMaxGrid(0): want 1 to 256"},
		{WithMaxGrid(257), "WithMaxGrid(257)"},
		{WithTimeout(0), "WithTimeout(0s): want a positive duration"},
		{WithStageBytes(100), "WithStageBytes(100): want at least 4096 bytes"},
		{WithStageBytes(f.t.DataSize()), fmt.Sprintf("do not fit in the team's %d-byte data area", f.t.DataSize())},
	} {
		_, err := New(f.t, tc.opt)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, tc.want)
	}
	// Staging that fits the data area but not what is left of it (the
	// fixture's own Comm holds its WorkspaceBytes; 1 MiB is left).
	f.alloc(7 << 20)
	_, err = New(f.t, WithStageBytes(1<<20))
	assert.ErrorIs(t, err, team.ErrNoSpace)
	assert.ErrorContains(t, err, "allocating the staging areas")
}

// TestNewOnClosedTeam: New on a closed team says so once (it said it
// twice: allocating the staging areas, and agreeing with the other ranks).
func TestNewOnClosedTeam(t *testing.T) {
	node := newSimNode(sim.Config{Devices: 2})
	defer node.Close()
	tm, err := team.New(context.Background(), node, []cuda.Device{0, 1}, team.WithWorkspaceSize(8<<20), team.WithLogger(quietLogger()))
	require.NoError(t, err)
	require.NoError(t, tm.Close())
	_, err = New(tm)
	require.ErrorIs(t, err, team.ErrClosed)
	assert.Equal(t, 1, strings.Count(err.Error(), "team: closed"), err.Error())
	assert.NotContains(t, err.Error(), "\n")
}

// TestValidationVMMForeign: pointers outside the team into cuMemMap
// memory. The driver reports the whole reservation as their range (the
// differential run 12; cuda/sim models it), so that the range check alone
// would pass bytes that run past the mapping into unmapped addresses, or
// into another device's memory mapped next to it: both are refused before
// anything is launched, and bytes inside one mapping are fine.
func TestValidationVMMForeign(t *testing.T) {
	const ranks, gran = 3, 2 << 20
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast, dataBytes: 8 << 20, foreign: 64 << 10})
	recv := f.ptrs(f.alloc(64 << 10))
	n := f.node
	// Rank l's reservation, by granule: device l's memory, unmapped,
	// device l's memory, device l+1's memory (readable by device l).
	vm := make([]cuda.DevicePtr, ranks)
	for l := range ranks {
		r, err := n.MemAddressReserve(4*gran, 0, 0)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, n.MemAddressFree(r, 4*gran)) })
		for k, dev := range map[int]int{0: l, 2: l, 3: (l + 1) % ranks} {
			prop := cuda.DeviceAllocationProp(cuda.Device(dev), cuda.HandleNone)
			h, err := n.MemCreate(gran, &prop)
			require.NoError(t, err)
			at := r + cuda.DevicePtr(k*gran)
			require.NoError(t, n.MemMap(at, gran, 0, h))
			t.Cleanup(func() {
				assert.NoError(t, n.MemUnmap(at, gran))
				assert.NoError(t, n.MemRelease(h))
			})
			require.NoError(t, n.MemSetAccess(at, gran, []cuda.AccessDesc{{Location: cuda.DeviceLocation(cuda.Device(l)), Flags: cuda.AccessReadWrite}}))
		}
		vm[l] = r
	}
	at := func(off cuda.DevicePtr) []cuda.DevicePtr {
		p := make([]cuda.DevicePtr, ranks)
		for l := range p {
			p[l] = vm[l] + off
		}
		return p
	}
	ctx := context.Background()
	const count = 64 // f32: 256 bytes, the last one 128 bytes into the next granule
	for _, tc := range []struct {
		name string
		send []cuda.DevicePtr
		want string
		is   error
	}{
		{"into unmapped addresses", at(gran - 128), "(byte 255 of %#x) is not device memory", cuda.ErrInvalidValue},
		{"into another device's memory", at(3*gran - 128), "(byte 255 of %#x) is memory of device 1; rank 0 runs on device 0", ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.ResetCalls()
			err := f.c.AllReduce(ctx, tc.send, recv, count, F32, Sum, f.streams)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.ErrorContains(t, err, "send[0] (rank 0)")
			assert.ErrorContains(t, err, fmt.Sprintf(tc.want, uint64(tc.send[0])))
			assert.Empty(t, n.CallsOf("cuLaunchKernelEx"), "launched despite the error")
			assert.Empty(t, n.CallsOf("cuMemcpyDtoDAsync"), "copied despite the error")
		})
	}
	require.NoError(t, f.c.AllReduce(ctx, at(3*gran-256), recv, count, F32, Sum, f.streams), "256 bytes at the end of a mapping")
	f.sync()
}
