package gputest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

func TestVirtualRanks(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
		ok   bool
	}{{"2", 2, true}, {"8", 8, true}, {"1", 0, false}, {"9", 0, false}, {"two", 0, false}, {"", 0, true}, {" 3 ", 3, true}} {
		t.Setenv(EnvVirtualRanks, tc.v)
		n, err := VirtualRanks(8)
		if tc.ok {
			require.NoError(t, err, tc.v)
			assert.Equal(t, tc.want, n)
		} else {
			assert.ErrorContains(t, err, EnvVirtualRanks, tc.v)
		}
	}
}

// TestDevices on a simulated node: the machine's GPUs when there are
// enough (capped at max), virtual ranks on GPU 0 when asked for, a skip
// otherwise.
func TestDevices(t *testing.T) {
	node := sim.New(sim.Config{Devices: 3})
	defer node.Close()
	require.NoError(t, node.Init())
	t.Setenv(EnvVirtualRanks, "4")
	devs, shared := Devices(t, node, 2, 2)
	assert.Equal(t, []cuda.Device{0, 1}, devs)
	assert.False(t, shared)

	one := sim.New(sim.Config{Devices: 1})
	defer one.Close()
	require.NoError(t, one.Init())
	devs, shared = Devices(t, one, 2, 8)
	assert.Equal(t, []cuda.Device{0, 0, 0, 0}, devs)
	assert.True(t, shared)

	t.Run("skip", func(t *testing.T) {
		t.Setenv(EnvVirtualRanks, "2")
		Devices(t, one, 3, 8)
		t.Error("not skipped: 2 virtual ranks for a test that needs 3")
	})
}
