//go:build !windows

package sim

// POSIX FD exports, passed through unix sockets: not on Windows, which
// has neither (its nodes are NoPosixFD).

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// passFD sends fd through a unix socket pair and returns the received FD,
// as team/mpi does between processes.
func passFD(t *testing.T, fd int) int {
	t.Helper()
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(sp[0])
	defer syscall.Close(sp[1])
	require.NoError(t, syscall.Sendmsg(sp[0], []byte{0}, syscall.UnixRights(fd), nil, 0))
	buf := make([]byte, 1)
	oob := make([]byte, syscall.CmsgSpace(4))
	_, oobn, _, _, err := syscall.Recvmsg(sp[1], buf, oob, 0)
	require.NoError(t, err)
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	fds, err := syscall.ParseUnixRights(&msgs[0])
	require.NoError(t, err)
	require.Len(t, fds, 1)
	return fds[0]
}

func TestPosixFDExportImport(t *testing.T) {
	n := newNode(t, Config{})
	b := mapOn(t, n, 0, 2*mib, 0, 1)
	sh, err := n.MemExportToShareableHandle(b.h, cuda.HandlePosixFD)
	require.NoError(t, err)
	require.Equal(t, cuda.HandlePosixFD, sh.Type)
	require.GreaterOrEqual(t, sh.FD, 0)

	// The FD goes through a socket and is imported from there.
	got := passFD(t, sh.FD)
	require.NotEqual(t, sh.FD, got)
	require.NoError(t, syscall.Close(sh.FD))
	h, err := n.MemImportFromShareableHandle(cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: got})
	require.NoError(t, err)
	require.NotEqual(t, b.h, h)
	require.NoError(t, syscall.Close(got))
	prop, err := n.MemGetAllocationPropertiesFromHandle(h)
	require.NoError(t, err)
	require.Equal(t, cuda.DeviceLocation(0), prop.Location)

	// Both handles are the same memory.
	p, err := n.MemAddressReserve(2*mib, 0, 0)
	require.NoError(t, err)
	require.NoError(t, n.MemMap(p, 2*mib, 0, h))
	require.NoError(t, n.MemSetAccess(p, 2*mib, []cuda.AccessDesc{{Location: cuda.DeviceLocation(1), Flags: cuda.AccessReadWrite}}))
	data := randBytes(t, 4096)
	require.NoError(t, n.Memory(0).Store(b.ptr+8192, data))
	back := make([]byte, len(data))
	require.NoError(t, n.Memory(1).Load(p+8192, back))
	require.Equal(t, data, back)

	require.Zero(t, n.Live().ExportedFDs)
	require.NoError(t, n.MemUnmap(p, 2*mib))
	require.NoError(t, n.MemAddressFree(p, 2*mib))
	require.NoError(t, n.MemRelease(h))
	b.free(t, n)
	require.NoError(t, n.CheckNoLeaks())
}

func TestExportedFDKeepsMemoryAlive(t *testing.T) {
	n := newNode(t, Config{})
	prop := cuda.DeviceAllocationProp(1, cuda.HandlePosixFD)
	h, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	sh, err := n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	require.NoError(t, n.MemRelease(h))
	// The open FD holds the memory, like the driver's shareable handle.
	l := n.Live()
	require.Equal(t, 1, l.ExportedFDs)
	require.Equal(t, 1, l.Allocations)
	require.Equal(t, uint64(2*mib), l.DeviceBytes[1])
	err = n.CheckNoLeaks()
	require.ErrorIs(t, err, ErrLeak)
	require.Contains(t, err.Error(), "exported FDs")
	h2, err := n.MemImportFromShareableHandle(sh)
	require.NoError(t, err)
	require.NoError(t, syscall.Close(sh.FD))
	require.Equal(t, 0, n.Live().ExportedFDs)
	require.Equal(t, uint64(2*mib), n.Live().DeviceBytes[1])
	require.NoError(t, n.MemRelease(h2))
	require.NoError(t, n.CheckNoLeaks())

	// A closed, unimported FD frees the memory at the next look.
	h, err = n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	sh, err = n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	require.NoError(t, n.MemRelease(h))
	require.NoError(t, syscall.Close(sh.FD))
	require.NoError(t, n.CheckNoLeaks())
}

// TestFDDirs: each directory the node lists open FDs in (/dev/fd is the
// one macOS has) sees an exported FD while it is open, and not once it is
// closed.
func TestFDDirs(t *testing.T) {
	n := newNode(t, Config{})
	prop := cuda.DeviceAllocationProp(0, cuda.HandlePosixFD)
	h, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	defer func() { require.NoError(t, n.MemRelease(h)) }()
	sh, err := n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	key, err := fdKey(sh.FD)
	require.NoError(t, err)
	for _, dir := range fdDirs {
		if _, err := os.Stat(dir); err != nil {
			t.Logf("%s: %v", dir, err)
			continue
		}
		require.True(t, fdKeysIn(dir)[key], "%s lists the exported FD", dir)
	}
	require.NoError(t, syscall.Close(sh.FD))
	for _, dir := range fdDirs {
		if keys := fdKeysIn(dir); keys != nil {
			require.False(t, keys[key], "%s lists the closed FD", dir)
		}
	}
}

func TestExportRules(t *testing.T) {
	n := newNode(t, Config{})
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	h, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	_, err = n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	e := requireCode(t, err, "cuMemExportToShareableHandle", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "requested handle types")
	_, err = n.MemExportToShareableHandle(h, cuda.HandleFabric)
	requireCode(t, err, "cuMemExportToShareableHandle", cuda.ErrorNotSupported)
	require.NoError(t, n.MemRelease(h))
	_, err = n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	requireCode(t, err, "cuMemExportToShareableHandle", cuda.ErrorInvalidValue)

	// An FD that is not an export does not import.
	fds := make([]int, 2)
	require.NoError(t, syscall.Pipe(fds))
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	_, err = n.MemImportFromShareableHandle(cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: fds[0]})
	requireCode(t, err, "cuMemImportFromShareableHandle", cuda.ErrorInvalidValue)
	_, err = n.MemImportFromShareableHandle(cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: 1 << 20})
	requireCode(t, err, "cuMemImportFromShareableHandle", cuda.ErrorInvalidValue)

	// Nor does one exported by another node.
	other := newNode(t, Config{})
	prop.RequestedHandleTypes = cuda.HandlePosixFD
	h, err = other.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	sh, err := other.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	_, err = n.MemImportFromShareableHandle(sh)
	requireCode(t, err, "cuMemImportFromShareableHandle", cuda.ErrorInvalidValue)
	require.NoError(t, syscall.Close(sh.FD))
	require.NoError(t, other.MemRelease(h))
	require.NoError(t, other.CheckNoLeaks())

	off := newNode(t, Config{NoPosixFD: true})
	prop.RequestedHandleTypes = cuda.HandlePosixFD
	_, err = off.MemCreate(2*mib, &prop)
	requireCode(t, err, "cuMemCreate", cuda.ErrorNotSupported)
	require.NoError(t, n.CheckNoLeaks())
}

func TestFabricExportImport(t *testing.T) {
	n := newNode(t, Config{Devices: 2, Fabric: true})
	v, err := n.DeviceAttribute(cuda.AttrHandleTypeFabricSupported, 0)
	require.NoError(t, err)
	require.Equal(t, 1, v)

	prop := cuda.MulticastProp{NumDevices: 2, Size: 2 * mib, HandleTypes: uint64(cuda.HandleFabric | cuda.HandlePosixFD)}
	mc, err := n.MulticastCreate(&prop)
	require.NoError(t, err)
	sh, err := n.MemExportToShareableHandle(mc, cuda.HandleFabric)
	require.NoError(t, err)
	require.Equal(t, cuda.HandleFabric, sh.Type)
	mc2, err := n.MemImportFromShareableHandle(sh)
	require.NoError(t, err)
	// Devices added through either handle are the same object's.
	require.NoError(t, n.MulticastAddDevice(mc, 0))
	requireCode(t, n.MulticastAddDevice(mc2, 0), "cuMulticastAddDevice", cuda.ErrorInvalidValue)
	require.NoError(t, n.MulticastAddDevice(mc2, 1))
	require.NoError(t, n.MemRelease(mc))
	require.Equal(t, 1, n.Live().MulticastObjects)
	require.NoError(t, n.MemRelease(mc2))
	require.Equal(t, 0, n.Live().MulticastObjects)
	// The object is gone: its fabric handle no longer imports.
	_, err = n.MemImportFromShareableHandle(sh)
	requireCode(t, err, "cuMemImportFromShareableHandle", cuda.ErrorInvalidValue)
	var junk cuda.ShareableHandle
	junk.Type = cuda.HandleFabric
	_, err = n.MemImportFromShareableHandle(junk)
	requireCode(t, err, "cuMemImportFromShareableHandle", cuda.ErrorInvalidValue)
	require.NoError(t, n.CheckNoLeaks())
}

// TestImportedHandleNotExportable: the driver's answers in the
// differential run of 2026-11-25: an imported handle reports no requested
// handle types, and exporting it again is CUDA_ERROR_INVALID_VALUE, while
// the handle it came from keeps both. The same holds for a multicast
// object's imported handle (by analogy: the run makes no multicast call).
func TestImportedHandleNotExportable(t *testing.T) {
	n := newNode(t, Config{Devices: 2})
	prop := cuda.DeviceAllocationProp(1, cuda.HandlePosixFD)
	h, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	sh, err := n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	imp, err := n.MemImportFromShareableHandle(sh)
	require.NoError(t, err)
	require.NoError(t, syscall.Close(sh.FD))

	got, err := n.MemGetAllocationPropertiesFromHandle(imp)
	require.NoError(t, err)
	require.Equal(t, cuda.HandleNone, got.RequestedHandleTypes)
	require.Equal(t, cuda.DeviceLocation(1), got.Location)
	require.Equal(t, cuda.AllocationPinned, got.Type)
	_, err = n.MemExportToShareableHandle(imp, cuda.HandlePosixFD)
	e := requireCode(t, err, "cuMemExportToShareableHandle", cuda.ErrorInvalidValue)
	require.Contains(t, e.Detail, "imported")

	// The handle mapped at an address and retained is the imported one:
	// the same answers.
	p, err := n.MemAddressReserve(2*mib, 0, 0)
	require.NoError(t, err)
	require.NoError(t, n.MemMap(p, 2*mib, 0, imp))
	ret, err := n.MemRetainAllocationHandle(p)
	require.NoError(t, err)
	got, err = n.MemGetAllocationPropertiesFromHandle(ret)
	require.NoError(t, err)
	require.Equal(t, cuda.HandleNone, got.RequestedHandleTypes)
	require.NoError(t, n.MemRelease(ret))

	// The original keeps its handle types and exports again.
	got, err = n.MemGetAllocationPropertiesFromHandle(h)
	require.NoError(t, err)
	require.Equal(t, cuda.HandlePosixFD, got.RequestedHandleTypes)
	sh, err = n.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	require.NoError(t, syscall.Close(sh.FD))

	mcProp := cuda.MulticastProp{NumDevices: 2, Size: 2 * mib, HandleTypes: uint64(cuda.HandlePosixFD)}
	mc, err := n.MulticastCreate(&mcProp)
	require.NoError(t, err)
	sh, err = n.MemExportToShareableHandle(mc, cuda.HandlePosixFD)
	require.NoError(t, err)
	mcImp, err := n.MemImportFromShareableHandle(sh)
	require.NoError(t, err)
	require.NoError(t, syscall.Close(sh.FD))
	_, err = n.MemExportToShareableHandle(mcImp, cuda.HandlePosixFD)
	requireCode(t, err, "cuMemExportToShareableHandle", cuda.ErrorInvalidValue)

	require.NoError(t, n.MemRelease(mcImp))
	require.NoError(t, n.MemRelease(mc))
	require.NoError(t, n.MemUnmap(p, 2*mib))
	require.NoError(t, n.MemAddressFree(p, 2*mib))
	require.NoError(t, n.MemRelease(imp))
	require.NoError(t, n.MemRelease(h))
	require.NoError(t, n.CheckNoLeaks())
}

// TestFabricNotPermitted: with Config.FabricNotPermitted the devices
// report fabric handles, but memory and multicast objects exportable as
// fabric handles cannot be made: CUDA_ERROR_NOT_PERMITTED, the driver's
// answer on the H100 of the differential run of 2026-11-25 (no IMEX
// channel). POSIX FD handles still work.
func TestFabricNotPermitted(t *testing.T) {
	n := newNode(t, Config{Devices: 2, Fabric: true, FabricNotPermitted: true})
	v, err := n.DeviceAttribute(cuda.AttrHandleTypeFabricSupported, 0)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	for _, ht := range []cuda.HandleType{cuda.HandleFabric, cuda.HandleFabric | cuda.HandlePosixFD} {
		prop := cuda.DeviceAllocationProp(0, ht)
		g, err := n.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
		require.NoError(t, err)
		_, err = n.MemCreate(g, &prop)
		requireCode(t, err, "cuMemCreate", cuda.ErrorNotPermitted)
		mcProp := cuda.MulticastProp{NumDevices: 2, Size: 2 * mib, HandleTypes: uint64(ht)}
		_, err = n.MulticastCreate(&mcProp)
		requireCode(t, err, "cuMulticastCreate", cuda.ErrorNotPermitted)
	}
	prop := cuda.DeviceAllocationProp(0, cuda.HandlePosixFD)
	h, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	require.NoError(t, n.MemRelease(h))
	require.NoError(t, n.CheckNoLeaks())

	// Without Fabric, fabric handles are not supported at all.
	off := newNode(t, Config{FabricNotPermitted: true})
	fp := cuda.DeviceAllocationProp(0, cuda.HandleFabric)
	_, err = off.MemCreate(2*mib, &fp)
	requireCode(t, err, "cuMemCreate", cuda.ErrorNotSupported)
}
