//go:build linux

package sock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/team"
)

// joinAll joins n ranks to id from n goroutines.
func joinAll(t *testing.T, ctx context.Context, id ID, n int) ([]*Bootstrap, []error) {
	t.Helper()
	bs, errs := make([]*Bootstrap, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { bs[r], errs[r] = Join(ctx, id, n, r) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, b := range bs {
			if b != nil {
				_ = b.Close()
			}
		}
	})
	return bs, errs
}

func TestJoinAllGatherBarrierFDs(t *testing.T) {
	id, err := NewID(0, nil)
	require.NoError(t, err)
	const n = 4
	bs, errs := joinAll(t, context.Background(), id, n)
	for _, err := range errs {
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() {
			assert.False(t, b.InProcess())
			for round := range 3 {
				all, err := b.AllGather(context.Background(), []byte(fmt.Sprintf("r%d-%d", r, round)))
				if !assert.NoError(t, err) {
					return
				}
				for q := range n {
					assert.Equal(t, fmt.Sprintf("r%d-%d", q, round), string(all[q]))
				}
				assert.NoError(t, b.Barrier(context.Background()))
			}
			// Each rank passes a file holding its rank.
			f, err := os.CreateTemp(t.TempDir(), "fd")
			if !assert.NoError(t, err) {
				return
			}
			_, _ = f.Write([]byte{byte('0' + r)})
			fds, err := b.AllGatherFDs(context.Background(), int(f.Fd()))
			_ = f.Close()
			if !assert.NoError(t, err) {
				return
			}
			for q, fd := range fds {
				if q == r {
					_ = syscall.Close(fd)
					continue
				}
				buf := make([]byte, 1)
				k, err := syscall.Pread(fd, buf, 0)
				assert.NoError(t, err)
				assert.Equal(t, 1, k)
				assert.Equal(t, byte('0'+q), buf[0], "rank %d got rank %d's file", r, q)
				_ = syscall.Close(fd)
			}
		})
	}
	wg.Wait()
}

func TestBadID(t *testing.T) {
	var id ID
	copy(id[:], "garbage from some other library")
	start := time.Now()
	_, err := Join(context.Background(), id, 2, 0)
	assert.ErrorIs(t, err, ErrBadID)
	assert.Less(t, time.Since(start), time.Second)
}

func TestStaleID(t *testing.T) {
	id, err := NewID(0, nil)
	require.NoError(t, err)
	_, errs := joinAll(t, context.Background(), id, 1) // the job starts: the rendezvous closes
	require.NoError(t, errs[0])
	start := time.Now()
	_, err = Join(context.Background(), id, 1, 0)
	assert.ErrorIs(t, err, ErrStaleID)
	assert.Less(t, time.Since(start), time.Second)
}

// TestRendezvousClosesOnJoin: a rendezvous that accepts the connection and
// closes it without an answer (it was giving up as the rank dialed) is a
// stale id, as one that no longer listens, not an I/O error.
func TestRendezvousClosesOnJoin(t *testing.T) {
	name := fmt.Sprintf("nvls-test-closes-%d", os.Getpid())
	l, err := net.Listen("unix", "@"+name)
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	id, err := makeID(make([]byte, tokenSize), os.Getpid(), name)
	require.NoError(t, err)
	start := time.Now()
	_, err = Join(context.Background(), id, 2, 1)
	require.ErrorIs(t, err, ErrStaleID)
	assert.ErrorContains(t, err, "closed the connection without answering")
	assert.Less(t, time.Since(start), time.Second)
}

func TestWrongTokenRefused(t *testing.T) {
	id, err := NewID(0, nil)
	require.NoError(t, err)
	id[offToken] ^= 0xff
	start := time.Now()
	_, err = Join(context.Background(), id, 2, 0)
	assert.ErrorIs(t, err, ErrRefused)
	assert.ErrorContains(t, err, "wrong job token")
	assert.Less(t, time.Since(start), time.Second)
}

func TestMismatchRefused(t *testing.T) {
	id, err := NewID(0, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		b, err := Join(ctx, id, 2, 0)
		if b != nil {
			b.Close()
		}
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_, err = Join(ctx, id, 3, 1)
	assert.ErrorIs(t, err, ErrRefused)
	assert.ErrorContains(t, err, "says 3 ranks")
	_, err = Join(ctx, id, 2, 0)
	assert.ErrorContains(t, err, "joined twice")
	cancel()
	assert.Error(t, <-errc)
}

// TestMissingRankNamed: a rank that never comes: the rendezvous gives up
// naming it, within its timeout; a caller's shorter deadline ends Join
// first.
func TestMissingRankNamed(t *testing.T) {
	id, err := NewID(300*time.Millisecond, nil)
	require.NoError(t, err)
	start := time.Now()
	_, err = Join(context.Background(), id, 3, 0)
	assert.ErrorIs(t, err, ErrRefused)
	assert.ErrorContains(t, err, "rank(s) [1 2] of 3 did not join")
	assert.Less(t, time.Since(start), 2*time.Second)

	id, err = NewID(time.Minute, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = Join(ctx, id, 2, 0)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, team.ErrPeerMissing)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// TestLeaverFailsOthers: a rank that closes while the others wait in a
// collective makes theirs fail at once, naming it.
func TestLeaverFailsOthers(t *testing.T) {
	id, err := NewID(0, nil)
	require.NoError(t, err)
	bs, errs := joinAll(t, context.Background(), id, 3)
	for _, err := range errs {
		require.NoError(t, err)
	}
	done := make(chan error, 1)
	go func() { _, err := bs[0].AllGather(context.Background(), []byte("x")); done <- err }()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, bs[2].Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrRefused)
		assert.ErrorContains(t, err, "rank 2 left")
	case <-time.After(5 * time.Second):
		t.Fatal("AllGather did not end when a rank left")
	}
	_, err = bs[1].AllGather(context.Background(), nil)
	assert.ErrorContains(t, err, "rank 2 left")
	_, err = bs[0].AllGather(context.Background(), nil)
	assert.Error(t, err, "a broken bootstrap stays broken")
	assert.True(t, errors.Is(bs[2].Barrier(context.Background()), team.ErrBootstrapClosed))
}

func TestIDString(t *testing.T) {
	id, err := NewID(0, nil)
	require.NoError(t, err)
	assert.Contains(t, id.String(), fmt.Sprintf("pid %d", os.Getpid()))
	assert.NotContains(t, id.String(), string(id[offToken:offPID]))
}
