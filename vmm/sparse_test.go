package vmm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/vmm"
)

func TestSparse(t *testing.T) {
	n := newNode(t, sim.Config{})
	s, err := vmm.NewSparse(n, 63*mib, vmm.SparseOptions{Device: 2, Access: []cuda.Device{2, 0}, Chunk: 2 * mib})
	require.NoError(t, err)
	assert.Equal(t, uint64(64*mib), s.Size())
	assert.Zero(t, s.Committed())
	assert.Zero(t, n.Live().DeviceBytes[2], "a reservation costs no memory")

	at := func(off uint64) cuda.DevicePtr { return s.Ptr() + cuda.DevicePtr(off) }
	inCtx(t, n, 2, func() {
		data := randBytes(mib)
		// Nothing committed: a memcpy into the range fails.
		require.Error(t, cuda.CopyHtoD(n, at(10*mib), data))

		require.NoError(t, s.Commit(8*mib, 4*mib))
		assert.Equal(t, uint64(4*mib), s.Committed())
		assert.Equal(t, uint64(4*mib), n.Live().DeviceBytes[2])
		assert.True(t, s.IsCommitted(8*mib))
		assert.True(t, s.IsCommitted(12*mib-1))
		assert.False(t, s.IsCommitted(12*mib))
		require.NoError(t, cuda.CopyHtoD(n, at(10*mib), data))
		got := make([]byte, len(data))
		require.NoError(t, cuda.CopyDtoH(n, got, at(10*mib)))
		assert.Equal(t, data, got)
		// Next to a committed chunk, uncommitted ones still fault.
		assert.Error(t, cuda.CopyHtoD(n, at(12*mib), data))
		assert.Error(t, cuda.CopyHtoD(n, at(7*mib), data))
		// A copy that runs off the committed end fails too.
		assert.Error(t, cuda.CopyHtoD(n, at(12*mib-mib/2), data))

		// Committing over committed chunks keeps them (and their data).
		require.NoError(t, s.Commit(6*mib, 8*mib))
		assert.Equal(t, uint64(8*mib), s.Committed())
		require.NoError(t, cuda.CopyDtoH(n, got, at(10*mib)))
		assert.Equal(t, data, got)
		require.NoError(t, s.Commit(40*mib, 2*mib))
		assert.Equal(t, [][2]uint64{{6 * mib, 14 * mib}, {40 * mib, 42 * mib}}, s.CommittedRanges())

		// Device 0 was named, device 1 was not.
		require.NoError(t, n.Memory(0).Load(at(10*mib), got[:16]))
		assert.ErrorIs(t, n.Memory(1).Load(at(10*mib), got[:16]), cuda.ErrIllegalAddress)

		require.NoError(t, s.Decommit(10*mib, 2*mib))
		assert.Equal(t, uint64(8*mib), s.Committed())
		assert.Error(t, cuda.CopyDtoH(n, got, at(10*mib)), "decommitted")
		assert.Equal(t, [][2]uint64{{6 * mib, 10 * mib}, {12 * mib, 14 * mib}, {40 * mib, 42 * mib}}, s.CommittedRanges())
		require.NoError(t, s.Decommit(0, 64*mib)) // committed or not
		assert.Zero(t, s.Committed())
		assert.Zero(t, n.Live().DeviceBytes[2])
	})

	assert.ErrorIs(t, s.Commit(mib, 2*mib), vmm.ErrNotAligned)
	assert.ErrorIs(t, s.Commit(2*mib, mib), vmm.ErrNotAligned)
	assert.ErrorIs(t, s.Commit(0, 0), vmm.ErrZeroSize)
	assert.ErrorIs(t, s.Commit(62*mib, 4*mib), vmm.ErrOutOfRange)
	assert.ErrorIs(t, s.Decommit(64*mib, 2*mib), vmm.ErrOutOfRange)
	require.NoError(t, s.Commit(0, 6*mib))
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Close(), vmm.ErrClosed)
	assert.ErrorIs(t, s.Commit(0, 2*mib), vmm.ErrClosed)
	noLeaks(t, n)
}

// A Commit that fails part-way undoes the chunks it committed and keeps
// the ones committed before.
func TestSparseCommitFault(t *testing.T) {
	n := newNode(t, sim.Config{})
	s, err := vmm.NewSparse(n, 32*mib, vmm.SparseOptions{Device: 1, Chunk: 2 * mib})
	require.NoError(t, err)
	require.NoError(t, s.Commit(4*mib, 2*mib))
	data := randBytes(2 * mib)
	require.NoError(t, n.WriteDevice(s.Ptr()+4*mib, data))
	n.ResetCalls()
	require.NoError(t, s.Commit(0, 10*mib))
	calls := n.CallCount()
	require.NoError(t, s.Decommit(0, 4*mib))
	require.NoError(t, s.Decommit(6*mib, 4*mib))
	for i := 1; i <= calls; i++ {
		n.FailNth(i, cuda.ErrorOutOfMemory)
		err := s.Commit(0, 10*mib)
		n.ClearFaults()
		require.ErrorIs(t, err, cuda.ErrOutOfMemory, "call %d", i)
		assert.Equal(t, [][2]uint64{{4 * mib, 6 * mib}}, s.CommittedRanges(), "call %d", i)
		assert.Equal(t, 1, n.Live().Mappings)
		assert.Equal(t, 1, n.Live().Allocations)
		got, err := n.ReadDevice(s.Ptr()+4*mib, len(data))
		require.NoError(t, err)
		require.Equal(t, data, got)
	}
	require.NoError(t, s.Close())
	noLeaks(t, n)
}

// NewSparse checks its options as NewGrowable does, before reserving.
func TestSparseOptionErrors(t *testing.T) {
	n := newNode(t, sim.Config{})
	_, err := vmm.NewSparse(n, 8*mib, vmm.SparseOptions{Device: 4})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.NewSparse(n, 8*mib, vmm.SparseOptions{Device: 0, Access: []cuda.Device{0, 9}})
	assert.ErrorIs(t, err, vmm.ErrUnknownDevice)
	_, err = vmm.NewSparse(n, 8*mib, vmm.SparseOptions{Device: 0, Access: []cuda.Device{}})
	assert.ErrorIs(t, err, vmm.ErrNoDevices)
	_, err = vmm.NewSparse(n, 8*mib, vmm.SparseOptions{Device: 0, Chunk: 3 * mib})
	assert.ErrorIs(t, err, vmm.ErrNotAligned)
	assert.ErrorContains(t, err, "sparse: chunk")
	_, err = vmm.NewSparse(n, 0, vmm.SparseOptions{Device: 0})
	assert.ErrorIs(t, err, vmm.ErrZeroSize)
	_, err = vmm.NewSparse(nil, 8*mib, vmm.SparseOptions{})
	assert.ErrorIs(t, err, vmm.ErrNilHandle)
	noLeaks(t, n)
}
