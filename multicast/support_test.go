package multicast

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

func TestQuery(t *testing.T) {
	n := sim.New(sim.Config{Devices: 3, NoMulticast: []int{1}, Fabric: true})
	defer n.Close()
	require.NoError(t, n.Init())
	sups, err := QueryAll(n, []cuda.Device{0, 1, 2})
	require.NoError(t, err)
	require.Len(t, sups, 3)
	for i, s := range sups {
		assert.Equal(t, cuda.Device(i), s.Device)
		assert.True(t, s.VMM)
		assert.True(t, s.PosixFD)
		assert.True(t, s.Fabric)
		assert.Equal(t, cuda.HandlePosixFD|cuda.HandleFabric, s.HandleTypes())
		assert.Equal(t, sim.DefaultDriverVersion, s.DriverVersion)
	}
	assert.True(t, sups[0].Multicast)
	assert.False(t, sups[1].Multicast)
	require.NoError(t, sups[0].Usable(cuda.HandlePosixFD))
	err = sups[1].Usable(cuda.HandleNone)
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "device 1")
	assert.Contains(t, err.Error(), "MULTICAST_SUPPORTED")
	for _, c := range n.Calls() {
		assert.NotContains(t, c.Op, "cuMulticast", "a support query calls no multicast entry point")
	}
	_, err = Query(n, 7)
	require.Error(t, err)
}

func TestQueryOldDriverAndMissingFeatures(t *testing.T) {
	n := sim.New(sim.Config{Devices: 2, DriverVersion: 12000, NoPosixFD: true})
	defer n.Close()
	require.NoError(t, n.Init())
	s, err := Query(n, 0)
	require.NoError(t, err)
	assert.False(t, s.Multicast, "no multicast before CUDA 12.1")
	assert.False(t, s.PosixFD)
	err = s.Usable(cuda.HandleNone)
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "12000")
	// A device that does multicast but cannot export the asked handle type.
	s.DriverVersion, s.Multicast = 13000, true
	err = s.Usable(cuda.HandlePosixFD)
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "posix-fd")
	s.VMM = false
	assert.ErrorContains(t, s.Usable(cuda.HandleNone), "virtual memory management")
}

func TestGranularity(t *testing.T) {
	n := sim.New(sim.Config{Devices: 2, AllocGranularityMin: 2 << 20, AllocGranularityRecommended: 4 << 20,
		MulticastGranularityMin: 2 << 20, MulticastGranularityRecommended: 32 << 20})
	defer n.Close()
	require.NoError(t, n.Init())
	g, err := Granularity(n, []cuda.Device{0, 1}, 2, 1<<20, cuda.HandlePosixFD)
	require.NoError(t, err)
	assert.Equal(t, Granularities{Multicast: 32 << 20, Allocation: 4 << 20, Size: 32 << 20}, g)
	assert.Equal(t, uint64(32<<20), RoundUp(1, g.Size))
	assert.Equal(t, uint64(64<<20), RoundUp(32<<20+1, g.Size))
	_, err = Granularity(n, nil, 2, 0, 0)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Granularity(n, []cuda.Device{0}, 0, 0, 0)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestLCMRoundUp(t *testing.T) {
	for _, c := range []struct{ a, b, want uint64 }{
		{2 << 20, 512 << 20, 512 << 20},
		{6, 4, 12},
		{3 << 20, 2 << 20, 6 << 20},
		{1, 7, 7},
		{9, 9, 9},
	} {
		got := LCM(c.a, c.b)
		assert.Equal(t, c.want, got, "LCM(%d, %d)", c.a, c.b)
		assert.Zero(t, got%c.a)
		assert.Zero(t, got%c.b)
		assert.Equal(t, got, LCM(c.b, c.a))
	}
	assert.Equal(t, uint64(12), RoundUp(7, 6))
	assert.Equal(t, uint64(12), RoundUp(12, 6))
	assert.Equal(t, uint64(0), RoundUp(0, 6))
}
