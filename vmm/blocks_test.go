package vmm_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/posixfd"
	"github.com/nvls-go/nvls/vmm"
)

func TestRoundUp(t *testing.T) {
	cases := []struct{ n, g, want uint64 }{
		{0, 2 * mib, 0},
		{1, 2 * mib, 2 * mib},
		{2 * mib, 2 * mib, 2 * mib},
		{2*mib + 1, 2 * mib, 4 * mib},
		{7, 3, 9},
		{math.MaxUint64 - 1, 1, math.MaxUint64 - 1},
		{math.MaxUint64, 1 << 21, 0}, // does not fit
		{5, 0, 0},                    // no granularity
	}
	for _, c := range cases {
		assert.Equal(t, c.want, vmm.RoundUp(c.n, c.g), "RoundUp(%d, %d)", c.n, c.g)
	}
	_, err := vmm.AlignUp(math.MaxUint64-5, 1<<20)
	assert.ErrorIs(t, err, vmm.ErrOverflow)
	_, err = vmm.AlignUp(5, 0)
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
}

func TestRoundUpProperties(t *testing.T) {
	for range 10000 {
		g := rand.Uint64N(1<<30) + 1
		n := rand.Uint64N(1 << 50)
		r := vmm.RoundUp(n, g)
		require.Zero(t, r%g, "n=%d g=%d", n, g)
		require.GreaterOrEqual(t, r, n)
		require.Less(t, r-n, g)
	}
}

func TestGranularity(t *testing.T) {
	n := newNode(t, sim.Config{AllocGranularityMin: 2 * mib, AllocGranularityRecommended: 8 * mib})
	g, err := vmm.Granularity(n, 1, cuda.HandlePosixFD, false)
	require.NoError(t, err)
	assert.Equal(t, uint64(2*mib), g)
	g, err = vmm.Granularity(n, 1, cuda.HandlePosixFD, true)
	require.NoError(t, err)
	assert.Equal(t, uint64(8*mib), g)

	_, err = vmm.Granularity(n, 4, cuda.HandleNone, false)
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.Granularity(n, -1, cuda.HandleNone, false)
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.Granularity(nil, 0, cuda.HandleNone, false)
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
}

func TestArgumentErrors(t *testing.T) {
	n := newNode(t, sim.Config{})
	_, err := vmm.Reserve(n, 0, 0, 0)
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
	_, err = vmm.Reserve(n, 2*mib, 3*mib, 0)
	assert.ErrorIs(t, err, vmm.ErrNotAligned)
	_, err = vmm.Reserve(n, 3*mib, 0, 0) // the driver's rule
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
	_, err = vmm.Reserve(nil, 2*mib, 0, 0)
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
	_, err = vmm.Reserve(n, 4*mib, 0, math.MaxUint64-mib)
	assert.ErrorIs(t, err, vmm.ErrOverflow)

	_, err = vmm.Create(n, 0, 0, vmm.AllocOptions{})
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
	_, err = vmm.Create(n, 0, 3*mib, vmm.AllocOptions{})
	assert.ErrorIs(t, err, vmm.ErrNotAligned)
	_, err = vmm.Create(n, 9, 2*mib, vmm.AllocOptions{})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.Create(nil, 0, 2*mib, vmm.AllocOptions{})
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
	_, err = vmm.CreateProp(n, 2*mib, cuda.AllocationProp{Type: cuda.AllocationPinned, Location: cuda.MemLocation{Type: cuda.LocationHost}})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)

	r, err := vmm.Reserve(n, 4*mib, 0, 0)
	require.NoError(t, err)
	a, err := vmm.Create(n, 0, 2*mib, vmm.AllocOptions{})
	require.NoError(t, err)
	_, err = vmm.Map(r, 0, 0, 2*mib)
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
	_, err = vmm.Map(r, 0, a.Handle(), 0)
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
	_, err = vmm.Map(r, 4*mib, a.Handle(), 2*mib)
	assert.ErrorIs(t, err, vmm.ErrOutOfRange)
	_, err = vmm.Map(r, math.MaxUint64-mib, a.Handle(), 2*mib)
	assert.ErrorIs(t, err, vmm.ErrOverflow)
	_, err = vmm.Map(nil, 0, a.Handle(), 2*mib)
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
	m, err := a.MapInto(r, 2*mib)
	require.NoError(t, err)
	assert.ErrorIs(t, m.SetAccess(nil, cuda.AccessReadWrite), vmm.ErrNoDevices)
	assert.ErrorIs(t, m.SetAccess([]cuda.Device{0, 7}, cuda.AccessReadWrite), vmm.ErrUnknownDevice)
	_, err = a.Export(cuda.HandlePosixFD) // created without export types
	assert.ErrorIs(t, err, vmm.ErrHandleType)
	_, err = vmm.Import(n, cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: -1})
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
	_, err = vmm.Import(n, cuda.ShareableHandle{Type: cuda.HandleWin32})
	assert.ErrorIs(t, err, vmm.ErrHandleType)

	// The reservation refuses to go while the mapping is open, without
	// asking the driver.
	n.ResetCalls()
	assert.ErrorIs(t, r.Close(), vmm.ErrBusy)
	assert.Empty(t, n.CallsOf("cuMemAddressFree"))
	assert.Equal(t, 1, r.Mapped())

	require.NoError(t, m.Close())
	require.NoError(t, a.Close())
	require.NoError(t, r.Close())
	assert.ErrorIs(t, m.Close(), vmm.ErrClosed)
	assert.ErrorIs(t, a.Close(), vmm.ErrClosed)
	assert.ErrorIs(t, r.Close(), vmm.ErrClosed)
	_, err = a.Props()
	assert.ErrorIs(t, err, vmm.ErrClosed)
	_, err = vmm.Map(r, 0, a.Handle(), 2*mib)
	assert.ErrorIs(t, err, vmm.ErrClosed)
	noLeaks(t, n)
}

func TestMapAccessAndData(t *testing.T) {
	n := newNode(t, sim.Config{Devices: 4})
	a, err := vmm.Create(n, 1, 4*mib, vmm.AllocOptions{})
	require.NoError(t, err)
	assert.Equal(t, cuda.Device(1), a.Device())
	assert.False(t, a.Imported())
	r, err := vmm.Reserve(n, 8*mib, 2*mib, 0)
	require.NoError(t, err)
	m, err := a.MapInto(r, 2*mib)
	require.NoError(t, err)
	assert.Equal(t, r.Ptr()+2*mib, m.Ptr())

	// Mapped but no rights yet: nobody may touch it.
	buf := make([]byte, 64)
	require.ErrorIs(t, n.Memory(1).Load(m.Ptr(), buf), cuda.ErrIllegalAddress)

	require.NoError(t, m.SetAccess([]cuda.Device{1, 2}, cuda.AccessReadWrite))
	for dev := range 4 {
		f, err := n.MemGetAccess(cuda.DeviceLocation(cuda.Device(dev)), m.Ptr())
		require.NoError(t, err)
		if dev == 1 || dev == 2 {
			assert.Equal(t, cuda.AccessReadWrite, f, "device %d", dev)
		} else {
			assert.Equal(t, cuda.AccessNone, f, "device %d", dev)
		}
	}
	data := randBytes(3 * mib)
	require.NoError(t, n.Memory(2).Store(m.Ptr()+mib/2, data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(1).Load(m.Ptr()+mib/2, got))
	assert.Equal(t, data, got)
	assert.ErrorIs(t, n.Memory(3).Load(m.Ptr(), buf), cuda.ErrIllegalAddress)
	// Outside the mapping, inside the reservation: not mapped.
	assert.ErrorIs(t, n.Memory(1).Load(r.Ptr(), buf), cuda.ErrIllegalAddress)

	// memcpy from device 1's context.
	inCtx(t, n, 1, func() {
		more := randBytes(mib)
		require.NoError(t, cuda.CopyHtoD(n, m.Ptr()+3*mib, more))
		back := make([]byte, mib)
		require.NoError(t, cuda.CopyDtoH(n, back, m.Ptr()+3*mib))
		assert.Equal(t, more, back)
	})

	// Revoke device 2.
	require.NoError(t, m.SetAccess([]cuda.Device{2}, cuda.AccessNone))
	assert.ErrorIs(t, n.Memory(2).Load(m.Ptr(), buf), cuda.ErrIllegalAddress)

	n.ResetCalls()
	require.NoError(t, m.Close())
	require.NoError(t, a.Close())
	require.NoError(t, r.Close())
	assert.Equal(t, []string{"cuMemUnmap", "cuMemRelease", "cuMemAddressFree"},
		opsOf(n, "cuMemUnmap", "cuMemRelease", "cuMemAddressFree"))
	noLeaks(t, n)
}

func TestCompression(t *testing.T) {
	for _, supported := range []bool{true, false} {
		n := newNode(t, sim.Config{Compression: supported})
		a, err := vmm.Create(n, 0, 2*mib, vmm.AllocOptions{Compress: true})
		require.NoError(t, err)
		assert.Equal(t, supported, a.Compressed(), "supported=%v", supported)
		p, err := a.Props()
		require.NoError(t, err)
		want := cuda.CompressionNone
		if supported {
			want = cuda.CompressionGeneric
		}
		assert.Equal(t, want, p.Flags.CompressionType)
		assert.Equal(t, cuda.DeviceLocation(0), p.Location)

		plain, err := vmm.Create(n, 0, 2*mib, vmm.AllocOptions{})
		require.NoError(t, err)
		assert.False(t, plain.Compressed())
		require.NoError(t, plain.Close())
		require.NoError(t, a.Close())
		noLeaks(t, n)
	}
}

func TestExportImport(t *testing.T) {
	n := newNode(t, sim.Config{})
	a, err := vmm.Create(n, 2, 4*mib, vmm.AllocOptions{Handles: cuda.HandlePosixFD})
	require.NoError(t, err)
	_, err = a.Export(cuda.HandleFabric)
	assert.ErrorIs(t, err, vmm.ErrHandleType)
	sh, err := a.Export(cuda.HandlePosixFD)
	require.NoError(t, err)
	require.GreaterOrEqual(t, sh.FD, 0)

	b, err := vmm.ImportSized(n, sh, 4*mib)
	require.NoError(t, posixfd.Close(sh.FD)) // imported: the FD may go
	require.NoError(t, err)
	assert.True(t, b.Imported())
	assert.Equal(t, cuda.Device(2), b.Device())
	assert.Equal(t, uint64(4*mib), b.Size())

	sh2, err := a.Export(cuda.HandlePosixFD)
	require.NoError(t, err)
	c, err := vmm.Import(n, sh2)
	require.NoError(t, posixfd.Close(sh2.FD))
	require.NoError(t, err)
	assert.Zero(t, c.Size())
	_, err = c.MapInto(nil, 0)
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
	require.NoError(t, c.Close())

	ra, err := vmm.Reserve(n, 4*mib, 0, 0)
	require.NoError(t, err)
	rb, err := vmm.Reserve(n, 4*mib, 0, 0)
	require.NoError(t, err)
	ma, err := a.MapInto(ra, 0)
	require.NoError(t, err)
	mb, err := b.MapInto(rb, 0)
	require.NoError(t, err)
	require.NoError(t, ma.SetAccess([]cuda.Device{2}, cuda.AccessReadWrite))
	require.NoError(t, mb.SetAccess([]cuda.Device{0}, cuda.AccessRead))

	data := randBytes(4 * mib)
	require.NoError(t, n.Memory(2).Store(ma.Ptr(), data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(0).Load(mb.Ptr(), got))
	assert.Equal(t, data, got, "the imported mapping sees the exporter's memory")
	assert.ErrorIs(t, n.Memory(0).Store(mb.Ptr(), data[:8]), cuda.ErrIllegalAddress, "read-only access")

	for _, c := range []interface{ Close() error }{ma, mb, a, b, ra, rb} {
		require.NoError(t, c.Close())
	}
	noLeaks(t, n)
}

func TestBuffer(t *testing.T) {
	n := newNode(t, sim.Config{AllocGranularityMin: 2 * mib, AllocGranularityRecommended: 4 * mib})
	b, err := vmm.NewBuffer(n, 1, 3*mib, vmm.BufferOptions{Access: []cuda.Device{1, 3}})
	require.NoError(t, err)
	assert.Equal(t, uint64(4*mib), b.Size())
	assert.Equal(t, cuda.Device(1), b.Device())
	assert.Equal(t, []cuda.Device{1, 3}, b.Access())
	ord, err := n.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, b.Ptr()+cuda.DevicePtr(b.Size())-1)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), ord)

	data := randBytes(int(b.Size()))
	require.NoError(t, n.Memory(3).Store(b.Ptr(), data))
	got, err := n.ReadDevice(b.Ptr(), len(data))
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.ErrorIs(t, n.Memory(0).Load(b.Ptr(), got[:4]), cuda.ErrIllegalAddress)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), vmm.ErrClosed)
	noLeaks(t, n)

	r, err := vmm.NewBuffer(n, 0, 1, vmm.BufferOptions{Recommended: true})
	require.NoError(t, err)
	assert.Equal(t, uint64(4*mib), r.Size())
	require.NoError(t, r.Close())

	_, err = vmm.NewBuffer(n, 0, 0, vmm.BufferOptions{})
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
	_, err = vmm.NewBuffer(n, 0, mib, vmm.BufferOptions{Access: []cuda.Device{5}})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	noLeaks(t, n)
}

// Every driver call NewBuffer makes can fail; each failure is returned and
// leaves nothing behind.
func TestBufferFaults(t *testing.T) {
	n := newNode(t, sim.Config{})
	n.ResetCalls()
	b, err := vmm.NewBuffer(n, 0, 2*mib, vmm.BufferOptions{Access: []cuda.Device{0, 1}, Handles: cuda.HandlePosixFD})
	require.NoError(t, err)
	calls := n.CallCount()
	require.NoError(t, b.Close())
	require.Greater(t, calls, 4)
	for i := 1; i <= calls; i++ {
		n.FailNth(i, cuda.ErrorOutOfMemory)
		b, err := vmm.NewBuffer(n, 0, 2*mib, vmm.BufferOptions{Access: []cuda.Device{0, 1}, Handles: cuda.HandlePosixFD})
		n.ClearFaults()
		require.ErrorIs(t, err, cuda.ErrOutOfMemory, "call %d", i)
		require.Nil(t, b)
		noLeaks(t, n)
	}
}

// A Close that fails part-way still releases the rest, and a second Close
// finishes the job.
func TestBufferCloseRetries(t *testing.T) {
	n := newNode(t, sim.Config{})
	b, err := vmm.NewBuffer(n, 0, 2*mib, vmm.BufferOptions{})
	require.NoError(t, err)
	n.ResetCalls()
	n.FailAt("cuMemUnmap", 1, cuda.ErrorUnknown)
	err = b.Close()
	var ce *cuda.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, cuda.ErrorUnknown, ce.Code)
	assert.Len(t, n.CallsOf("cuMemRelease"), 1, "the handle is released despite the failed unmap")
	assert.Empty(t, n.CallsOf("cuMemAddressFree"), "the range is not freed under a mapping")
	assert.Equal(t, 1, n.Live().Reservations)

	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), vmm.ErrClosed)
	noLeaks(t, n)
}

// SetAccess over two adjacent mappings at once.
func TestSetAccessRange(t *testing.T) {
	n := newNode(t, sim.Config{})
	r, err := vmm.Reserve(n, 4*mib, 0, 0)
	require.NoError(t, err)
	a, err := vmm.Create(n, 0, 2*mib, vmm.AllocOptions{})
	require.NoError(t, err)
	b, err := vmm.Create(n, 1, 2*mib, vmm.AllocOptions{})
	require.NoError(t, err)
	ma, err := a.MapInto(r, 0)
	require.NoError(t, err)
	mb, err := b.MapInto(r, 2*mib)
	require.NoError(t, err)
	require.NoError(t, vmm.SetAccess(n, r.Ptr(), 4*mib, []cuda.Device{3}, cuda.AccessReadWrite))
	data := randBytes(4 * mib)
	require.NoError(t, n.Memory(3).Store(r.Ptr(), data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(3).Load(r.Ptr(), got))
	assert.Equal(t, data, got)
	assert.ErrorIs(t, n.Memory(2).Load(r.Ptr(), got[:4]), cuda.ErrIllegalAddress)
	assert.ErrorIs(t, vmm.SetAccess(n, r.Ptr(), 0, []cuda.Device{3}, cuda.AccessReadWrite), vmm.ErrZeroSize)
	assert.ErrorIs(t, vmm.SetAccess(nil, r.Ptr(), 4*mib, []cuda.Device{3}, cuda.AccessReadWrite), vmm.ErrNilHandle)
	for _, c := range []interface{ Close() error }{ma, mb, a, b, r} {
		require.NoError(t, c.Close())
	}
	noLeaks(t, n)
}
