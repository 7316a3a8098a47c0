//go:build linux

package fdpass

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dialRaw connects a hand-driven client to path (closed at cleanup).
func dialRaw(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	require.NoError(t, err)
	uc := c.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { uc.Close() })
	return uc
}

func helloBytes(tok []byte, from, to int, seq uint64, hasFD bool) []byte {
	h := hello{From: uint32(from), To: uint32(to), Seq: seq, HasFD: hasFD}
	copy(h.Token[:], tok)
	return h.marshal()
}

func (s *Server) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) waitingFor(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[seq] > 0
}

// fdsBackTo waits until every descriptor open now was open at base (the
// server closes its end of a connection after the client's last read),
// failing with msg if one stays.
func fdsBackTo(t *testing.T, base fdtest.Snapshot, msg string) {
	t.Helper()
	base.NoneAdded(t, msg)
}

func memfdOrFail(t *testing.T) int {
	t.Helper()
	fd, err := fdtest.Memfd("cap", []byte("cap"))
	require.NoError(t, err)
	return fd
}

// With MaxConns connections held open (silent clients), one more is
// refused at once with the reason, logged, and closed: the descriptor
// sent right behind its hello is never taken (closed everywhere once the
// connection is gone). When a connection ends, its slot is free again.
func TestConnCapRefused(t *testing.T) {
	srvs, paths, lb := newJob(t, 2, Config{MaxConns: 2})
	tok := srvs[0].token
	base, err := fdtest.Take()
	require.NoError(t, err)
	silent := []*net.UnixConn{dialRaw(t, paths[0]), dialRaw(t, paths[0])}
	require.Eventually(t, func() bool { return srvs[0].connCount() == 2 }, 5*time.Second, 5*time.Millisecond)

	probe, err := newLeakProbe()
	require.NoError(t, err)
	c := dialRaw(t, paths[0])
	// The server may answer and close before these land: their errors
	// do not matter, the answer does.
	c.Write(helloBytes(tok, 1, 0, 1, true))
	c.WriteMsgUnix([]byte{0}, syscall.UnixRights(probe.w), nil)
	err = readStatus(c)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "too many connections (2 at once")
	assert.Error(t, readStatus(c), "the connection is closed after the refusal")
	c.Close()
	assert.True(t, probe.closedEverywhere(3*time.Second), "the refused connection's descriptor is still open somewhere")
	assert.Contains(t, lb.String(), "too many connections")
	assert.Equal(t, 2, srvs[0].connCount(), "the refused connection never held a slot")

	silent[0].Close()
	require.Eventually(t, func() bool { return srvs[0].connCount() < 2 }, 5*time.Second, 5*time.Millisecond)
	fd := memfdOrFail(t)
	require.NoError(t, Send(context.Background(), paths[0], tok, Envelope{From: 1, To: 0, Seq: 1}, fd), "a freed slot takes a connection again")
	syscall.Close(fd)
	got, err := srvs[0].Collect(context.Background(), 1, []int{1})
	require.NoError(t, err)
	syscall.Close(got[1])
	silent[1].Close()
	fdsBackTo(t, base, "open descriptors before and after")
}

// MaxEarly: a sender with MaxEarly descriptors waiting for exchanges no
// Collect waits for is refused one more (logged; it never sent it), other
// senders are not; a descriptor that a Collect in progress waits for is
// taken whatever the count; once collected, what is left below the floor
// is closed.
func TestEarlyCapRefused(t *testing.T) {
	srvs, paths, lb := newJob(t, 3, Config{MaxEarly: 2})
	tok := srvs[0].token
	base, err := fdtest.Take()
	require.NoError(t, err)
	send := func(from int, seq uint64) error {
		fd := memfdOrFail(t)
		defer syscall.Close(fd)
		return Send(context.Background(), paths[0], tok, Envelope{From: from, To: 0, Seq: seq}, fd)
	}
	require.NoError(t, send(1, 10))
	require.NoError(t, send(1, 11))
	err = send(1, 12)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "rank 1 already has 2 descriptors waiting")
	assert.Contains(t, lb.String(), "rank 1 already has 2 descriptors waiting")
	require.NoError(t, send(2, 12), "the cap is per sender")

	type result struct {
		got map[int]int
		err error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := srvs[0].Collect(ctx, 12, []int{1, 2})
		res <- result{got, err}
	}()
	require.Eventually(t, func() bool { return srvs[0].waitingFor(12) }, 5*time.Second, time.Millisecond)
	require.NoError(t, send(1, 12), "awaited by a Collect: not early")
	r := <-res
	require.NoError(t, r.err)
	for _, fd := range r.got {
		data, err := fdtest.ReadAll(fd)
		require.NoError(t, err)
		assert.Equal(t, "cap", string(data))
		syscall.Close(fd)
	}
	assert.False(t, srvs[0].waitingFor(12))
	fdsBackTo(t, base, "exchanges 10 and 11 are below the floor now: closed")
}

// Two connections of one sender pass their hellos while it has one early
// descriptor; the first one's descriptor fills the cap, so the second
// one's, already received, is refused and closed by the server.
func TestEarlyCapClosesReceived(t *testing.T) {
	srvs, paths, lb := newJob(t, 2, Config{MaxEarly: 2})
	tok := srvs[0].token
	require.NoError(t, Send(context.Background(), paths[0], tok, Envelope{From: 1, To: 0, Seq: 1}, -1))
	require.Eventually(t, func() bool { return srvs[0].connCount() == 0 }, 5*time.Second, time.Millisecond)
	base, err := fdtest.Take()
	require.NoError(t, err)

	a, b := dialRaw(t, paths[0]), dialRaw(t, paths[0])
	_, err = a.Write(helloBytes(tok, 1, 0, 2, true))
	require.NoError(t, err)
	require.NoError(t, readStatus(a))
	_, err = b.Write(helloBytes(tok, 1, 0, 3, true))
	require.NoError(t, err)
	require.NoError(t, readStatus(b))

	fd := memfdOrFail(t)
	_, _, err = a.WriteMsgUnix([]byte{0}, syscall.UnixRights(fd), nil)
	require.NoError(t, err)
	require.NoError(t, readStatus(a))
	syscall.Close(fd)

	probe, err := newLeakProbe()
	require.NoError(t, err)
	_, _, err = b.WriteMsgUnix([]byte{0}, syscall.UnixRights(probe.w), nil)
	require.NoError(t, err)
	err = readStatus(b)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "rank 1 already has 2 descriptors waiting")
	assert.True(t, probe.closedEverywhere(3*time.Second), "the server kept the descriptor it refused")
	assert.Contains(t, lb.String(), "already has 2 descriptors waiting")

	got, err := srvs[0].Collect(context.Background(), 2, []int{1})
	require.NoError(t, err)
	syscall.Close(got[1])
	a.Close()
	b.Close()
	fdsBackTo(t, base, "open descriptors before and after")
}
