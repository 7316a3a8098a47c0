package vmm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/vmm"
)

// TestCreateKnownGranularity: given the granularity the caller asked for
// (AllocOptions.Granularity), Create does not ask the driver again, and
// still refuses a size that is not a multiple of it; without it, Create
// asks once.
func TestCreateKnownGranularity(t *testing.T) {
	const mib = 1 << 20
	n := newNode(t, sim.Config{Devices: 1, AllocGranularityMin: 2 * mib, AllocGranularityRecommended: 2 * mib})
	g, err := vmm.Granularity(n, 0, cuda.HandlePosixFD, true)
	require.NoError(t, err)
	n.ResetCalls()
	a, err := vmm.Create(n, 0, 3*g, vmm.AllocOptions{Handles: cuda.HandlePosixFD, Granularity: g})
	require.NoError(t, err)
	assert.Empty(t, n.CallsOf("cuMemGetAllocationGranularity"))
	require.NoError(t, a.Close())
	n.ResetCalls()
	_, err = vmm.Create(n, 0, 3*g+g/2, vmm.AllocOptions{Handles: cuda.HandlePosixFD, Granularity: g})
	assert.ErrorIs(t, err, vmm.ErrNotAligned)
	assert.Empty(t, n.CallsOf("cuMemCreate"), "refused before the driver")
	_, err = vmm.Create(n, 7, 3*g, vmm.AllocOptions{Granularity: g})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	n.ResetCalls()
	a, err = vmm.Create(n, 0, 3*g, vmm.AllocOptions{Handles: cuda.HandlePosixFD})
	require.NoError(t, err)
	assert.Len(t, n.CallsOf("cuMemGetAllocationGranularity"), 1)
	require.NoError(t, a.Close())
}
