//go:build linux

package fdtest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// The copy is this binary, byte for byte, executable by all, in a
// directory anyone may traverse.
func TestCopyExecutable(t *testing.T) {
	dst := CopyExecutable(t)
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.ReadFile(self)
	require.NoError(t, err)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "copy differs from %s", self)
	st, err := os.Stat(dst)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm()&0o755)
	dir, err := os.Stat(filepath.Dir(dst))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), dir.Mode().Perm())
}

// Lines written by several goroutines at once all arrive whole.
func TestLogBuf(t *testing.T) {
	var lb LogBuf
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(&lb, "g%d line %d\n", g, i)
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(lb.String(), "\n"), "\n")
	assert.Len(t, lines, 800)
	for _, l := range lines {
		assert.Regexp(t, `^g\d line \d+$`, l)
	}
}

// A snapshot names what was opened since, a number reused for another
// file included, and ignores what was closed, even what it had seen.
func TestSnapshot(t *testing.T) {
	old, err := Memfd("old", []byte("o"))
	require.NoError(t, err)
	s, err := Take()
	require.NoError(t, err)
	added, err := s.Added()
	require.NoError(t, err)
	assert.Empty(t, added, "nothing opened yet")
	require.NoError(t, syscall.Close(old))
	added, err = s.Added()
	require.NoError(t, err)
	assert.Empty(t, added, "a descriptor closed since does not count")
	fd, err := Memfd("new", []byte("n"))
	require.NoError(t, err)
	require.Equal(t, old, fd, "the lowest free number comes back")
	added, err = s.Added()
	require.NoError(t, err)
	assert.Equal(t, []int{fd}, added, "the number reused for another file")
	var ft fakeTB
	s.noneAddedWithin(&ft, 50*time.Millisecond, "leak")
	assert.Contains(t, ft.msg, "leak: descriptors open that were not before: "+strconv.Itoa(fd)+" -> /memfd:new")
	require.NoError(t, syscall.Close(fd))
	ft = fakeTB{}
	s.NoneAdded(&ft, "none")
	assert.Empty(t, ft.msg)
}

// fakeTB records NoneAdded's failure instead of failing the test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Errorf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }
