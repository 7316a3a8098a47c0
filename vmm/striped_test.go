package vmm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/vmm"
)

func TestStripedRoundRobin(t *testing.T) {
	n := newNode(t, sim.Config{Devices: 4})
	devs := []cuda.Device{0, 1, 2, 3}
	s, err := vmm.NewStriped(n, 15*mib, vmm.StripedOptions{Devices: devs, Chunk: 2 * mib})
	require.NoError(t, err)
	require.Equal(t, 8, s.Chunks())
	assert.Equal(t, uint64(16*mib), s.Size())
	assert.Equal(t, devs, s.Access())
	for i := range s.Chunks() {
		want := devs[i%len(devs)]
		assert.Equal(t, want, s.DeviceOf(i))
		for _, at := range []uint64{0, s.Chunk() - 1} {
			ord, err := n.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, s.Ptr()+cuda.DevicePtr(uint64(i)*s.Chunk()+at))
			require.NoError(t, err)
			assert.Equal(t, uint64(want), ord, "chunk %d", i)
		}
	}
	// Each device's memory holds its chunks.
	live := n.Live()
	for _, d := range devs {
		assert.Equal(t, uint64(4*mib), live.DeviceBytes[d], "device %d", d)
	}
	// One flat range: written by device 2, read by device 0, across every
	// chunk boundary.
	data := randBytes(int(s.Size()) - 3)
	require.NoError(t, n.Memory(2).Store(s.Ptr()+1, data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(0).Load(s.Ptr()+1, got))
	assert.Equal(t, data, got)
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Close(), vmm.ErrClosed)
	noLeaks(t, n)
}

func TestStripedLayoutAndAccess(t *testing.T) {
	n := newNode(t, sim.Config{Devices: 4})
	// Pairs of chunks alternate between devices 3 and 1; only device 3 and
	// device 0 may access.
	layout := func(i int) cuda.Device { return []cuda.Device{3, 1}[(i/2)%2] }
	s, err := vmm.NewStriped(n, 12*mib, vmm.StripedOptions{Layout: layout, Access: []cuda.Device{3, 0}, Chunk: 2 * mib})
	require.NoError(t, err)
	want := []cuda.Device{3, 3, 1, 1, 3, 3}
	require.Equal(t, len(want), s.Chunks())
	for i, w := range want {
		ord, err := n.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, s.Ptr()+cuda.DevicePtr(uint64(i)*s.Chunk()))
		require.NoError(t, err)
		assert.Equal(t, uint64(w), ord, "chunk %d", i)
	}
	data := randBytes(int(s.Size()))
	require.NoError(t, n.Memory(0).Store(s.Ptr(), data))
	got := make([]byte, len(data))
	require.NoError(t, n.Memory(3).Load(s.Ptr(), got))
	assert.Equal(t, data, got)
	// Device 1 holds chunks but was not named: no access.
	assert.ErrorIs(t, n.Memory(1).Load(s.Ptr()+4*mib, got[:8]), cuda.ErrIllegalAddress)
	require.NoError(t, s.Close())
	noLeaks(t, n)
}

func TestStripedErrors(t *testing.T) {
	n := newNode(t, sim.Config{Devices: 2, NoPeer: [][2]int{{0, 1}}})
	_, err := vmm.NewStriped(n, 4*mib, vmm.StripedOptions{})
	assert.ErrorIs(t, err, vmm.ErrNoDevices)
	_, err = vmm.NewStriped(n, 0, vmm.StripedOptions{Devices: []cuda.Device{0}})
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
	_, err = vmm.NewStriped(n, 4*mib, vmm.StripedOptions{Devices: []cuda.Device{0, 2}})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.NewStriped(n, 6*mib, vmm.StripedOptions{Layout: func(i int) cuda.Device { return cuda.Device(i) }, Chunk: 2 * mib, Devices: []cuda.Device{0}})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.NewStriped(n, 4*mib, vmm.StripedOptions{Devices: []cuda.Device{0}, Chunk: mib})
	assert.ErrorIs(t, err, vmm.ErrNotAligned)
	// Devices 0 and 1 cannot reach each other: the driver refuses access,
	// and what was made is undone.
	_, err = vmm.NewStriped(n, 4*mib, vmm.StripedOptions{Devices: []cuda.Device{0, 1}})
	assert.ErrorIs(t, err, cuda.ErrInvalidDevice)
	noLeaks(t, n)
}

func TestStripedFaults(t *testing.T) {
	n := newNode(t, sim.Config{})
	opts := vmm.StripedOptions{Devices: []cuda.Device{0, 1, 2}, Access: []cuda.Device{0, 1, 2, 3}}
	n.ResetCalls()
	s, err := vmm.NewStriped(n, 12*mib, opts)
	require.NoError(t, err)
	calls := n.CallCount()
	require.NoError(t, s.Close())
	for i := 1; i <= calls; i++ {
		n.FailNth(i, cuda.ErrorOutOfMemory)
		s, err := vmm.NewStriped(n, 12*mib, opts)
		n.ClearFaults()
		require.ErrorIs(t, err, cuda.ErrOutOfMemory, "call %d", i)
		require.Nil(t, s)
		noLeaks(t, n)
	}
}
