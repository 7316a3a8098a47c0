package fdtest

import (
	"crypto/rand"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemfdRoundTrip(t *testing.T) {
	base, err := OpenFDs()
	require.NoError(t, err)
	data := make([]byte, 5000)
	_, err = rand.Read(data)
	require.NoError(t, err)
	fd, err := Memfd("t", data)
	require.NoError(t, err)
	n, err := OpenFDs()
	require.NoError(t, err)
	assert.Equal(t, base+1, n)
	assert.True(t, IsOpen(fd))
	got, err := ReadAll(fd)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	d, err := syscall.Dup(fd)
	require.NoError(t, err)
	dev1, ino1, err := Identity(fd)
	require.NoError(t, err)
	dev2, ino2, err := Identity(d)
	require.NoError(t, err)
	assert.Equal(t, [2]uint64{dev1, ino1}, [2]uint64{dev2, ino2})
	require.NoError(t, syscall.Close(d))
	require.NoError(t, syscall.Close(fd))
	assert.False(t, IsOpen(fd))
	n, err = OpenFDs()
	require.NoError(t, err)
	assert.Equal(t, base, n)
}
