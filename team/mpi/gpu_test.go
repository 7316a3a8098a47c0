//go:build gpu && mpi

package mpi

// The GPU test of the MPI bootstrap, UNICAST only: one process per GPU.
// Build here (cgo, against Debian's OpenMPI), carry, run on 2-4 GPUs:
//
//	CGO_ENABLED=1 go test -c -tags 'gpu mpi' -o .devbin/mpi.test ./team/mpi
//	mpirun --allow-run-as-root -np 4 .devbin/mpi.test -test.run GPU -test.v
//
// No cuMulticast* entry point can be called: the team is asked for the
// unicast transport and the driver is wrapped (unicastonly) so that a
// multicast call fails the test without reaching the real driver.

import (
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/teamlink"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/internal/peercheck"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gpuDriver loads the driver and this rank's device (local rank i on
// device i), skipping on every rank alike when the host lacks a driver or
// has fewer GPUs than local ranks.
func gpuDriver(t *testing.T, b *Bootstrap) (cuda.Driver, cuda.Device) {
	t.Helper()
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	n, err := lib.DeviceCount()
	require.NoError(t, err)
	if n < b.LocalSize() {
		t.Skipf("%d GPU(s) for %d ranks on this host", n, b.LocalSize())
	}
	dev, err := Device(lib, b.LocalRank())
	require.NoError(t, err)
	return unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { t.Errorf("%s called", op) }}, dev
}

// freeMem is cuMemGetInfo's free bytes on dev, read on a locked thread
// with dev's primary context current (the caller holds a reference to it,
// so that the team's retain and release do not create and destroy it).
func freeMem(t *testing.T, d cuda.Driver, c cuda.Context) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, d.CtxSetCurrent(c))
	f, _, err := d.MemGetInfo()
	require.NoError(t, err)
	require.NoError(t, d.CtxSetCurrent(0))
	return f
}

func TestGPUUnicastTeamMPI(t *testing.T) {
	b := needWorld(t, 2)
	d, dev := gpuDriver(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	pc, err := d.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.PrimaryCtxRelease(dev)) }()

	// Which handle path this machine would take (the team uses POSIX
	// FDs); the trial export allocates and frees one granule.
	ht, why, err := b.HandleType(ctx, d, dev)
	require.NoError(t, err)
	t.Logf("rank %d (local %d, device %d): shareable handles %v: %s", b.Rank(), b.LocalRank(), dev, ht, why)

	before := freeMem(t, d, pc)
	start := time.Now()
	tm, err := team.NewRank(ctx, d, dev, b, team.WithTransport(team.Unicast), team.WithWorkspaceSize(64<<20), team.WithLogger(log))
	require.NoError(t, err)
	t.Logf("rank %d: team of %d up in %v: transport %v (%s); %v", b.Rank(), tm.Size(), time.Since(start), tm.Transport(), tm.Reason(), tm.Footprint())
	require.Equal(t, team.Unicast, tm.Transport())
	assert.Zero(t, teamlink.Of(tm).MCBase(0))
	during := freeMem(t, d, pc)
	assert.GreaterOrEqual(t, before-during, teamlink.Of(tm).Layout().Size(), "device %d: the workspace is allocated", dev)

	var fresh [32]byte
	_, err = rand.Read(fresh[:])
	require.NoError(t, err)
	seed, err := peercheck.Seed(ctx, b, fresh)
	require.NoError(t, err)
	for _, size := range []uint64{4096 + 16, 16 << 20} {
		require.NoError(t, peercheck.Run(ctx, tm, b, seed, size), "size %d", size)
		t.Logf("rank %d: read every rank's %d-byte pattern through the peer mappings and found every stamp", b.Rank(), size)
	}
	require.NoError(t, tm.Close())
	require.NoError(t, b.Barrier(ctx))
	after := freeMem(t, d, pc)
	assert.Equal(t, before, after, "device %d: cuMemGetInfo free before %d, after Close %d", dev, before, after)
}
