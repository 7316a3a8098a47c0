package sim

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/posixfd"
)

func TestMemCreateRules(t *testing.T) {
	n := newNode(t, Config{Devices: 2, MemoryPerDevice: 8 * mib})
	prop := cuda.DeviceAllocationProp(0, cuda.HandlePosixFD)

	_, err := n.MemCreate(mib, &prop)
	e := requireCode(t, err, "cuMemCreate", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "granularity")

	bad := cuda.DeviceAllocationProp(5, cuda.HandleNone)
	_, err = n.MemCreate(2*mib, &bad)
	requireCode(t, err, "cuMemCreate", cuda.ErrorInvalidDevice)

	fab := cuda.DeviceAllocationProp(0, cuda.HandleFabric)
	_, err = n.MemCreate(2*mib, &fab)
	requireCode(t, err, "cuMemCreate", cuda.ErrorNotSupported)

	unpinned := prop
	unpinned.Type = 0
	_, err = n.MemCreate(2*mib, &unpinned)
	requireCode(t, err, "cuMemCreate", cuda.ErrorInvalidValue)

	// Memory per device is enforced.
	h1, err := n.MemCreate(6*mib, &prop)
	require.NoError(t, err)
	_, err = n.MemCreate(4*mib, &prop)
	require.True(t, errors.Is(err, cuda.ErrOutOfMemory), "%v", err)
	// Another device has its own memory.
	prop1 := cuda.DeviceAllocationProp(1, cuda.HandlePosixFD)
	h2, err := n.MemCreate(8*mib, &prop1)
	require.NoError(t, err)
	require.Equal(t, []uint64{6 * mib, 8 * mib}, n.Live().DeviceBytes)
	require.NoError(t, n.MemRelease(h1))
	require.NoError(t, n.MemRelease(h2))
	require.NoError(t, n.CheckNoLeaks())
}

func TestCompressionDroppedUnlessSupported(t *testing.T) {
	for _, supported := range []bool{false, true} {
		n := newNode(t, Config{Compression: supported})
		prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
		prop.Flags.CompressionType = cuda.CompressionGeneric
		h, err := n.MemCreate(2*mib, &prop)
		require.NoError(t, err)
		got, err := n.MemGetAllocationPropertiesFromHandle(h)
		require.NoError(t, err)
		want := cuda.CompressionNone
		if supported {
			want = cuda.CompressionGeneric
		}
		require.Equal(t, want, got.Flags.CompressionType)
		require.Equal(t, cuda.DeviceLocation(0), got.Location)
		require.NoError(t, n.MemRelease(h))
	}
}

func TestNoVMM(t *testing.T) {
	n := newNode(t, Config{NoVMM: true})
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	_, err := n.MemCreate(2*mib, &prop)
	requireCode(t, err, "cuMemCreate", cuda.ErrorNotSupported)
	_, err = n.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
	requireCode(t, err, "", cuda.ErrorNotSupported)
	v, err := n.DeviceAttribute(cuda.AttrVirtualMemoryManagement, 0)
	require.NoError(t, err)
	require.Equal(t, 0, v)
}

func TestGranularityConfig(t *testing.T) {
	n := newNode(t, Config{AllocGranularityMin: 64 << 10, AllocGranularityRecommended: 2 * mib})
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	g, err := n.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
	require.NoError(t, err)
	require.Equal(t, uint64(64<<10), g)
	g, err = n.MemGetAllocationGranularity(&prop, cuda.GranularityRecommended)
	require.NoError(t, err)
	require.Equal(t, uint64(2*mib), g)
	h, err := n.MemCreate(64<<10, &prop)
	require.NoError(t, err)
	require.NoError(t, n.MemRelease(h))
}

func TestReserveHintAlignmentNoOverlap(t *testing.T) {
	n := newNode(t, Config{})
	a, err := n.MemAddressReserve(8*mib, 0, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, uint64(a), vaBase)
	require.Zero(t, uint64(a)%(2*mib))

	hint := cuda.DevicePtr(0x7f80_0000_0000)
	b, err := n.MemAddressReserve(4*mib, 0, hint)
	require.NoError(t, err)
	require.Equal(t, hint, b, "a free hint is honoured")

	c, err := n.MemAddressReserve(4*mib, 0, hint+2*mib)
	require.NoError(t, err)
	require.NotEqual(t, hint+2*mib, c, "an occupied hint is not")
	require.True(t, uint64(c)+4*mib <= uint64(hint) || uint64(c) >= uint64(hint)+4*mib)

	d, err := n.MemAddressReserve(2*mib, 1<<30, 0)
	require.NoError(t, err)
	require.Zero(t, uint64(d)%(1<<30))

	_, err = n.MemAddressReserve(3*mib, 0, 0)
	requireCode(t, err, "cuMemAddressReserve", cuda.ErrorInvalidValue)
	_, err = n.MemAddressReserve(2*mib, 3*mib, 0)
	requireCode(t, err, "cuMemAddressReserve", cuda.ErrorInvalidValue)

	ranges := [][2]uint64{{uint64(a), 8 * mib}, {uint64(b), 4 * mib}, {uint64(c), 4 * mib}, {uint64(d), 2 * mib}}
	for i := range ranges {
		for j := range ranges {
			if i != j {
				x, y := ranges[i], ranges[j]
				require.False(t, x[0] < y[0]+y[1] && y[0] < x[0]+x[1], "reservations %d and %d overlap", i, j)
			}
		}
	}
	err = n.MemAddressFree(a, 4*mib)
	requireCode(t, err, "cuMemAddressFree", cuda.ErrorInvalidValue)
	for _, r := range ranges {
		require.NoError(t, n.MemAddressFree(cuda.DevicePtr(r[0]), r[1]))
	}
	require.NoError(t, n.CheckNoLeaks())
}

func TestMapRules(t *testing.T) {
	n := newNode(t, Config{})
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	h, err := n.MemCreate(4*mib, &prop)
	require.NoError(t, err)
	p, err := n.MemAddressReserve(16*mib, 0, 0)
	require.NoError(t, err)

	// Only whole allocations are mapped: an offset, or a size other than
	// the allocation's, is CUDA_ERROR_NOT_SUPPORTED, whatever the address
	// (the driver's answers in the differential run of 2026-11-25).
	for _, x := range []struct {
		at        cuda.DevicePtr
		size, off uint64
		what      string
	}{
		{p, 2 * mib, 0, "part of the allocation"},
		{p, 2 * mib, 2 * mib, "the second half"},
		{p, 2 * mib, mib, "an offset off the granularity"},
		{p, 4 * mib, 4 * mib, "an offset at the end"},
		{p + mib, 2 * mib, 0, "part, at a misaligned address"},
		{p + 3*mib, 4 * mib, 2 * mib, "an offset, at a misaligned address"},
		{p, 3 * mib, 0, "a size off the granularity"},
		{p, 8 * mib, 0, "more than the allocation"},
	} {
		requireCode(t, n.MemMap(x.at, x.size, x.off, h), "cuMemMap", cuda.ErrorNotSupported)
	}
	// The whole allocation: the address must be aligned and inside one
	// reservation.
	requireCode(t, n.MemMap(p+mib, 4*mib, 0, h), "cuMemMap", cuda.ErrorInvalidValue)
	requireCode(t, n.MemMap(p+14*mib, 4*mib, 0, h), "cuMemMap", cuda.ErrorInvalidValue)
	requireCode(t, n.MemMap(p+16*mib, 4*mib, 0, h), "cuMemMap", cuda.ErrorInvalidValue)
	// Mapping over a mapped range.
	require.NoError(t, n.MemMap(p, 4*mib, 0, h))
	e := requireCode(t, n.MemMap(p+2*mib, 4*mib, 0, h), "cuMemMap", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "overlaps")
	// The same memory may be mapped twice at different addresses.
	require.NoError(t, n.MemMap(p+8*mib, 4*mib, 0, h))

	// Unmap only whole mappings.
	requireCode(t, n.MemUnmap(p, 2*mib), "cuMemUnmap", cuda.ErrorInvalidValue)
	requireCode(t, n.MemUnmap(p+2*mib, 2*mib), "cuMemUnmap", cuda.ErrorInvalidValue)
	require.NoError(t, n.MemUnmap(p+8*mib, 4*mib))

	require.NoError(t, n.MemUnmap(p, 4*mib))
	require.NoError(t, n.MemAddressFree(p, 16*mib))
	require.NoError(t, n.MemRelease(h))
	// A released handle cannot be mapped.
	q, err := n.MemAddressReserve(4*mib, 0, 0)
	require.NoError(t, err)
	requireCode(t, n.MemMap(q, 4*mib, 0, h), "cuMemMap", cuda.ErrorInvalidValue)
	require.NoError(t, n.MemAddressFree(q, 4*mib))
	require.NoError(t, n.CheckNoLeaks())
}

// TestAddressFreeRefusesMappings: cuMemAddressFree of a reservation with
// mappings left is CUDA_ERROR_INVALID_VALUE (the driver's answer in the
// differential run of 2026-11-25; its documentation says nothing of
// them), and it changes nothing: the mappings still work, and the range
// is freed once they are unmapped.
func TestAddressFreeRefusesMappings(t *testing.T) {
	n := newNode(t, Config{})
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	h, err := n.MemCreate(4*mib, &prop)
	require.NoError(t, err)
	p, err := n.MemAddressReserve(16*mib, 0, 0)
	require.NoError(t, err)
	require.NoError(t, n.MemMap(p, 4*mib, 0, h))
	require.NoError(t, n.MemMap(p+8*mib, 4*mib, 0, h))
	require.NoError(t, n.MemSetAccess(p, 4*mib, []cuda.AccessDesc{{Location: cuda.DeviceLocation(0), Flags: cuda.AccessReadWrite}}))
	requireCode(t, n.MemAddressFree(p, 4*mib), "cuMemAddressFree", cuda.ErrorInvalidValue)
	e := requireCode(t, n.MemAddressFree(p, 16*mib), "cuMemAddressFree", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "cuMemUnmap it first")
	l := n.Live()
	require.Equal(t, 2, l.Mappings)
	require.Equal(t, 1, l.Reservations)
	data := randBytes(t, 64)
	require.NoError(t, n.Memory(0).Store(p, data))
	got, err := n.ReadDevice(p+8*mib, len(data))
	require.NoError(t, err)
	require.Equal(t, data, got, "the second mapping shows the same memory")

	require.NoError(t, n.MemUnmap(p, 4*mib))
	requireCode(t, n.MemAddressFree(p, 16*mib), "cuMemAddressFree", cuda.ErrorInvalidValue)
	require.NoError(t, n.MemUnmap(p+8*mib, 4*mib))
	require.NoError(t, n.MemAddressFree(p, 16*mib))
	require.NoError(t, n.MemRelease(h))
	require.NoError(t, n.CheckNoLeaks())
}

// TestReserveHint: a hint that is not a multiple of the alignment is
// CUDA_ERROR_INVALID_VALUE (the driver's answer in the differential run of
// 2026-11-25: 12 MiB aligned to 4 MiB at a reservation aligned to 2 MiB
// only); an aligned hint at a free range is taken, at a reserved one
// another address is.
func TestReserveHint(t *testing.T) {
	n := newNode(t, Config{})
	a, err := n.MemAddressReserve(2*mib, 0, 0)
	require.NoError(t, err)
	b, err := n.MemAddressReserve(4*mib, 4*mib, 0)
	require.NoError(t, err)
	odd := a
	if odd%(4*mib) == 0 {
		odd = b + 2*mib
	}
	require.NotZero(t, odd%(4*mib))
	e := requireCode(t, errOf(n.MemAddressReserve(12*mib, 4*mib, odd)), "cuMemAddressReserve", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "alignment")
	// With the default alignment, the granularity.
	requireCode(t, errOf(n.MemAddressReserve(2*mib, 0, a+mib)), "cuMemAddressReserve", cuda.ErrorInvalidValue)
	require.Equal(t, 2, n.Live().Reservations, "nothing reserved")

	c, err := n.MemAddressReserve(4*mib, 4*mib, b)
	require.NoError(t, err)
	require.NotEqual(t, b, c, "b is taken: another range")
	require.Zero(t, c%(4*mib))
	free := alignUp(uint64(c)+64*mib, 4*mib)
	d, err := n.MemAddressReserve(4*mib, 4*mib, cuda.DevicePtr(free))
	require.NoError(t, err)
	require.Equal(t, cuda.DevicePtr(free), d, "a free aligned hint is taken")
	for _, x := range []struct {
		p    cuda.DevicePtr
		size uint64
	}{{a, 2 * mib}, {b, 4 * mib}, {c, 4 * mib}, {d, 4 * mib}} {
		require.NoError(t, n.MemAddressFree(x.p, x.size))
	}
	require.NoError(t, n.CheckNoLeaks())
}

func errOf[T any](_ T, err error) error { return err }

// TestGranularityAnyLocationID: cuMemGetAllocationGranularity does not
// check that the location's id is a device (the driver answered for id 1
// on a node of one GPU in the differential run of 2026-11-25), while
// cuMemCreate does.
func TestGranularityAnyLocationID(t *testing.T) {
	n := newNode(t, Config{Devices: 1, AllocGranularityRecommended: 4 * mib})
	prop := cuda.DeviceAllocationProp(1, cuda.HandlePosixFD)
	g, err := n.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
	require.NoError(t, err)
	require.Equal(t, uint64(2*mib), g)
	g, err = n.MemGetAllocationGranularity(&prop, cuda.GranularityRecommended)
	require.NoError(t, err)
	require.Equal(t, uint64(4*mib), g)
	_, err = n.MemCreate(2*mib, &prop)
	requireCode(t, err, "cuMemCreate", cuda.ErrorInvalidDevice)
	// The kind of location is still checked.
	prop.Location.Type = cuda.LocationHost
	_, err = n.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
	requireCode(t, err, "cuMemGetAllocationGranularity", cuda.ErrorInvalidValue)
}

func TestUnmapSeveralAdjacentMappings(t *testing.T) {
	n := newNode(t, Config{})
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	h1, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	h2, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	p, err := n.MemAddressReserve(4*mib, 0, 0)
	require.NoError(t, err)
	require.NoError(t, n.MemMap(p, 2*mib, 0, h1))
	require.NoError(t, n.MemMap(p+2*mib, 2*mib, 0, h2))
	// Access set over both mappings at once; a load crosses them.
	require.NoError(t, n.MemSetAccess(p, 4*mib, []cuda.AccessDesc{{Location: cuda.DeviceLocation(0), Flags: cuda.AccessReadWrite}}))
	data := randBytes(t, 4096)
	mem := n.Memory(0)
	require.NoError(t, mem.Store(p+2*mib-2048, data))
	got := make([]byte, len(data))
	require.NoError(t, mem.Load(p+2*mib-2048, got))
	require.Equal(t, data, got)
	require.NoError(t, n.MemUnmap(p, 4*mib))
	require.NoError(t, n.MemAddressFree(p, 4*mib))
	require.NoError(t, n.MemRelease(h1))
	require.NoError(t, n.MemRelease(h2))
	require.NoError(t, n.CheckNoLeaks())
}

func TestAccessRights(t *testing.T) {
	n := newNode(t, Config{Devices: 3, NoPeer: [][2]int{{0, 2}}})
	b := mapOn(t, n, 0, 2*mib)
	data := randBytes(t, 256)

	// No rights yet: every device faults.
	err := n.Memory(0).Store(b.ptr, data)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	require.Contains(t, err.Error(), "cuMemSetAccess")
	f, err := n.MemGetAccess(cuda.DeviceLocation(0), b.ptr)
	require.NoError(t, err)
	require.Equal(t, cuda.AccessNone, f)

	require.NoError(t, n.MemSetAccess(b.ptr, b.size, []cuda.AccessDesc{
		{Location: cuda.DeviceLocation(0), Flags: cuda.AccessReadWrite},
		{Location: cuda.DeviceLocation(1), Flags: cuda.AccessRead},
	}))
	require.NoError(t, n.Memory(0).Store(b.ptr, data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(1).Load(b.ptr, got))
	require.Equal(t, data, got)
	// Read-only device cannot write; device 2 cannot touch it.
	err = n.Memory(1).Store(b.ptr, data)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	_, err = n.Memory(1).AtomicAddU32(b.ptr, 1)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	err = n.Memory(2).Load(b.ptr, got)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	f, err = n.MemGetAccess(cuda.DeviceLocation(1), b.ptr+4096)
	require.NoError(t, err)
	require.Equal(t, cuda.AccessRead, f)

	// No peer access between 0 and 2.
	err = n.MemSetAccess(b.ptr, b.size, []cuda.AccessDesc{{Location: cuda.DeviceLocation(2), Flags: cuda.AccessReadWrite}})
	requireCode(t, err, "cuMemSetAccess", cuda.ErrorInvalidDevice)
	// Only mapped ranges, whole mappings.
	err = n.MemSetAccess(b.ptr, 4*mib, []cuda.AccessDesc{{Location: cuda.DeviceLocation(0), Flags: cuda.AccessReadWrite}})
	requireCode(t, err, "cuMemSetAccess", cuda.ErrorInvalidValue)
	// Unmapped address faults, and MemGetAccess refuses it.
	err = n.Memory(0).Load(b.ptr+cuda.DevicePtr(b.size), got)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	_, err = n.MemGetAccess(cuda.DeviceLocation(0), b.ptr+cuda.DevicePtr(b.size))
	requireCode(t, err, "cuMemGetAccess", cuda.ErrorInvalidValue)

	// Rights go with the mapping.
	require.NoError(t, n.MemUnmap(b.ptr, b.size))
	require.NoError(t, n.MemMap(b.ptr, b.size, 0, b.h))
	err = n.Memory(0).Load(b.ptr, got)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	// The memory kept its contents through the remap.
	oracle, err := n.ReadDevice(b.ptr, len(data))
	require.NoError(t, err)
	require.Equal(t, data, oracle)
	b.free(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

// TestSetAccessLocations: the driver's answers in the differential run of
// 2026-11-25: a location id that is no device is CUDA_ERROR_INVALID_VALUE;
// the host may be given no access (nothing changes), read or read-write
// access to it is CUDA_ERROR_NOT_SUPPORTED.
func TestSetAccessLocations(t *testing.T) {
	n := newNode(t, Config{Devices: 1})
	b := mapOn(t, n, 0, 2*mib)
	set := func(loc cuda.MemLocation, f cuda.AccessFlags) error {
		return n.MemSetAccess(b.ptr, b.size, []cuda.AccessDesc{{Location: loc, Flags: f}})
	}
	requireCode(t, set(cuda.DeviceLocation(1), cuda.AccessReadWrite), "cuMemSetAccess", cuda.ErrorInvalidValue)
	requireCode(t, set(cuda.MemLocation{Type: cuda.LocationDevice, ID: -1}, cuda.AccessReadWrite), "cuMemSetAccess", cuda.ErrorInvalidValue)
	host := cuda.MemLocation{Type: cuda.LocationHost}
	requireCode(t, set(host, cuda.AccessReadWrite), "cuMemSetAccess", cuda.ErrorNotSupported)
	requireCode(t, set(host, cuda.AccessRead), "cuMemSetAccess", cuda.ErrorNotSupported)
	require.NoError(t, set(cuda.DeviceLocation(0), cuda.AccessRead))
	require.NoError(t, set(host, cuda.AccessNone))
	f, err := n.MemGetAccess(cuda.DeviceLocation(0), b.ptr)
	require.NoError(t, err)
	require.Equal(t, cuda.AccessRead, f, "no access for the host changed nothing for the device")
	requireCode(t, set(cuda.MemLocation{Type: cuda.LocationInvalid}, cuda.AccessNone), "cuMemSetAccess", cuda.ErrorInvalidValue)
	b.free(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

func TestReleaseWhileMapped(t *testing.T) {
	n := newNode(t, Config{})
	b := mapOn(t, n, 0, 2*mib, 0)
	data := randBytes(t, 1000)
	require.NoError(t, n.WriteDevice(b.ptr, data))
	require.NoError(t, n.MemRelease(b.h))
	// Releasing twice fails.
	requireCode(t, n.MemRelease(b.h), "cuMemRelease", cuda.ErrorInvalidValue)
	// The memory lives on behind its mapping.
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(0).Load(b.ptr, got))
	require.Equal(t, data, got)
	l := n.Live()
	require.Equal(t, 1, l.Allocations)
	require.Equal(t, 0, l.Handles)
	require.Equal(t, uint64(2*mib), l.DeviceBytes[0])

	// Retaining the handle through the address brings it back.
	h, err := n.MemRetainAllocationHandle(b.ptr + 4096)
	require.NoError(t, err)
	require.Equal(t, b.h, h)
	prop, err := n.MemGetAllocationPropertiesFromHandle(h)
	require.NoError(t, err)
	require.Equal(t, cuda.HandlePosixFD, prop.RequestedHandleTypes)
	require.NoError(t, n.MemRelease(h))

	// The last unmap frees it.
	require.NoError(t, n.MemUnmap(b.ptr, b.size))
	require.Equal(t, uint64(0), n.Live().DeviceBytes[0])
	require.NoError(t, n.MemAddressFree(b.ptr, b.size))
	require.NoError(t, n.CheckNoLeaks())
}

func TestMemAllocAndPointerAttributes(t *testing.T) {
	n := newNode(t, Config{MemoryPerDevice: 16 * mib})
	useDevice(t, n, 2)
	p, err := n.MemAlloc(3*mib + 5)
	require.NoError(t, err)
	free, total, err := n.MemGetInfo()
	require.NoError(t, err)
	require.Equal(t, uint64(16*mib), total)
	require.Less(t, free, uint64(13*mib))

	// Reachable by every device.
	data := randBytes(t, 4096)
	require.NoError(t, n.Memory(0).Store(p+100, data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(3).Load(p+100, got))
	require.Equal(t, data, got)

	for attr, want := range map[cuda.PointerAttribute]uint64{
		cuda.PointerAttrDeviceOrdinal: 2,
		cuda.PointerAttrRangeStart:    uint64(p),
		cuda.PointerAttrRangeSize:     3*mib + 5,
		cuda.PointerAttrMemoryType:    2,
	} {
		v, err := n.PointerGetAttribute(attr, p+1000)
		require.NoError(t, err)
		require.Equal(t, want, v, "attribute %d", attr)
	}
	_, err = n.MemAlloc(14 * mib)
	require.True(t, errors.Is(err, cuda.ErrOutOfMemory), "%v", err)

	// VMM memory: ordinal of the allocation's device, range of the mapping.
	b := mapOn(t, n, 1, 4*mib, 1)
	v, err := n.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, b.ptr+mib)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)
	v, err = n.PointerGetAttribute(cuda.PointerAttrRangeStart, b.ptr+mib)
	require.NoError(t, err)
	require.Equal(t, uint64(b.ptr), v)
	v, err = n.PointerGetAttribute(cuda.PointerAttrRangeSize, b.ptr+mib)
	require.NoError(t, err)
	require.Equal(t, b.size, v)
	_, err = n.PointerGetAttribute(cuda.PointerAttrRangeStart, b.ptr+cuda.DevicePtr(b.size))
	requireCode(t, err, "cuPointerGetAttribute", cuda.ErrorInvalidValue)

	requireCode(t, n.MemFree(p+1), "cuMemFree", cuda.ErrorInvalidValue)
	require.NoError(t, n.MemFree(p))
	requireCode(t, n.MemFree(p), "cuMemFree", cuda.ErrorInvalidValue)

	// Managed memory and prefetch.
	m, err := n.MemAllocManaged(8192, cuda.MemAttachGlobal)
	require.NoError(t, err)
	require.NoError(t, n.MemPrefetchAsync(m, 8192, 1, 0))
	require.NoError(t, n.MemPrefetchAsync(m, 8192, cuda.CPUDevice, 0))
	requireCode(t, n.MemPrefetchAsync(b.ptr, 8192, 1, 0), "cuMemPrefetchAsync", cuda.ErrorInvalidValue)
	require.NoError(t, n.StreamSynchronize(0))
	require.NoError(t, n.MemFree(m))
	b.free(t, n)
}

func TestNoCurrentContext(t *testing.T) {
	n := newNode(t, Config{})
	_, err := n.MemAlloc(1024)
	requireCode(t, err, "cuMemAlloc", cuda.ErrorInvalidContext)
	_, err = n.StreamCreate(0)
	requireCode(t, err, "cuStreamCreate", cuda.ErrorInvalidContext)
	requireCode(t, n.CtxSynchronize(), "cuCtxSynchronize", cuda.ErrorInvalidContext)
	c, err := n.CtxGetCurrent()
	require.NoError(t, err)
	require.Zero(t, c)
	// A context must be retained to be made current.
	requireCode(t, n.CtxSetCurrent(0xC000_0000), "cuCtxSetCurrent", cuda.ErrorInvalidContext)
	requireCode(t, n.PrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease", cuda.ErrorInvalidContext)
}

func TestCurrentContextIsPerThread(t *testing.T) {
	n := newNode(t, Config{})
	ctx := useDevice(t, n, 3)
	got, err := n.CtxGetCurrent()
	require.NoError(t, err)
	require.Equal(t, ctx, got)
	done := make(chan cuda.Context)
	go func() {
		// Another goroutine locked to another thread has no context.
		runtimeLockAndRun(func() {
			c, _ := n.CtxGetCurrent()
			done <- c
		})
	}()
	require.Zero(t, <-done)
}

func TestMemoryLargeSpans(t *testing.T) {
	n := newNode(t, Config{MemoryPerDevice: 256 * mib})
	b := mapOn(t, n, 0, 64*mib, 0)
	data := randBytes(t, 64*mib-4096)
	mem := n.Memory(0)
	require.NoError(t, mem.Store(b.ptr+4096, data))
	got := make([]byte, len(data))
	require.NoError(t, mem.Load(b.ptr+4096, got))
	require.True(t, bytes.Equal(data, got))
	head := make([]byte, 4096)
	require.NoError(t, mem.Load(b.ptr, head))
	require.Equal(t, make([]byte, 4096), head, "never-written memory reads as zero")
	b.free(t, n)
}

// TestVMMPointerRangeIsTheReservation: the range cuPointerGetAttribute
// reports for an address of a cuMemMap mapping is the reservation the
// mapping lies in, as the driver answered in differential run 12
// (2026-11-25) for each layout here: a mapping at +2 or +4 MiB with the
// reservation's start unmapped, mapped by the same allocation, or by
// another; a mapping at +0 followed by another. The size is the
// reservation's by analogy (the run asked for none). An unmapped address
// of a reservation, even one with mappings, has no range (as the driver).
func TestVMMPointerRangeIsTheReservation(t *testing.T) {
	n := newNode(t, Config{Devices: 1})
	create := func(size uint64) cuda.MemHandle {
		t.Helper()
		prop := cuda.DeviceAllocationProp(0, cuda.HandlePosixFD)
		h, err := n.MemCreate(size, &prop)
		require.NoError(t, err)
		return h
	}
	type at struct {
		off uint64
		h   int // index into the layout's handles
	}
	for _, tc := range []struct {
		name    string
		resv    uint64
		handles []uint64 // sizes
		maps    []at
		query   int // the mapping asked about
	}{
		{"one mapping at +2 MiB", 10 * mib, []uint64{8 * mib}, []at{{2 * mib, 0}}, 0},
		{"the same allocation at +0 and +2 MiB", 4 * mib, []uint64{2 * mib}, []at{{2 * mib, 0}, {0, 0}}, 0},
		{"the same allocation at +0 and +4 MiB", 10 * mib, []uint64{4 * mib}, []at{{0, 0}, {4 * mib, 0}}, 1},
		{"a mapping at +0 and another after it", 12 * mib, []uint64{8 * mib, 4 * mib}, []at{{0, 0}, {8 * mib, 1}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hs []cuda.MemHandle
			for _, size := range tc.handles {
				hs = append(hs, create(size))
			}
			r, err := n.MemAddressReserve(tc.resv, 0, 0)
			require.NoError(t, err)
			for _, m := range tc.maps {
				require.NoError(t, n.MemMap(r+cuda.DevicePtr(m.off), tc.handles[m.h], 0, hs[m.h]))
			}
			q := tc.maps[tc.query]
			p := r + cuda.DevicePtr(q.off+tc.handles[q.h]/2+12345)
			start, err := n.PointerGetAttribute(cuda.PointerAttrRangeStart, p)
			require.NoError(t, err)
			require.Equal(t, uint64(r), start, "range start of %#x: the reservation's %#x, not the mapping's %#x", uint64(p), uint64(r), uint64(r)+q.off)
			size, err := n.PointerGetAttribute(cuda.PointerAttrRangeSize, p)
			require.NoError(t, err)
			require.Equal(t, tc.resv, size)
			for _, m := range tc.maps {
				require.NoError(t, n.MemUnmap(r+cuda.DevicePtr(m.off), tc.handles[m.h]))
			}
			require.NoError(t, n.MemAddressFree(r, tc.resv))
			for _, h := range hs {
				require.NoError(t, n.MemRelease(h))
			}
		})
	}

	// An imported handle's mapping, at +2 MiB of 12.
	h := create(8 * mib)
	sh, err := n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	imp, err := n.MemImportFromShareableHandle(sh)
	require.NoError(t, err)
	require.NoError(t, posixfd.Close(sh.FD))
	r, err := n.MemAddressReserve(12*mib, 2*mib, 0)
	require.NoError(t, err)
	require.NoError(t, n.MemMap(r+2*mib, 8*mib, 0, imp))
	start, err := n.PointerGetAttribute(cuda.PointerAttrRangeStart, r+2*mib+0x15e630)
	require.NoError(t, err)
	require.Equal(t, uint64(r), start)
	for _, attr := range []cuda.PointerAttribute{cuda.PointerAttrRangeStart, cuda.PointerAttrRangeSize} {
		_, err = n.PointerGetAttribute(attr, r+10*mib)
		requireCode(t, err, "cuPointerGetAttribute", cuda.ErrorInvalidValue)
	}
	require.NoError(t, n.MemUnmap(r+2*mib, 8*mib))
	require.NoError(t, n.MemAddressFree(r, 12*mib))
	require.NoError(t, n.MemRelease(imp))
	require.NoError(t, n.MemRelease(h))
	require.NoError(t, n.CheckNoLeaks())
}

// TestMemGetAccessOfNonVMMMemory: cuMemGetAccess of cuMemAlloc or managed
// memory succeeds with no access, as the driver answered in differential
// run 12 (2026-11-25; 3 cuMemAlloc and 2 managed allocations, asked at
// their start), though every device reaches that memory.
func TestMemGetAccessOfNonVMMMemory(t *testing.T) {
	n := newNode(t, Config{Devices: 2})
	useDevice(t, n, 0)
	p, err := n.MemAlloc(1539759)
	require.NoError(t, err)
	m, err := n.MemAllocManaged(1805964, cuda.MemAttachGlobal)
	require.NoError(t, err)
	for _, at := range []cuda.DevicePtr{p, p + 1000, m, m + 77777} {
		for _, d := range []cuda.Device{0, 1} {
			f, err := n.MemGetAccess(cuda.DeviceLocation(d), at)
			require.NoError(t, err)
			require.Equal(t, cuda.AccessNone, f, "device %d at %#x", d, uint64(at))
		}
	}
	// The memory is reachable all the same.
	data := randBytes(t, 256)
	require.NoError(t, n.Memory(1).Store(p+1000, data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(0).Load(p+1000, got))
	require.Equal(t, data, got)
	// A VMM mapping still reports what cuMemSetAccess gave.
	b := mapOn(t, n, 0, 2*mib, 0)
	f, err := n.MemGetAccess(cuda.DeviceLocation(0), b.ptr+100)
	require.NoError(t, err)
	require.Equal(t, cuda.AccessReadWrite, f)
	b.free(t, n)
	require.NoError(t, n.MemFree(p))
	require.NoError(t, n.MemFree(m))
}
