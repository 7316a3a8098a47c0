//go:build !windows

package posixfd

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDupCloexec: the copy is another descriptor of the same file, marked
// close-on-exec, and outlives the original; Close closes it.
func TestDupCloexec(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "fd")
	require.NoError(t, err)
	_, err = f.WriteString("nvls")
	require.NoError(t, err)
	fd, err := DupCloexec(int(f.Fd()))
	require.NoError(t, err)
	assert.NotEqual(t, int(f.Fd()), fd)
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	require.Zero(t, errno)
	assert.NotZero(t, flags&syscall.FD_CLOEXEC, "close-on-exec")
	require.NoError(t, f.Close())
	buf := make([]byte, 4)
	n, err := syscall.Pread(fd, buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "nvls", string(buf[:n]))
	require.NoError(t, Close(fd))
	assert.Error(t, Close(fd), "closed already")
	_, err = DupCloexec(-1)
	assert.ErrorIs(t, err, syscall.EBADF)
}
