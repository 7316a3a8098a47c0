package team

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runRanks runs f on one goroutine per rank and returns their errors.
func runRanks(boots []Bootstrap, f func(b Bootstrap) error) []error {
	errs := make([]error, len(boots))
	var wg sync.WaitGroup
	for i, b := range boots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(b)
		}()
	}
	wg.Wait()
	return errs
}

func TestInProcessAllGather(t *testing.T) {
	const n = 5
	boots := NewInProcess(n)
	require.Len(t, boots, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const rounds = 20
	// data[round][rank]: random, of different lengths (rank 3 sends none).
	data := make([][][]byte, rounds)
	for k := range data {
		data[k] = make([][]byte, n)
		for r := range data[k] {
			if r == 3 {
				continue
			}
			data[k][r] = make([]byte, 1+k+r*7)
			_, _ = rand.Read(data[k][r])
		}
	}
	got := make([][][][]byte, n) // [rank][round][from]
	errs := runRanks(boots, func(b Bootstrap) error {
		assert.Equal(t, n, b.Size())
		assert.True(t, b.InProcess())
		for k := 0; k < rounds; k++ {
			mine := append([]byte(nil), data[k][b.Rank()]...)
			all, err := b.AllGather(ctx, mine)
			if err != nil {
				return err
			}
			// The caller may reuse its buffer at once.
			for i := range mine {
				mine[i] ^= 0xff
			}
			got[b.Rank()] = append(got[b.Rank()], all)
			if k%3 == 0 {
				if err := b.Barrier(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for r := 0; r < n; r++ {
		for k := 0; k < rounds; k++ {
			require.Len(t, got[r][k], n)
			for from := 0; from < n; from++ {
				assert.Equal(t, len(data[k][from]), len(got[r][k][from]))
				if len(data[k][from]) > 0 {
					assert.Equal(t, data[k][from], got[r][k][from], "rank %d round %d from %d", r, k, from)
				}
			}
		}
	}
	for _, b := range boots {
		require.NoError(t, b.Close())
	}
}

func TestInProcessDeadlineNamesMissingRanks(t *testing.T) {
	const n = 4
	boots := NewInProcess(n)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	// Ranks 1 and 3 never come to the barrier.
	errs := runRanks([]Bootstrap{boots[0], boots[2]}, func(b Bootstrap) error { return b.Barrier(ctx) })
	assert.Less(t, time.Since(start), 5*time.Second)
	for _, err := range errs {
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var mr *MissingRanksError
		require.ErrorAs(t, err, &mr)
		assert.Equal(t, []int{1, 3}, mr.Missing)
		assert.Equal(t, "Barrier", mr.Op)
		assert.Contains(t, err.Error(), "[1 3] did not arrive")
	}
	// The group is broken: a latecomer fails at once, with the same error.
	err := boots[1].Barrier(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestInProcessMismatchedCollectives(t *testing.T) {
	boots := NewInProcess(2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := runRanks(boots, func(b Bootstrap) error {
		if b.Rank() == 0 {
			return b.Barrier(ctx)
		}
		time.Sleep(20 * time.Millisecond) // let rank 0 open the round
		_, err := b.AllGather(ctx, []byte("x"))
		return err
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.Contains(t, err.Error(), "rank 1 called AllGather where rank(s) [0] called Barrier")
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
	}
}

func TestInProcessCloseReleasesWaiters(t *testing.T) {
	boots := NewInProcess(3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 2)
	for _, b := range boots[:2] {
		go func() { _, err := b.AllGather(ctx, []byte{1}); done <- err }()
	}
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, boots[2].Close())
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			assert.ErrorIs(t, err, ErrBootstrapClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not released by Close")
		}
	}
	_, err := boots[2].AllGather(ctx, nil)
	assert.ErrorIs(t, err, ErrBootstrapClosed)
	require.NoError(t, boots[2].Close(), "second Close")
}

// openFDs counts the process's open FDs: in /proc/self/fd (Linux) or
// /dev/fd (macOS); it skips the test where neither is.
func openFDs(t *testing.T) int {
	t.Helper()
	var err error
	for _, dir := range []string{"/proc/self/fd", "/dev/fd"} {
		var ents []os.DirEntry
		if ents, err = os.ReadDir(dir); err == nil {
			return len(ents)
		}
	}
	t.Skipf("cannot count open FDs: %v", err)
	return 0
}

func TestInProcessAllGatherFDs(t *testing.T) {
	const n = 4
	before := openFDs(t)
	boots := NewInProcess(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := t.TempDir()
	contents := make([][]byte, n)
	files := make([]*os.File, n)
	for r := 0; r < n; r++ {
		if r == 2 {
			continue // rank 2 passes none
		}
		contents[r] = make([]byte, 64)
		_, _ = rand.Read(contents[r])
		f, err := os.Create(fmt.Sprintf("%s/r%d", dir, r))
		require.NoError(t, err)
		_, err = f.Write(contents[r])
		require.NoError(t, err)
		files[r] = f
	}
	got := make([][]int, n)
	errs := runRanks(boots, func(b Bootstrap) error {
		fd := -1
		if f := files[b.Rank()]; f != nil {
			fd = int(f.Fd())
		}
		fds, err := b.AllGatherFDs(ctx, fd)
		got[b.Rank()] = fds
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	// The senders close their own FDs: the receivers' copies live on.
	for _, f := range files {
		if f != nil {
			require.NoError(t, f.Close())
		}
	}
	seen := map[int]bool{}
	for r := 0; r < n; r++ {
		require.Len(t, got[r], n)
		for from, fd := range got[r] {
			if from == 2 {
				assert.Equal(t, -1, fd)
				continue
			}
			require.GreaterOrEqual(t, fd, 0)
			assert.False(t, seen[fd], "FD %d handed to two receivers", fd)
			seen[fd] = true
			buf := make([]byte, 64)
			cp := os.NewFile(uintptr(fd), "copy")
			k, err := cp.ReadAt(buf, 0)
			require.NoError(t, err)
			require.Equal(t, 64, k)
			assert.Equal(t, contents[from], buf, "rank %d's copy of rank %d's file", r, from)
			require.NoError(t, cp.Close())
		}
	}
	for _, b := range boots {
		require.NoError(t, b.Close())
	}
	assert.Equal(t, before, openFDs(t), "FDs leaked")
}

func TestInProcessCancelledContext(t *testing.T) {
	boots := NewInProcess(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := boots[0].AllGather(ctx, nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.Canceled))
	assert.Nil(t, NewInProcess(0))
}
