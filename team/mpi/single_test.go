//go:build mpi

package mpi

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without a launcher, New makes a singleton world of one rank, and the
// last Close finalizes MPI for good. (Under mpirun the world's Bootstrap
// keeps MPI up, so this test runs in the plain run only.)
func TestSingletonLifecycle(t *testing.T) {
	if UnderLauncher() {
		t.Skip("singleton test: runs only without an MPI launcher (the plain run)")
	}
	b, err := New(tctx(t, 30*time.Second), WithLogger(newLogger(&fdtest.LogBuf{})))
	require.NoError(t, err)
	assert.Equal(t, 0, b.Rank())
	assert.Equal(t, 1, b.Size())
	assert.Equal(t, 0, b.LocalRank())
	assert.Equal(t, 1, b.LocalSize())
	assert.Equal(t, 1, b.Hosts())

	// A second Bootstrap alongside: Close of the first keeps MPI up.
	b2, err := New(tctx(t, 30*time.Second), WithLogger(newLogger(&fdtest.LogBuf{})))
	require.NoError(t, err)

	mine := make([]byte, 1000)
	_, err = rand.Read(mine)
	require.NoError(t, err)
	all, err := b.AllGather(tctx(t, 10*time.Second), mine)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, mine, all[0])
	require.NoError(t, b.Barrier(tctx(t, 10*time.Second)))

	fd, err := fdtest.Memfd("single", mine)
	require.NoError(t, err)
	fds, err := b.AllGatherFDs(tctx(t, 10*time.Second), fd)
	require.NoError(t, err)
	require.Len(t, fds, 1)
	assert.NotEqual(t, fd, fds[0], "a duplicate, owned by the caller")
	got, err := fdtest.ReadAll(fds[0])
	require.NoError(t, err)
	assert.Equal(t, mine, got)
	syscall.Close(fds[0])
	syscall.Close(fd)

	// A context that already ended fails the call without breaking the
	// Bootstrap.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.AllGather(ctx, mine)
	assert.ErrorIs(t, err, context.Canceled)
	require.NoError(t, b.Barrier(tctx(t, 10*time.Second)))

	// A deadline that passed is named: the caller's, or the timeout's
	// with where it came from (issue 24).
	ctx, cancel = context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	_, err = b.AllGather(ctx, mine)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.EqualError(t, err, "mpi: rank 0: AllGather: context deadline exceeded (the caller's context deadline)")
	for _, c := range []struct {
		env   string
		opts  []Option
		named string
	}{
		{"1ns", nil, "setup deadline NVLS_SETUP_TIMEOUT=1ns"},
		{"", []Option{WithTimeout(time.Nanosecond)}, "setup deadline WithTimeout(1ns)"},
	} {
		t.Setenv(EnvSetupTimeout, c.env)
		b3, err := New(tctx(t, 30*time.Second), append([]Option{WithLogger(newLogger(&fdtest.LogBuf{}))}, c.opts...)...)
		require.NoError(t, err)
		err = b3.Barrier(context.Background())
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.EqualError(t, err, "mpi: rank 0: Barrier: context deadline exceeded ("+c.named+")")
		require.NoError(t, b3.Close())
	}

	dir := filepath.Dir(b.SocketPath())
	require.NoError(t, b.Close())
	_, err = os.Lstat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = b.AllGather(context.Background(), nil)
	assert.ErrorIs(t, err, team.ErrBootstrapClosed)
	require.NoError(t, b2.Barrier(tctx(t, 10*time.Second)), "MPI still up for the other Bootstrap")
	assert.Error(t, Finalize(time.Second), "Finalize refuses while a Bootstrap is open")

	require.NoError(t, b2.Close())
	_, err = New(tctx(t, 10*time.Second))
	assert.ErrorIs(t, err, ErrFinalized)
	assert.ErrorIs(t, Init(), ErrFinalized)
	assert.NoError(t, Finalize(time.Second), "finalizing again does nothing")
}
