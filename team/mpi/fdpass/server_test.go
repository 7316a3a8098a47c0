//go:build linux

package fdpass

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every rank writes random content into a memfd, passes it, and reads
// every peer's content through the descriptors it received.
func TestExchangeMemfd(t *testing.T) {
	const n = 4
	base, err := fdtest.Take()
	require.NoError(t, err)
	srvs, paths, _ := newJob(t, n, Config{Job: "xchg"})
	for _, s := range srvs {
		fi, err := os.Lstat(s.Dir())
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "socket directory mode")
		fi, err = os.Lstat(s.Path())
		require.NoError(t, err)
		assert.Equal(t, os.ModeSocket, fi.Mode().Type())
	}

	for seq := uint64(1); seq <= 3; seq++ {
		content := make([][]byte, n)
		fds := make([]int, n)
		for r := range n {
			content[r] = append([]byte(fmt.Sprintf("rank %d seq %d:", r, seq)), randBytes(t, 100+r)...)
			fds[r], err = fdtest.Memfd(fmt.Sprintf("r%d", r), content[r])
			require.NoError(t, err)
		}
		got := make([][]int, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				got[r], errs[r] = srvs[r].Exchange(ctx, seq, paths, fds[r])
			})
		}
		wg.Wait()
		for r := range n {
			require.NoError(t, errs[r], "rank %d", r)
			require.Len(t, got[r], n)
			for p := range n {
				fd := got[r][p]
				require.GreaterOrEqual(t, fd, 0)
				assert.NotEqual(t, fds[p], fd, "rank %d got the sender's own descriptor number for %d", r, p)
				data, err := fdtest.ReadAll(fd)
				require.NoError(t, err)
				assert.Equal(t, content[p], data, "rank %d reading rank %d's file", r, p)
				d1, i1, err := fdtest.Identity(fd)
				require.NoError(t, err)
				d2, i2, err := fdtest.Identity(fds[p])
				require.NoError(t, err)
				assert.Equal(t, [2]uint64{d2, i2}, [2]uint64{d1, i1}, "same file behind both descriptors")
				require.NoError(t, syscall.Close(fd))
			}
		}
		for r := range n {
			assert.True(t, fdtest.IsOpen(fds[r]), "the caller's own descriptor is not consumed")
			require.NoError(t, syscall.Close(fds[r]))
		}
	}

	dirs := make([]string, n)
	for r, s := range srvs {
		dirs[r] = s.Dir()
		require.NoError(t, s.Close())
		require.NoError(t, s.Close(), "second Close")
	}
	for _, d := range dirs {
		_, err := os.Lstat(d)
		assert.True(t, errors.Is(err, os.ErrNotExist), "directory %s removed: %v", d, err)
	}
	base.NoneAdded(t, "open descriptors before and after")
}

// fd = -1: nothing passes, every rank sees -1 for that rank.
func TestExchangeNone(t *testing.T) {
	const n = 3
	srvs, paths, _ := newJob(t, n, Config{})
	fd, err := fdtest.Memfd("one", []byte("only rank 1"))
	require.NoError(t, err)
	defer syscall.Close(fd)
	got := make([][]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			mine := -1
			if r == 1 {
				mine = fd
			}
			got[r], errs[r] = srvs[r].Exchange(context.Background(), 9, paths, mine)
		})
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r])
		assert.Equal(t, -1, got[r][0])
		assert.Equal(t, -1, got[r][2])
		data, err := fdtest.ReadAll(got[r][1])
		require.NoError(t, err)
		assert.Equal(t, "only rank 1", string(data))
		syscall.Close(got[r][1])
	}
}

func TestWrongTokenRefused(t *testing.T) {
	srvs, _, lb := newJob(t, 2, Config{})
	bad, err := NewToken()
	require.NoError(t, err)
	fd, err := fdtest.Memfd("x", []byte("secret"))
	require.NoError(t, err)
	defer syscall.Close(fd)

	// From another goroutine, as a process without the token would.
	errc := make(chan error, 1)
	go func() {
		errc <- Send(context.Background(), srvs[0].Path(), bad, Envelope{From: 1, To: 0, Seq: 1}, fd)
	}()
	err = <-errc
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "wrong job token")
	assert.Contains(t, lb.String(), "refused connection")
	assert.Contains(t, lb.String(), "wrong job token")
	assert.Contains(t, lb.String(), fmt.Sprintf("peer_pid=%d", os.Getpid()))

	// Nothing was taken: collecting rank 1's descriptor times out and says
	// which rank is missing.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = srvs[0].Collect(ctx, 1, []int{1})
	var me *MissingError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, []int{1}, me.Ranks)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// A raw client that sends garbage, or a hello with bad fields, is
// refused with the reason and logged.
func TestMalformedRefused(t *testing.T) {
	srvs, _, lb := newJob(t, 3, Config{})
	tok := srvs[0].token
	good := func() hello {
		h := hello{From: 1, To: 0, Seq: 5}
		copy(h.Token[:], tok)
		return h
	}
	cases := []struct {
		name   string
		msg    func() []byte
		reason string
	}{
		{"garbage", func() []byte { return []byte(strings.Repeat("G", helloSize)) }, "bad magic"},
		{"wrong-rank", func() []byte { h := good(); h.To = 2; return h.marshal() }, "addressed to rank 2"},
		{"self", func() []byte { h := good(); h.From = 0; return h.marshal() }, "sender rank 0 invalid"},
		{"out-of-range", func() []byte { h := good(); h.From = 3; return h.marshal() }, "sender rank 3 invalid"},
		{"bad-pad", func() []byte { b := good().marshal(); b[63] = 1; return b }, "nonzero padding"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", srvs[0].Path())
			require.NoError(t, err)
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Write(tc.msg())
			require.NoError(t, err)
			err = readStatus(c.(*net.UnixConn))
			require.ErrorIs(t, err, ErrRefused)
			assert.Contains(t, err.Error(), tc.reason)
			assert.Contains(t, lb.String(), tc.reason)
		})
	}
}

// A client that passes the hello but then sends two descriptors is
// refused, and the server closes both.
func TestExtraDescriptorsRefused(t *testing.T) {
	srvs, _, lb := newJob(t, 2, Config{})
	a, err := fdtest.Memfd("a", []byte("a"))
	require.NoError(t, err)
	defer syscall.Close(a)
	b, err := fdtest.Memfd("b", []byte("b"))
	require.NoError(t, err)
	defer syscall.Close(b)
	base, err := fdtest.Take()
	require.NoError(t, err)

	c, err := net.Dial("unix", srvs[0].Path())
	require.NoError(t, err)
	uc := c.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	h := hello{From: 1, To: 0, Seq: 2, HasFD: true}
	copy(h.Token[:], srvs[0].token)
	_, err = uc.Write(h.marshal())
	require.NoError(t, err)
	require.NoError(t, readStatus(uc))
	_, _, err = uc.WriteMsgUnix([]byte{0}, syscall.UnixRights(a, b), nil)
	require.NoError(t, err)
	err = readStatus(uc)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "2 descriptors (want 1)")
	uc.Close()
	assert.Contains(t, lb.String(), "descriptor message malformed")
	base.NoneAdded(t, "server closed the descriptors it refused")
}

func TestDuplicateAndStaleRefused(t *testing.T) {
	srvs, paths, _ := newJob(t, 2, Config{})
	tok := srvs[0].token
	ctx := context.Background()
	require.NoError(t, Send(ctx, paths[0], tok, Envelope{From: 1, To: 0, Seq: 4}, -1))
	err := Send(ctx, paths[0], tok, Envelope{From: 1, To: 0, Seq: 4}, -1)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "duplicate")
	got, err := srvs[0].Collect(ctx, 4, []int{1})
	require.NoError(t, err)
	assert.Equal(t, map[int]int{1: -1}, got)
	for _, seq := range []uint64{4, 3} {
		err = Send(ctx, paths[0], tok, Envelope{From: 1, To: 0, Seq: seq}, -1)
		require.ErrorIs(t, err, ErrRefused, "seq %d", seq)
		assert.Contains(t, err.Error(), "already finished")
	}
}

// Deadlines: a silent client is cut off by the handshake timeout; a
// silent server does not hold Send past its context; Collect ends on its
// context; Exchange with a dead peer names it.
func TestDeadlines(t *testing.T) {
	t.Run("silent-client", func(t *testing.T) {
		srvs, _, lb := newJob(t, 2, Config{HandshakeTimeout: 150 * time.Millisecond})
		c, err := net.Dial("unix", srvs[0].Path())
		require.NoError(t, err)
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		err = readStatus(c.(*net.UnixConn))
		el := time.Since(start)
		require.ErrorIs(t, err, ErrRefused)
		assert.Contains(t, err.Error(), "reading hello")
		assert.Less(t, el, 3*time.Second)
		assert.GreaterOrEqual(t, el, 100*time.Millisecond)
		assert.Contains(t, lb.String(), "i/o timeout")
	})
	t.Run("silent-server", func(t *testing.T) {
		path := silentServer(t)
		tok, _ := NewToken()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := Send(ctx, path, tok, Envelope{From: 1, To: 0, Seq: 1}, -1)
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("cancelled-send", func(t *testing.T) {
		path := silentServer(t)
		tok, _ := NewToken()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := Send(ctx, path, tok, Envelope{From: 1, To: 0, Seq: 1}, -1)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("no-server", func(t *testing.T) {
		tok, _ := NewToken()
		err := Send(context.Background(), filepath.Join(t.TempDir(), "none"), tok, Envelope{From: 1, To: 0}, -1)
		assert.ErrorIs(t, err, syscall.ENOENT)
	})
	t.Run("dead-peer", func(t *testing.T) {
		srvs, paths, _ := newJob(t, 3, Config{})
		require.NoError(t, srvs[2].Close()) // rank 2 died
		fd, err := fdtest.Memfd("d", []byte("d"))
		require.NoError(t, err)
		defer syscall.Close(fd)
		base, err := fdtest.Take()
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := time.Now()
		for r := range 2 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				_, errs[r] = srvs[r].Exchange(ctx, 1, paths, fd)
			})
		}
		wg.Wait()
		assert.Less(t, time.Since(start), 3*time.Second)
		for r := range 2 {
			var pe *PeerError
			require.ErrorAs(t, errs[r], &pe, "rank %d", r)
			assert.Equal(t, 2, pe.Rank)
			var me *MissingError
			require.ErrorAs(t, errs[r], &me, "rank %d", r)
			assert.Equal(t, []int{2}, me.Ranks)
		}
		base.NoneAdded(t, "a failed exchange closes what it gathered")
		assert.True(t, fdtest.IsOpen(fd), "the caller's own descriptor stays open")
	})
}

// Close removes the socket and directory, closes descriptors nobody
// collected, and ends a Collect in progress.
func TestCloseCleansUp(t *testing.T) {
	base, err := fdtest.Take()
	require.NoError(t, err)
	srvs, paths, _ := newJob(t, 2, Config{})
	fd, err := fdtest.Memfd("c", []byte("c"))
	require.NoError(t, err)
	require.NoError(t, Send(context.Background(), paths[0], srvs[0].token, Envelope{From: 1, To: 0, Seq: 1}, fd))
	require.NoError(t, syscall.Close(fd))
	errc := make(chan error, 1)
	go func() {
		_, err := srvs[0].Collect(context.Background(), 2, []int{1})
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	dir := srvs[0].Dir()
	require.NoError(t, srvs[0].Close())
	require.NoError(t, srvs[1].Close())
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Collect still blocked after Close")
	}
	_, err = os.Lstat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
	base.NoneAdded(t, "received but uncollected descriptor closed by Close")
	_, err = srvs[0].Collect(context.Background(), 3, []int{1})
	assert.ErrorIs(t, err, ErrClosed)
}

func TestListenChecks(t *testing.T) {
	tok, err := NewToken()
	require.NoError(t, err)
	_, err = Listen(Config{Token: tok[:8], Rank: 0, Size: 1})
	assert.ErrorContains(t, err, "token is 8 bytes")
	_, err = Listen(Config{Token: tok, Rank: 2, Size: 2})
	assert.ErrorContains(t, err, "rank 2 of 2")

	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	require.NoError(t, os.Mkdir(long, 0o700))
	_, err = Listen(Config{Token: tok, Size: 1, Parent: long})
	assert.ErrorIs(t, err, ErrPathTooLong)
	entries, err := os.ReadDir(long)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing left behind")

	// $XDG_RUNTIME_DIR is used when it is private, not when it is not.
	xdg := t.TempDir()
	require.NoError(t, os.Chmod(xdg, 0o700))
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	assert.Equal(t, xdg, DefaultParent())
	s, err := Listen(Config{Token: tok, Size: 1, Job: "my job/../x"})
	require.NoError(t, err)
	assert.Equal(t, xdg, filepath.Dir(s.Dir()))
	assert.True(t, strings.HasPrefix(filepath.Base(s.Dir()), "nvls-myjobx-r0-"), s.Dir())
	require.NoError(t, s.Close())
	require.NoError(t, os.Chmod(xdg, 0o755))
	assert.Equal(t, os.TempDir(), DefaultParent())

	assert.ErrorIs(t, checkPrivate(xdg), ErrUnsafeDir)
}

// silentServer is the path of a socket whose server accepts one
// connection and says nothing for 3 seconds.
func silentServer(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(3 * time.Second)
			c.Close()
		}
	}()
	return path
}
