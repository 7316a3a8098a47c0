package team

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// TestErrorMessages: the errors a user meets first say what went wrong
// once, without repeating themselves (issue 15, items 6 and 10).
func TestErrorMessages(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	tm, err := New(testCtx(t), node, devices(1), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()

	assert.Equal(t, "auto: the device supports multicast", tm.Reason())

	_, err = tm.Alloc(0)
	require.ErrorIs(t, err, ErrZeroSize)
	assert.EqualError(t, err, "team: zero-size buffer: Alloc(0); ask for 1 byte or more")

	_, err = tm.Alloc(smallData + 1)
	require.ErrorIs(t, err, ErrNoSpace)
	assert.EqualError(t, err, "team: workspace data area exhausted: Alloc(1048577): the data area is 1048576 bytes (WithWorkspaceSize)")

	err = tm.Free(Buffer{})
	require.ErrorIs(t, err, ErrBadFree)
	assert.EqualError(t, err, "team: Free of a buffer that is not live in this team: the zero Buffer (Alloc did not make it)")

	b, err := tm.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, tm.Free(b))
	err = tm.Free(b)
	require.ErrorIs(t, err, ErrBadFree)
	assert.EqualError(t, err, "team: Free of a buffer that is not live in this team: no live buffer at offset 0 (freed already?)")

	other, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	assert.Equal(t, "auto: all 2 devices support multicast", other.Reason())
	ob, err := other.Alloc(64)
	require.NoError(t, err)
	err = tm.Free(ob)
	require.ErrorIs(t, err, ErrBadFree)
	assert.EqualError(t, err, "team: Free of a buffer that is not live in this team: it belongs to another team")
	require.NoError(t, other.Close())
}

// TestCancelledContextMessage: a bring-up whose context is already
// cancelled names the rank, the step and the bootstrap's collective once.
func TestCancelledContextMessage(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := New(ctx, node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.ErrorIs(t, err, context.Canceled)
	assert.EqualError(t, err, "team: rank 0: query device: bootstrap: AllGather #0: context canceled")
	require.NoError(t, node.CheckNoLeaks())
}

// TestNilDriver: New and NewRank refuse a nil cuda.Driver with an error,
// not a panic; NewRank still takes part in the first exchange, so that
// the other ranks stop.
func TestNilDriver(t *testing.T) {
	_, err := New(context.Background(), nil, devices(2))
	require.ErrorIs(t, err, ErrNilDriver)
	assert.EqualError(t, err, "team: nil cuda.Driver: New needs the driver cuda.Open returns, or a simulated node (cuda/sim)")

	// A nil *cuda.Lib is a driver that was not loaded: it says so, once.
	var lib *cuda.Lib
	_, err = New(context.Background(), lib, devices(2))
	require.ErrorIs(t, err, cuda.ErrNoDriver)
	assert.EqualError(t, err, "team: start: cuInit: no CUDA driver: the Lib was not loaded (cuda.Load)")

	node := newNode(t, sim.Config{Devices: 2})
	boots := NewInProcess(2)
	errs := make(chan error, 1)
	go func() {
		_, err := NewRank(testCtx(t), node, 1, boots[1], WithWorkspaceSize(smallData), quiet())
		errs <- err
	}()
	_, err = NewRank(testCtx(t), nil, 0, boots[0])
	require.ErrorIs(t, err, ErrNilDriver)
	assert.EqualError(t, err, "team: rank 0 (device 0): nil cuda.Driver: NewRank needs the driver cuda.Open returns, or a simulated node (cuda/sim)")
	var pe *PeerError
	require.ErrorAs(t, <-errs, &pe, "rank 1 stops at the first exchange")
	assert.Equal(t, 0, pe.Rank)
	require.NoError(t, node.CheckNoLeaks())
}
