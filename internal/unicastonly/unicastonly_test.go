package unicastonly

import (
	"runtime"
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRefusesEveryMulticastCall(t *testing.T) {
	n := sim.New(sim.Config{Devices: 2})
	defer n.Close()
	require.NoError(t, n.Init())
	var refused []string
	d := Driver{Driver: n, OnRefuse: func(op string) { refused = append(refused, op) }}
	var prop cuda.MulticastProp
	_, err := d.MulticastGetGranularity(&prop, cuda.GranularityMinimum)
	assert.ErrorIs(t, err, ErrMulticastForbidden)
	_, err = d.MulticastCreate(&prop)
	assert.ErrorIs(t, err, ErrMulticastForbidden)
	assert.ErrorIs(t, d.MulticastAddDevice(1, 0), ErrMulticastForbidden)
	assert.ErrorIs(t, d.MulticastBindMem(1, 0, 2, 0, 0), ErrMulticastForbidden)
	assert.ErrorIs(t, d.MulticastBindAddr(1, 0, 0, 0), ErrMulticastForbidden)
	assert.ErrorIs(t, d.MulticastUnbind(1, 0, 0, 0), ErrMulticastForbidden)
	assert.Equal(t, []string{"cuMulticastGetGranularity", "cuMulticastCreate", "cuMulticastAddDevice",
		"cuMulticastBindMem", "cuMulticastBindAddr", "cuMulticastUnbind"}, refused)
	for _, c := range n.Calls() {
		assert.NotContains(t, c.Op, "cuMulticast", "reached the driver")
	}
	// Everything else passes through.
	cnt, err := d.DeviceCount()
	require.NoError(t, err)
	assert.Equal(t, 2, cnt)
}

// TestHostMemoryPassesThrough: the mapped host memory Sync reads the
// kernels' status from (cuMemHostAlloc, cuMemHostGetDevicePointer,
// cuMemFreeHost) reaches the driver.
func TestHostMemoryPassesThrough(t *testing.T) {
	n := sim.New(sim.Config{Devices: 1})
	defer n.Close()
	require.NoError(t, n.Init())
	d := Driver{Driver: n, OnRefuse: func(op string) { t.Errorf("%s refused", op) }}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := d.PrimaryCtxRetain(0)
	require.NoError(t, err)
	require.NoError(t, d.CtxSetCurrent(ctx))
	p, err := d.MemHostAlloc(64, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap)
	require.NoError(t, err)
	dp, err := d.MemHostGetDevicePointer(p, 0)
	require.NoError(t, err)
	assert.NotZero(t, dp)
	require.NoError(t, d.MemFreeHost(p))
	for _, op := range []string{"cuMemHostAlloc", "cuMemHostGetDevicePointer", "cuMemFreeHost"} {
		assert.Len(t, n.CallsOf(op), 1, op)
	}
	require.NoError(t, d.CtxSetCurrent(0))
	require.NoError(t, d.PrimaryCtxRelease(0))
	require.NoError(t, n.CheckNoLeaks())
}
