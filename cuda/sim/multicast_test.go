package sim

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// mcTeam is a multicast object over ndev devices with each device's
// memory bound and mapped (UC aliases), and the object mapped (MC alias)
// with every device given access.
type mcTeam struct {
	mc   cuda.MemHandle
	size uint64
	devs []cuda.Device
	mem  []vmBuf
	mcVA cuda.DevicePtr
}

func newMCTeam(t testing.TB, n *Node, ndev int, size uint64) *mcTeam {
	t.Helper()
	devs := make([]cuda.Device, ndev)
	for d := range devs {
		devs[d] = cuda.Device(d)
	}
	return newMCTeamOn(t, n, devs, size)
}

// newMCTeamOn is newMCTeam over the given devices.
func newMCTeamOn(t testing.TB, n *Node, devs []cuda.Device, size uint64) *mcTeam {
	t.Helper()
	prop := cuda.MulticastProp{NumDevices: uint32(len(devs)), Size: size, HandleTypes: uint64(cuda.HandlePosixFD)}
	mc, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	tm := &mcTeam{mc: mc, size: size, devs: devs}
	for _, d := range devs {
		require.NoError(t, n.MulticastAddDevice(mc, d))
	}
	var all []cuda.AccessDesc
	for _, d := range devs {
		all = append(all, cuda.AccessDesc{Location: cuda.DeviceLocation(d), Flags: cuda.AccessReadWrite})
	}
	for _, d := range devs {
		b := mapOn(t, n, d, size)
		require.NoError(t, n.MemSetAccess(b.ptr, size, all))
		require.NoError(t, n.MulticastBindMem(mc, 0, b.h, 0, size))
		tm.mem = append(tm.mem, b)
	}
	va, err := n.MemAddressReserve(size, 0, 0)
	require.NoError(t, err)
	require.NoError(t, n.MemMap(va, size, 0, mc))
	require.NoError(t, n.MemSetAccess(va, size, all))
	tm.mcVA = va
	return tm
}

func (tm *mcTeam) close(t testing.TB, n *Node) {
	t.Helper()
	require.NoError(t, n.MemUnmap(tm.mcVA, tm.size))
	require.NoError(t, n.MemAddressFree(tm.mcVA, tm.size))
	for i, b := range tm.mem {
		require.NoError(t, n.MulticastUnbind(tm.mc, tm.devs[i], 0, tm.size))
		b.free(t, n)
	}
	require.NoError(t, n.MemRelease(tm.mc))
}

func TestMulticastLoadStoreReduce(t *testing.T) {
	n := newNode(t, Config{Devices: 4})
	tm := newMCTeam(t, n, 4, 2*mib)
	mem := n.Memory(2)

	// multimem.st lands in every bound allocation.
	src := randBytes(t, 16)
	require.NoError(t, mem.MultimemStore(tm.mcVA+4096, src))
	for d, b := range tm.mem {
		got, err := n.ReadDevice(b.ptr+4096, 16)
		require.NoError(t, err)
		require.Equal(t, src, got, "device %d", d)
	}

	// multimem.ld_reduce sees each device's own data, in add order.
	want := make([][]byte, 4)
	for d, b := range tm.mem {
		want[d] = randBytes(t, 8)
		require.NoError(t, n.Memory(cuda.Device(d)).Store(b.ptr+64, want[d]))
	}
	got, err := mem.MultimemLoad(tm.mcVA+64, 8)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// multimem.red.add.u32 adds to every copy.
	var base [4]uint32
	for d, b := range tm.mem {
		base[d] = binary.LittleEndian.Uint32(randBytes(t, 4))
		var w [4]byte
		binary.LittleEndian.PutUint32(w[:], base[d])
		require.NoError(t, n.WriteDevice(b.ptr+128, w[:]))
	}
	require.NoError(t, mem.MultimemAddU32(tm.mcVA+128, 7))
	require.NoError(t, n.Memory(0).MultimemAddU32(tm.mcVA+128, 5))
	for d, b := range tm.mem {
		v, err := n.Memory(cuda.Device(d)).LoadU32(b.ptr + 128)
		require.NoError(t, err)
		require.Equal(t, base[d]+12, v)
	}
	l := n.Live()
	require.Equal(t, 1, l.MulticastObjects)
	require.Equal(t, 4, l.Binds)
	tm.close(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

func TestMultimemWidthAndAlignment(t *testing.T) {
	n := newNode(t, Config{Devices: 2})
	tm := newMCTeam(t, n, 2, 2*mib)
	mem := n.Memory(0)
	for _, k := range []int{1, 2, 3, 12, 32} {
		_, err := mem.MultimemLoad(tm.mcVA, k)
		require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "width %d: %v", k, err)
		require.Error(t, mem.MultimemStore(tm.mcVA, make([]byte, k)), "width %d", k)
	}
	for _, k := range []int{4, 8, 16} {
		_, err := mem.MultimemLoad(tm.mcVA+cuda.DevicePtr(k), k)
		require.NoError(t, err, "width %d", k)
		_, err = mem.MultimemLoad(tm.mcVA+cuda.DevicePtr(k/2), k)
		require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "misaligned width %d: %v", k, err)
	}
	require.Error(t, mem.MultimemAddU32(tm.mcVA+2, 1))

	// Plain accesses to a multicast address fail; multimem to a unicast
	// address fails.
	err := mem.Load(tm.mcVA, make([]byte, 16))
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	require.Contains(t, err.Error(), "multimem")
	require.Error(t, mem.Store(tm.mcVA, make([]byte, 4)))
	_, err = mem.LoadU32(tm.mcVA)
	require.Error(t, err)
	_, err = mem.MultimemLoad(tm.mem[0].ptr, 16)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	_, err = n.ReadDevice(tm.mcVA, 4)
	require.Error(t, err)
	// Nor can copies.
	useDevice(t, n, 0)
	requireCode(t, n.MemsetD8(tm.mcVA, 1, 16), "cuMemsetD8", cuda.ErrorInvalidValue)
	tm.close(t, n)
	l := n.Live()
	require.Zero(t, l.Mappings+l.Allocations+l.MulticastObjects+l.Handles)
}

// TestMulticastBindWaitsForAllAdded: a bind or a mapping of a multicast
// object before every device is added waits, as the driver does, and goes
// on once the last device is added.
func TestMulticastBindWaitsForAllAdded(t *testing.T) {
	n := newNode(t, Config{Devices: 4})
	prop := cuda.MulticastProp{NumDevices: 4, Size: 4 * mib}
	mc, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	require.NoError(t, n.MulticastAddDevice(mc, 0))
	require.NoError(t, n.MulticastAddDevice(mc, 1))
	b := mapOn(t, n, 0, 4*mib, 0)
	va, err := n.MemAddressReserve(4*mib, 0, 0)
	require.NoError(t, err)

	done := make(chan error, 3)
	go func() { done <- n.MulticastBindMem(mc, 0, b.h, 0, 2*mib) }()
	go func() { done <- n.MulticastBindAddr(mc, 2*mib, b.ptr+2*mib, 2*mib) }()
	go func() { done <- n.MemMap(va, 4*mib, 0, mc) }()
	select {
	case err := <-done:
		t.Fatalf("a call returned before every device was added: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The waiting calls hold no lock: adds (and anything else) go on.
	require.NoError(t, n.MulticastAddDevice(mc, 2))
	require.Equal(t, 1, n.Live().MulticastObjects)
	require.NoError(t, n.MulticastAddDevice(mc, 3))
	for range 3 {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting calls did not return after the last add")
		}
	}
	require.Equal(t, 2, n.Live().Binds)
	require.NoError(t, n.MemUnmap(va, 4*mib))
	require.NoError(t, n.MemAddressFree(va, 4*mib))
	require.NoError(t, n.MulticastUnbind(mc, 0, 0, 2*mib))
	require.NoError(t, n.MulticastUnbind(mc, 0, 2*mib, 2*mib))
	require.NoError(t, n.MemRelease(mc))
	b.free(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

// TestMulticastWaitEnds: the simulator's wait for a device that is never
// added ends after Config.MulticastWait with CUDA_ERROR_TIMEOUT, or at
// Close with CUDA_ERROR_DEINITIALIZED, without side effects.
func TestMulticastWaitEnds(t *testing.T) {
	const wait = 150 * time.Millisecond
	n := New(Config{Devices: 2, MulticastWait: wait})
	require.NoError(t, n.Init())
	prop := cuda.MulticastProp{NumDevices: 2, Size: 2 * mib}
	mc, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	require.NoError(t, n.MulticastAddDevice(mc, 0))
	b := mapOn(t, n, 0, 2*mib, 0)
	start := time.Now()
	e := requireCode(t, n.MulticastBindMem(mc, 0, b.h, 0, 2*mib), "cuMulticastBindMem", cuda.ErrorTimeout)
	require.GreaterOrEqual(t, time.Since(start), wait)
	require.Contains(t, e.Detail, "1 of its 2 devices")
	va, err := n.MemAddressReserve(2*mib, 0, 0)
	require.NoError(t, err)
	requireCode(t, n.MemMap(va, 2*mib, 0, mc), "cuMemMap", cuda.ErrorTimeout)
	l := n.Live()
	require.Zero(t, l.Binds)
	require.Equal(t, 1, l.Mappings)

	done := make(chan error, 1)
	go func() { done <- n.MulticastBindAddr(mc, 0, b.ptr, 2*mib) }()
	time.Sleep(wait / 3)
	// The object, the allocation and the reservation are left: Close says so.
	require.ErrorIs(t, n.Close(), ErrLeak)
	select {
	case err := <-done:
		requireCode(t, err, "cuMulticastBindAddr", cuda.ErrorDeinitialized)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the wait")
	}
}

// TestMulticastCliques: a multicast object's devices share an NVLink
// clique. A device of another clique is refused by cuMulticastAddDevice
// (or, with CliqueAtMap, by the cuMemMap of the object) with
// CUDA_ERROR_INVALID_DEVICE, while every device reports multicast support.
func TestMulticastCliques(t *testing.T) {
	n := newNode(t, Config{Devices: 4, Cliques: [][]int{{0, 1}, {2, 3}}})
	for d := range 4 {
		v, err := n.DeviceAttribute(cuda.AttrMulticastSupported, cuda.Device(d))
		require.NoError(t, err)
		require.Equal(t, 1, v)
	}
	prop := cuda.MulticastProp{NumDevices: 2, Size: 2 * mib}
	mc, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	require.NoError(t, n.MulticastAddDevice(mc, 0))
	e := requireCode(t, n.MulticastAddDevice(mc, 2), "cuMulticastAddDevice", cuda.ErrorInvalidDevice)
	require.Contains(t, e.Detail, "clique")
	require.NoError(t, n.MulticastAddDevice(mc, 1))
	require.NoError(t, n.MemRelease(mc))
	// Within the other clique it works too.
	tm := newMCTeamOn(t, n, []cuda.Device{2, 3}, 2*mib)
	tm.close(t, n)
	require.NoError(t, n.CheckNoLeaks())

	atMap := newNode(t, Config{Devices: 2, Cliques: [][]int{{0}, {1}}, CliqueAtMap: true})
	mc, err = atMap.MulticastCreate(&prop)
	require.NoError(t, err)
	require.NoError(t, atMap.MulticastAddDevice(mc, 0))
	require.NoError(t, atMap.MulticastAddDevice(mc, 1))
	b := mapOn(t, atMap, 1, 2*mib)
	require.NoError(t, atMap.MulticastBindMem(mc, 0, b.h, 0, 2*mib))
	va, err := atMap.MemAddressReserve(2*mib, 0, 0)
	require.NoError(t, err)
	e = requireCode(t, atMap.MemMap(va, 2*mib, 0, mc), "cuMemMap", cuda.ErrorInvalidDevice)
	require.Contains(t, e.Detail, "different NVLink cliques")
	require.NoError(t, atMap.MemAddressFree(va, 2*mib))
	require.NoError(t, atMap.MulticastUnbind(mc, 1, 0, 2*mib))
	require.NoError(t, atMap.MemRelease(mc))
	b.free(t, atMap)
	require.NoError(t, atMap.CheckNoLeaks())

	for _, bad := range [][][]int{{{0, 1}, {1, 2, 3}}, {{0, 1}, {2}}, {{0, 1, 2, 3, 4}}} {
		require.Panics(t, func() { New(Config{Devices: 4, Cliques: bad}) }, "%v", bad)
	}
}

func TestMulticastAddDeviceRules(t *testing.T) {
	n := newNode(t, Config{Devices: 4, NoMulticast: []int{3}})
	prop := cuda.MulticastProp{NumDevices: 2, Size: 2 * mib}
	mc, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	require.NoError(t, n.MulticastAddDevice(mc, 0))
	e := requireCode(t, n.MulticastAddDevice(mc, 0), "cuMulticastAddDevice", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "already added")
	requireCode(t, n.MulticastAddDevice(mc, 3), "cuMulticastAddDevice", cuda.ErrorNotSupported)
	requireCode(t, n.MulticastAddDevice(mc, 9), "cuMulticastAddDevice", cuda.ErrorInvalidDevice)
	require.NoError(t, n.MulticastAddDevice(mc, 1))
	e = requireCode(t, n.MulticastAddDevice(mc, 2), "cuMulticastAddDevice", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "numDevices=2")

	// After a bind, adding fails (here numDevices is reached as well;
	// the bind rule is checked first).
	b := mapOn(t, n, 1, 2*mib)
	require.NoError(t, n.MulticastBindMem(mc, 0, b.h, 0, 2*mib))
	e = requireCode(t, n.MulticastAddDevice(mc, 2), "cuMulticastAddDevice", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "already bound")
	require.NoError(t, n.MulticastUnbind(mc, 1, 0, 2*mib))
	require.NoError(t, n.MemRelease(mc))
	b.free(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

func TestMulticastBindRules(t *testing.T) {
	n := newNode(t, Config{Devices: 4})
	prop := cuda.MulticastProp{NumDevices: 2, Size: 8 * mib}
	mc, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	require.NoError(t, n.MulticastAddDevice(mc, 0))
	require.NoError(t, n.MulticastAddDevice(mc, 1))
	b0 := mapOn(t, n, 0, 4*mib)
	b2 := mapOn(t, n, 2, 4*mib)

	// Offsets and size are multiples of the multicast granularity.
	requireCode(t, n.MulticastBindMem(mc, mib, b0.h, 0, 2*mib), "cuMulticastBindMem", cuda.ErrorInvalidValue)
	requireCode(t, n.MulticastBindMem(mc, 0, b0.h, mib, 2*mib), "cuMulticastBindMem", cuda.ErrorInvalidValue)
	requireCode(t, n.MulticastBindMem(mc, 0, b0.h, 0, 3*mib), "cuMulticastBindMem", cuda.ErrorInvalidValue)
	// Past the object or the memory.
	requireCode(t, n.MulticastBindMem(mc, 6*mib, b0.h, 0, 4*mib), "cuMulticastBindMem", cuda.ErrorInvalidValue)
	requireCode(t, n.MulticastBindMem(mc, 0, b0.h, 2*mib, 4*mib), "cuMulticastBindMem", cuda.ErrorInvalidValue)
	// The memory's device must be in the team.
	requireCode(t, n.MulticastBindMem(mc, 0, b2.h, 0, 2*mib), "cuMulticastBindMem", cuda.ErrorInvalidDevice)
	// A multicast handle is not memory.
	requireCode(t, n.MulticastBindMem(mc, 0, mc, 0, 2*mib), "cuMulticastBindMem", cuda.ErrorInvalidValue)
	// Several binds per device, from one allocation or several, at
	// ranges of the object that do not overlap.
	require.NoError(t, n.MulticastBindMem(mc, 2*mib, b0.h, 2*mib, 2*mib))
	require.NoError(t, n.MulticastBindMem(mc, 6*mib, b0.h, 0, 2*mib))
	e := requireCode(t, n.MulticastBindMem(mc, 2*mib, b0.h, 0, 4*mib), "cuMulticastBindMem", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "overlaps")
	requireCode(t, n.MulticastBindAddr(mc, 6*mib, b0.ptr, 2*mib), "cuMulticastBindAddr", cuda.ErrorInvalidValue)
	require.Equal(t, 2, n.Live().Binds)

	// Unbind must match a bind.
	e = requireCode(t, n.MulticastUnbind(mc, 0, 2*mib, 4*mib), "cuMulticastUnbind", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "does not match")
	e = requireCode(t, n.MulticastUnbind(mc, 0, 0, 2*mib), "cuMulticastUnbind", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "no memory bound")
	requireCode(t, n.MulticastUnbind(mc, 1, 2*mib, 2*mib), "cuMulticastUnbind", cuda.ErrorInvalidValue)
	require.NoError(t, n.MulticastUnbind(mc, 0, 6*mib, 2*mib))
	require.Equal(t, 1, n.Live().Binds)

	// A bind keeps released memory alive until the object goes.
	require.NoError(t, n.MemUnmap(b0.ptr, b0.size))
	require.NoError(t, n.MemAddressFree(b0.ptr, b0.size))
	require.NoError(t, n.MemRelease(b0.h))
	require.Equal(t, uint64(4*mib), n.Live().DeviceBytes[0])
	require.NoError(t, n.MemRelease(mc))
	require.Equal(t, uint64(0), n.Live().DeviceBytes[0])
	b2.free(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

func TestMulticastCreateRules(t *testing.T) {
	n := newNode(t, Config{Devices: 2, MaxMulticastObjects: 3, MulticastGranularityMin: 2 * mib, MulticastGranularityRecommended: 512 * mib})
	prop := cuda.MulticastProp{NumDevices: 2, Size: 2 * mib}
	g, err := n.MulticastGetGranularity(&prop, cuda.GranularityRecommended)
	require.NoError(t, err)
	require.Equal(t, uint64(512*mib), g)
	g, err = n.MulticastGetGranularity(&prop, cuda.GranularityMinimum)
	require.NoError(t, err)
	require.Equal(t, uint64(2*mib), g)

	bad := prop
	bad.Size = 3 * mib
	_, err = n.MulticastCreate(&bad)
	requireCode(t, err, "cuMulticastCreate", cuda.ErrorInvalidValue)
	bad = prop
	bad.NumDevices = 3
	_, err = n.MulticastCreate(&bad)
	requireCode(t, err, "cuMulticastCreate", cuda.ErrorInvalidValue)
	bad = prop
	bad.HandleTypes = uint64(cuda.HandleFabric)
	_, err = n.MulticastCreate(&bad)
	requireCode(t, err, "cuMulticastCreate", cuda.ErrorNotSupported)

	var hs []cuda.MemHandle
	for i := 0; i < 3; i++ {
		h, err := n.MulticastCreate(&prop)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	_, err = n.MulticastCreate(&prop)
	requireCode(t, err, "cuMulticastCreate", cuda.ErrorOutOfMemory)
	require.NoError(t, n.MemRelease(hs[0]))
	h, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	for _, h := range append(hs[1:], h) {
		require.NoError(t, n.MemRelease(h))
	}
	require.NoError(t, n.CheckNoLeaks())

	off := newNode(t, Config{MulticastAllOff: true})
	_, err = off.MulticastCreate(&prop)
	requireCode(t, err, "cuMulticastCreate", cuda.ErrorNotSupported)
	require.True(t, errors.Is(err, cuda.ErrDriverNotSupp))
	_, err = off.MulticastGetGranularity(&prop, cuda.GranularityMinimum)
	requireCode(t, err, "", cuda.ErrorNotSupported)
}

func TestMulticastMembersOnly(t *testing.T) {
	n := newNode(t, Config{Devices: 3})
	tm := newMCTeam(t, n, 2, 2*mib)
	// Device 2 is no member: even with access set it cannot use the alias.
	require.NoError(t, n.MemSetAccess(tm.mcVA, tm.size, []cuda.AccessDesc{{Location: cuda.DeviceLocation(2), Flags: cuda.AccessReadWrite}}))
	err := n.Memory(2).MultimemStore(tm.mcVA, make([]byte, 4))
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	// A member without access rights faults too.
	require.NoError(t, n.MemSetAccess(tm.mcVA, tm.size, []cuda.AccessDesc{{Location: cuda.DeviceLocation(1), Flags: cuda.AccessNone}}))
	err = n.Memory(1).MultimemStore(tm.mcVA, make([]byte, 4))
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	tm.close(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

// plainMemory hides the SpanMemory methods, so the span helpers loop.
type plainMemory struct{ Memory }

func TestMultimemSpans(t *testing.T) {
	n := newNode(t, Config{Devices: 3})
	tm := newMCTeam(t, n, 3, 4*mib)
	for d, b := range tm.mem {
		require.NoError(t, n.WriteDevice(b.ptr, randBytes(t, 4*mib)), "device %d", d)
	}
	mem := n.Memory(1)
	for _, c := range []struct{ off, size, width int }{{0, 16, 16}, {4096, 1 << 20, 16}, {8, 4000, 8}, {4*mib - 64, 64, 4}} {
		fast, err := MultimemLoadSpan(mem, tm.mcVA+cuda.DevicePtr(c.off), c.size, c.width)
		require.NoError(t, err)
		slow, err := MultimemLoadSpan(plainMemory{mem}, tm.mcVA+cuda.DevicePtr(c.off), c.size, c.width)
		require.NoError(t, err)
		require.Equal(t, slow, fast)
		require.Len(t, fast, 3)
		for d, b := range tm.mem {
			want, err := n.ReadDevice(b.ptr+cuda.DevicePtr(c.off), c.size)
			require.NoError(t, err)
			require.Equal(t, want, fast[d])
		}
	}
	src := randBytes(t, 64<<10)
	require.NoError(t, MultimemStoreSpan(mem, tm.mcVA+mib, src, 16))
	src2 := randBytes(t, 4096)
	require.NoError(t, MultimemStoreSpan(plainMemory{mem}, tm.mcVA+2*mib, src2, 4))
	for _, b := range tm.mem {
		got, err := n.ReadDevice(b.ptr+mib, len(src))
		require.NoError(t, err)
		require.Equal(t, src, got)
		got, err = n.ReadDevice(b.ptr+2*mib, len(src2))
		require.NoError(t, err)
		require.Equal(t, src2, got)
	}
	// The per-access rules hold for spans.
	_, err := MultimemLoadSpan(mem, tm.mcVA+8, 32, 16)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	_, err = MultimemLoadSpan(mem, tm.mcVA, 24, 16)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	_, err = MultimemLoadSpan(mem, tm.mcVA, 32, 32)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "%v", err)
	_, err = MultimemLoadSpan(mem, tm.mcVA+4*mib-16, 32, 16)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "past the mapping: %v", err)
	_, err = MultimemLoadSpan(mem, tm.mem[0].ptr, 32, 16)
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress), "unicast address: %v", err)
	tm.close(t, n)
	require.NoError(t, n.CheckNoLeaks())
}
