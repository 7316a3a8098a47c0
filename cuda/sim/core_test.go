package sim

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

func TestInitRequired(t *testing.T) {
	n := New(Config{})
	defer n.Close()
	_, err := n.DeviceCount()
	requireCode(t, err, "cuDeviceGetCount", cuda.ErrorNotInitialized)
	v, err := n.DriverVersion()
	require.NoError(t, err)
	require.Equal(t, 13000, v)
	require.NoError(t, n.Init())
	c, err := n.DeviceCount()
	require.NoError(t, err)
	require.Equal(t, 4, c)
}

func TestDeviceQueries(t *testing.T) {
	n := newNode(t, Config{Devices: 3, NoMulticast: []int{2}, NoPeer: [][2]int{{0, 2}}, SMCount: 100, DeviceName: "X"})
	name, err := n.DeviceName(1)
	require.NoError(t, err)
	require.Equal(t, "X", name)
	sm, err := n.DeviceAttribute(cuda.AttrMultiprocessorCount, 0)
	require.NoError(t, err)
	require.Equal(t, 100, sm)
	mc, err := n.DeviceAttribute(cuda.AttrMulticastSupported, 1)
	require.NoError(t, err)
	require.Equal(t, 1, mc)
	mc, err = n.DeviceAttribute(cuda.AttrMulticastSupported, 2)
	require.NoError(t, err)
	require.Equal(t, 0, mc)
	ok, err := n.DeviceCanAccessPeer(0, 1)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = n.DeviceCanAccessPeer(2, 0)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = n.DeviceCanAccessPeer(1, 1)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = n.DeviceGet(3)
	requireCode(t, err, "cuDeviceGet", cuda.ErrorInvalidDevice)
	bus, err := n.DevicePCIBusID(1)
	require.NoError(t, err)
	require.Equal(t, "0000:28:00.0", bus)
	total, err := n.DeviceTotalMem(0)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<30), total)
}

func TestCopyRoundTrip(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 1)
	b := mapOn(t, n, 1, 4*mib, 1)
	data := randBytes(t, 3*mib+123)
	require.NoError(t, cuda.CopyHtoD(n, b.ptr+77, data))
	got := make([]byte, len(data))
	require.NoError(t, cuda.CopyDtoH(n, got, b.ptr+77))
	require.True(t, bytes.Equal(data, got))
	oracle, err := n.ReadDevice(b.ptr+77, len(data))
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, oracle))

	// Device to device, async on a stream.
	c := mapOn(t, n, 1, 4*mib, 1)
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	require.NoError(t, n.MemcpyDtoDAsync(c.ptr, b.ptr+77, uint64(len(data)), s))
	require.NoError(t, n.StreamSynchronize(s))
	got2, err := n.ReadDevice(c.ptr, len(data))
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got2))

	// Memset.
	require.NoError(t, n.MemsetD32(c.ptr+8, 0xdeadbeef, 5))
	require.NoError(t, n.MemsetD8Async(c.ptr+4, 0x5a, 3, s))
	require.NoError(t, n.StreamSynchronize(s))
	w, err := n.ReadDevice(c.ptr, 32)
	require.NoError(t, err)
	want := append([]byte(nil), data[:32]...)
	copy(want[4:7], []byte{0x5a, 0x5a, 0x5a})
	for i := 0; i < 5; i++ {
		copy(want[8+4*i:], []byte{0xef, 0xbe, 0xad, 0xde})
	}
	require.Equal(t, want, w)

	var x uint64
	require.NoError(t, n.MemcpyDtoH(unsafe.Pointer(&x), c.ptr+8, 8))
	require.Equal(t, uint64(0xdeadbeefdeadbeef), x)

	require.NoError(t, n.StreamDestroy(s))
	b.free(t, n)
	c.free(t, n)
}
