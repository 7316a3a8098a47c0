package vmm_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/vmm"
)

// checkInvariants checks what must hold between any two calls.
func checkInvariants(t testing.TB, g *vmm.Growable) {
	t.Helper()
	l, m, c := g.Len(), g.Mapped(), g.Cap()
	require.LessOrEqual(t, l, m, "Len <= Mapped")
	require.LessOrEqual(t, m, c, "Mapped <= Cap")
	require.Zero(t, m%g.Chunk(), "Mapped is whole chunks")
	require.Zero(t, c%g.Chunk(), "Cap is whole chunks")
}

// fill writes fresh random bytes over [0, g.Len()) through the simulated
// memory and returns them.
func fill(t testing.TB, n *sim.Node, g *vmm.Growable) []byte {
	t.Helper()
	data := randBytes(int(g.Len()))
	require.NoError(t, n.WriteDevice(g.Ptr(), data))
	return data
}

// intact checks that the first len(want) bytes of g are want, read as
// device dev sees them (so access rights count).
func intact(t testing.TB, n *sim.Node, dev cuda.Device, g *vmm.Growable, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	require.NoError(t, n.Memory(dev).Load(g.Ptr(), got))
	require.Equal(t, want, got)
}

func TestGrowableKeepsBase(t *testing.T) {
	n := newNode(t, sim.Config{AllocGranularityMin: 64 << 10, AllocGranularityRecommended: 256 << 10})
	g, err := vmm.NewGrowable(n, 100<<10, vmm.GrowableOptions{Device: 1, Access: []cuda.Device{1, 2}, Reserve: 32 * mib})
	require.NoError(t, err)
	assert.Equal(t, uint64(256<<10), g.Chunk(), "chunk defaults to the recommended granularity")
	assert.Equal(t, uint64(32*mib), g.Cap())
	base := g.Ptr()
	data := fill(t, n, g)
	for g.Len() < g.Cap()-mib {
		step := rand.Uint64N(mib) + 1
		require.NoError(t, g.Grow(step))
		checkInvariants(t, g)
		assert.Equal(t, base, g.Ptr())
		assert.Equal(t, vmm.RoundUp(g.Len(), g.Chunk()), g.Mapped())
		intact(t, n, 2, g, data)
		data = append(data, randBytes(int(g.Len())-len(data))...)
		require.NoError(t, n.WriteDevice(g.Ptr(), data))
	}
	assert.Zero(t, g.Generation())
	assert.Equal(t, 1, g.Reservations())
	intact(t, n, 1, g, data)
	// Device 0 was not given access.
	assert.ErrorIs(t, n.Memory(0).Load(g.Ptr(), make([]byte, 4)), cuda.ErrIllegalAddress)
	// The chunks are on device 1, each its own allocation.
	assert.Equal(t, int(g.Mapped()/g.Chunk()), g.Allocations())
	dev, _, err := g.DeviceOf(g.Len() - 1)
	require.NoError(t, err)
	assert.Equal(t, cuda.Device(1), dev)
	ord, err := n.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, g.Ptr()+cuda.DevicePtr(g.Len()-1))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), ord)
	require.NoError(t, g.Close())
	assert.ErrorIs(t, g.Close(), vmm.ErrClosed)
	assert.ErrorIs(t, g.Grow(1), vmm.ErrClosed)
	noLeaks(t, n)
}

// When the reservation is full and the range after it is free, the driver
// grants the hint: the buffer spans two reservations and keeps its base.
func TestGrowableHintGranted(t *testing.T) {
	n := newNode(t, sim.Config{})
	g, err := vmm.NewGrowable(n, 3*mib, vmm.GrowableOptions{Device: 0, Reserve: 4 * mib, Chunk: 2 * mib})
	require.NoError(t, err)
	base := g.Ptr()
	data := fill(t, n, g)
	n.ResetCalls()
	require.NoError(t, g.Grow(4*mib)) // 7 MiB: past the 4 MiB reserved
	checkInvariants(t, g)
	reserves := n.CallsOf("cuMemAddressReserve")
	require.Len(t, reserves, 1)
	assert.Equal(t, uint64(base)+4*mib, reserves[0].Addr, "the hint is the end of the range")
	assert.Equal(t, base, g.Ptr())
	assert.Zero(t, g.Generation())
	assert.Equal(t, 2, g.Reservations())
	assert.Equal(t, uint64(8*mib), g.Cap(), "the range doubles")
	intact(t, n, 0, g, data)
	// One flat range across the two reservations.
	all := fill(t, n, g)
	intact(t, n, 0, g, all)
	require.NoError(t, g.Close())
	noLeaks(t, n)
}

// When something occupies the range after the end, the driver places the
// new range elsewhere: Grow moves the chunks, in order, without copying.
func TestGrowableHintRefused(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		n := newNode(t, sim.Config{})
		var moves [][2]cuda.DevicePtr
		g, err := vmm.NewGrowable(n, 5*mib, vmm.GrowableOptions{
			Device: 3, Access: []cuda.Device{3, 0}, Reserve: 8 * mib, Chunk: 2 * mib, Coalesce: coalesce,
			OnMove: func(old, new cuda.DevicePtr) { moves = append(moves, [2]cuda.DevicePtr{old, new}) },
		})
		require.NoError(t, err)
		require.NoError(t, g.Grow(mib))
		blocker, err := vmm.Reserve(n, 2*mib, 0, g.Ptr()+cuda.DevicePtr(g.Cap()))
		require.NoError(t, err)
		require.Equal(t, g.Ptr()+cuda.DevicePtr(g.Cap()), blocker.Ptr())
		old := g.Ptr()
		handles := handlesOf(t, g)
		data := fill(t, n, g)

		n.ResetCalls()
		require.NoError(t, g.Grow(5*mib)) // 11 MiB > 8 MiB
		checkInvariants(t, g)
		assert.NotEqual(t, old, g.Ptr())
		assert.Equal(t, uint64(1), g.Generation())
		assert.Equal(t, [][2]cuda.DevicePtr{{old, g.Ptr()}}, moves)
		assert.Equal(t, 1, g.Reservations())
		assert.Equal(t, uint64(16*mib), g.Cap())
		assert.Empty(t, n.CallsOf("cuMemcpyDtoD"), "no copy")
		// The old chunks are mapped in the new range in their order.
		assert.Equal(t, handles, handlesOf(t, g)[:len(handles)])
		for i, c := range n.CallsOf("cuMemMap")[:len(handles)] {
			assert.Equal(t, uint64(handles[i]), c.Arg)
			assert.Equal(t, uint64(g.Ptr())+uint64(i)*uint64(len(data))/uint64(len(handles)), c.Addr, "coalesce=%v chunk %d", coalesce, i)
		}
		// The data written before is intact, for both devices.
		intact(t, n, 3, g, data)
		intact(t, n, 0, g, data)
		// The old range is gone.
		_, err = n.ReadDevice(old, 8)
		assert.Error(t, err)
		assert.Equal(t, 2, n.Live().Reservations, "the new range and the blocker")
		require.NoError(t, g.Close())
		require.NoError(t, blocker.Close())
		noLeaks(t, n)
	}
}

func handlesOf(t testing.TB, g *vmm.Growable) []cuda.MemHandle {
	t.Helper()
	var hs []cuda.MemHandle
	for off := uint64(0); off < g.Mapped(); {
		_, h, err := g.DeviceOf(off)
		require.NoError(t, err)
		if len(hs) == 0 || hs[len(hs)-1] != h {
			hs = append(hs, h)
		}
		off += g.Chunk()
	}
	return hs
}

func TestGrowableShrink(t *testing.T) {
	n := newNode(t, sim.Config{Devices: 2})
	g, err := vmm.NewGrowable(n, 10*mib, vmm.GrowableOptions{Device: 1, Chunk: 2 * mib})
	require.NoError(t, err)
	data := fill(t, n, g)
	require.Equal(t, uint64(10*mib), n.Live().DeviceBytes[1])

	require.NoError(t, g.Shrink(3*mib)) // 7 MiB: chunks 0..3 stay
	checkInvariants(t, g)
	assert.Equal(t, uint64(7*mib), g.Len())
	assert.Equal(t, uint64(8*mib), g.Mapped())
	assert.Equal(t, 4, g.Allocations())
	assert.Equal(t, uint64(8*mib), n.Live().DeviceBytes[1], "the chunk past the end is released")
	intact(t, n, 1, g, data[:7*mib])
	_, err = n.ReadDevice(g.Ptr()+8*mib, 1)
	assert.Error(t, err, "unmapped")

	assert.ErrorIs(t, g.Shrink(8*mib), vmm.ErrOutOfRange)
	assert.Equal(t, uint64(7*mib), g.Len())
	require.NoError(t, g.Shrink(0))
	require.NoError(t, g.Shrink(7*mib))
	assert.Zero(t, g.Len())
	assert.Zero(t, g.Mapped())
	assert.Zero(t, g.Allocations())
	assert.Zero(t, n.Live().DeviceBytes[1])

	require.NoError(t, g.Grow(3*mib))
	checkInvariants(t, g)
	assert.Equal(t, uint64(4*mib), g.Mapped())
	require.NoError(t, g.Close())
	noLeaks(t, n)
}

func TestGrowableCoalesce(t *testing.T) {
	n := newNode(t, sim.Config{})
	g, err := vmm.NewGrowable(n, 0, vmm.GrowableOptions{Device: 2, Chunk: 2 * mib, Reserve: 8 * mib, Coalesce: true})
	require.NoError(t, err)
	require.NoError(t, g.Grow(5*mib))
	assert.Equal(t, 1, g.Allocations(), "one allocation per grow")
	assert.Equal(t, uint64(6*mib), g.Mapped())
	// Past the reservation: the hint is granted, and the new memory is
	// split where the reservations meet.
	require.NoError(t, g.Grow(6*mib))
	checkInvariants(t, g)
	assert.Equal(t, 2, g.Reservations())
	assert.Equal(t, 3, g.Allocations())
	data := fill(t, n, g)
	intact(t, n, 2, g, data)
	// Shrink releases whole allocations only.
	require.NoError(t, g.Shrink(2*mib)) // 9 MiB: the allocation at [8, 12) MiB stays
	assert.Equal(t, uint64(12*mib), g.Mapped())
	require.NoError(t, g.Shrink(2*mib)) // 7 MiB: [8, 12) goes
	assert.Equal(t, uint64(8*mib), g.Mapped())
	checkInvariants(t, g)
	intact(t, n, 2, g, data[:7*mib])
	require.NoError(t, g.Close())
	noLeaks(t, n)
}

func TestGrowableCompression(t *testing.T) {
	n := newNode(t, sim.Config{Compression: true})
	g, err := vmm.NewGrowable(n, 4*mib, vmm.GrowableOptions{Device: 0, Compress: true})
	require.NoError(t, err)
	assert.True(t, g.Compressed())
	require.NoError(t, g.Close())
	m := newNode(t, sim.Config{})
	g, err = vmm.NewGrowable(m, 4*mib, vmm.GrowableOptions{Device: 0, Compress: true})
	require.NoError(t, err)
	assert.False(t, g.Compressed(), "the device does not support it")
	require.NoError(t, g.Close())
	noLeaks(t, n)
	noLeaks(t, m)
}

func TestGrowableOptionErrors(t *testing.T) {
	n := newNode(t, sim.Config{})
	_, err := vmm.NewGrowable(n, 0, vmm.GrowableOptions{Device: 4})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.NewGrowable(n, 0, vmm.GrowableOptions{Device: 0, Access: []cuda.Device{}})
	assert.ErrorIs(t, err, vmm.ErrNoDevices)
	_, err = vmm.NewGrowable(n, 0, vmm.GrowableOptions{Device: 0, Chunk: 3 * mib})
	assert.ErrorIs(t, err, vmm.ErrNotAligned)
	_, err = vmm.NewGrowable(nil, 0, vmm.GrowableOptions{})
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
	g, err := vmm.NewGrowable(n, 2*mib, vmm.GrowableOptions{Device: 0})
	require.NoError(t, err)
	assert.ErrorIs(t, g.Grow(^uint64(0)), vmm.ErrOverflow)
	assert.Equal(t, uint64(2*mib), g.Len())
	_, err = vmm.NewGrowable(n, 2*mib, vmm.GrowableOptions{Device: 0, Reserve: 1 << 62}) // more than the simulated VA space
	assert.ErrorIs(t, err, cuda.ErrOutOfMemory)
	require.NoError(t, g.Close())
	noLeaks(t, n)
}

// growScenario is a Growable about to grow in one of the three ways.
type growScenario struct {
	name string
	// setup returns the Growable, something that must be closed after it
	// (or nil), and the grow to make.
	setup func(t *testing.T, n *sim.Node) (*vmm.Growable, *vmm.Reservation, uint64)
}

var growScenarios = []growScenario{
	{"in-place", func(t *testing.T, n *sim.Node) (*vmm.Growable, *vmm.Reservation, uint64) {
		g, err := vmm.NewGrowable(n, 3*mib, vmm.GrowableOptions{Device: 1, Access: []cuda.Device{0, 1}, Chunk: 2 * mib, Reserve: 16 * mib})
		require.NoError(t, err)
		return g, nil, 6 * mib
	}},
	{"hint-granted", func(t *testing.T, n *sim.Node) (*vmm.Growable, *vmm.Reservation, uint64) {
		g, err := vmm.NewGrowable(n, 3*mib, vmm.GrowableOptions{Device: 1, Access: []cuda.Device{0, 1}, Chunk: 2 * mib, Reserve: 4 * mib})
		require.NoError(t, err)
		return g, nil, 4 * mib
	}},
	{"moved", func(t *testing.T, n *sim.Node) (*vmm.Growable, *vmm.Reservation, uint64) {
		g, err := vmm.NewGrowable(n, 3*mib, vmm.GrowableOptions{Device: 1, Access: []cuda.Device{0, 1}, Chunk: 2 * mib, Reserve: 4 * mib})
		require.NoError(t, err)
		b, err := vmm.Reserve(n, 2*mib, 0, g.Ptr()+cuda.DevicePtr(g.Cap()))
		require.NoError(t, err)
		return g, b, 4 * mib
	}},
	{"moved-coalesced", func(t *testing.T, n *sim.Node) (*vmm.Growable, *vmm.Reservation, uint64) {
		g, err := vmm.NewGrowable(n, 3*mib, vmm.GrowableOptions{Device: 1, Access: []cuda.Device{0, 1}, Chunk: 2 * mib, Reserve: 4 * mib, Coalesce: true})
		require.NoError(t, err)
		require.NoError(t, g.Grow(mib))
		b, err := vmm.Reserve(n, 2*mib, 0, g.Ptr()+cuda.DevicePtr(g.Cap()))
		require.NoError(t, err)
		return g, b, 6 * mib
	}},
}

// A fault at any driver call of a Grow leaves the Growable as it was
// (or, for a failure past the point of no return, grown), usable, with its
// data, and Close leaks nothing.
func TestGrowableFaults(t *testing.T) {
	for _, sc := range growScenarios {
		t.Run(sc.name, func(t *testing.T) {
			// Count the calls of a clean grow.
			n := newNode(t, sim.Config{})
			g, b, step := sc.setup(t, n)
			n.ResetCalls()
			require.NoError(t, g.Grow(step))
			calls := n.CallCount()
			require.NoError(t, g.Close())
			if b != nil {
				require.NoError(t, b.Close())
			}
			noLeaks(t, n)

			for i := 1; i <= calls; i++ {
				n := newNode(t, sim.Config{})
				g, b, step := sc.setup(t, n)
				before := struct {
					l, m, c, gen uint64
					p            cuda.DevicePtr
					live         sim.Live
				}{g.Len(), g.Mapped(), g.Cap(), g.Generation(), g.Ptr(), n.Live()}
				data := fill(t, n, g)
				n.FailNth(i, cuda.ErrorUnknown)
				err := g.Grow(step)
				n.ClearFaults()
				checkInvariants(t, g)
				if err != nil {
					assert.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown}, "call %d", i)
					assert.Equal(t, before.l, g.Len(), "call %d", i)
					assert.Equal(t, before.m, g.Mapped(), "call %d", i)
					assert.Equal(t, before.c, g.Cap(), "call %d", i)
					assert.Equal(t, before.p, g.Ptr(), "call %d", i)
					assert.Equal(t, before.gen, g.Generation(), "call %d", i)
					live := n.Live()
					assert.Equal(t, before.live.Mappings, live.Mappings, "call %d", i)
					assert.Equal(t, before.live.Allocations, live.Allocations, "call %d", i)
					assert.Equal(t, before.live.Reservations, live.Reservations, "call %d", i)
					// Still usable.
					require.NoError(t, g.Grow(step), "call %d", i)
				} else {
					// A failure after the point of no return (unmapping or
					// freeing the old range) is kept for Close.
					assert.Equal(t, before.l+step, g.Len(), "call %d", i)
				}
				intact(t, n, 0, g, data)
				require.NoError(t, g.Close(), "call %d", i)
				if b != nil {
					require.NoError(t, b.Close())
				}
				noLeaks(t, n)
			}
		})
	}
}
