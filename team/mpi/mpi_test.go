//go:build mpi

package mpi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gompi "github.com/sbromberger/gompi"

	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharedSeed all-gathers a fresh random seed from rank 0, so that every
// rank can compute what every other rank sends, independently.
func sharedSeed(t *testing.T, b *Bootstrap) [32]byte {
	t.Helper()
	var mine []byte
	if b.Rank() == 0 {
		mine = make([]byte, 32)
		_, err := rand.Read(mine)
		require.NoError(t, err)
	}
	all, err := b.AllGather(tctx(t, 30*time.Second), mine)
	require.NoError(t, err)
	require.Len(t, all[0], 32)
	return [32]byte(all[0])
}

// payload is what rank r contributes in round k: random bytes from the
// shared seed, of a length that varies with r and k (0 included).
func payload(seed [32]byte, r, k int) []byte {
	h := sha256.New()
	h.Write(seed[:])
	fmt.Fprintf(h, "/%d/%d", r, k)
	rng := mrand.NewChaCha8([32]byte(h.Sum(nil)))
	lengths := []int{0, 1, 7, 4096, 70000, 300000}
	n := lengths[(r+k)%len(lengths)] + int(rng.Uint64()%64)
	if (r+k)%len(lengths) == 0 {
		n = 0
	}
	out := make([]byte, n)
	rng.Read(out)
	return out
}

// gompi's byte send and receive (the only gompi calls the bootstrap
// moves data with) stay inside their buffers: a ring of sends of random
// sizes (eager and rendezvous), received into the middle of a buffer with
// canaries on both sides.
func TestGompiSendRecvCanaries(t *testing.T) {
	b := needWorld(t, 2)
	seed := sharedSeed(t, b)
	const tag = 32500 // outside the bootstrap's tags
	const canary = 64
	next, prev := (b.Rank()+1)%b.Size(), (b.Rank()+b.Size()-1)%b.Size()
	for k := 1; k < 5; k++ {
		mine := payload(seed, b.Rank(), k)
		want := payload(seed, prev, k)
		// gompi cannot send empty slices (the bootstrap never does): an
		// empty payload means no message on that link this round.
		done := make(chan struct{})
		go func() {
			if len(mine) > 0 {
				b.comm.SendBytes(mine, next, tag)
			}
			close(done)
		}()
		if len(want) > 0 {
			buf := make([]byte, canary+len(want)+canary)
			for i := range buf {
				buf[i] = byte(0xC3 ^ i)
			}
			st := b.comm.RecvPreallocBytes(buf[canary:canary+len(want)], prev, tag)
			assert.Equal(t, len(want), st.GetCount(gompi.Byte))
			assert.Equal(t, want, buf[canary:canary+len(want)], "round %d: data from rank %d", k, prev)
			for _, i := range append(seq(0, canary), seq(canary+len(want), len(buf))...) {
				if buf[i] != byte(0xC3^i) {
					t.Errorf("round %d: canary byte %d of a %d-byte receive overwritten", k, i, len(want))
					break
				}
			}
		}
		<-done
	}
	require.NoError(t, b.Barrier(tctx(t, 30*time.Second)))
}

func seq(a, b int) []int {
	out := make([]int, 0, b-a)
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

func TestAllGather(t *testing.T) {
	b := needWorld(t, 2)
	seed := sharedSeed(t, b)
	for k := range 8 {
		mine := payload(seed, b.Rank(), k)
		all, err := b.AllGather(tctx(t, 30*time.Second), mine)
		require.NoError(t, err, "round %d", k)
		require.Len(t, all, b.Size())
		for r := range b.Size() {
			want := payload(seed, r, k)
			require.Len(t, all[r], len(want), "round %d, rank %d's part", k, r)
			assert.True(t, slices.Equal(want, all[r]), "round %d, rank %d's part differs", k, r)
		}
		if len(mine) > 0 {
			all[b.Rank()][0] ^= 0xFF
			assert.NotEqual(t, mine[0], all[b.Rank()][0], "the result is a copy")
		}
	}
}

// No rank leaves a barrier before every rank entered it: ranks enter at
// staggered times and compare clocks (same host) afterwards.
func TestBarrier(t *testing.T) {
	b := needWorld(t, 2)
	require.NoError(t, b.Barrier(tctx(t, 30*time.Second)))
	for round := range 3 {
		time.Sleep(time.Duration((b.Rank()+round)%b.Size()) * 40 * time.Millisecond)
		enter := time.Now()
		require.NoError(t, b.Barrier(tctx(t, 30*time.Second)))
		leave := time.Now()
		msg := binary.LittleEndian.AppendUint64(nil, uint64(enter.UnixNano()))
		msg = binary.LittleEndian.AppendUint64(msg, uint64(leave.UnixNano()))
		all, err := b.AllGather(tctx(t, 30*time.Second), msg)
		require.NoError(t, err)
		var lastEnter int64
		for _, m := range all {
			lastEnter = max(lastEnter, int64(binary.LittleEndian.Uint64(m)))
		}
		for r, m := range all {
			assert.GreaterOrEqual(t, int64(binary.LittleEndian.Uint64(m[8:])), lastEnter, "round %d: rank %d left before the last rank entered", round, r)
		}
	}
}

// Each rank writes its own random content into a memfd (standing in for
// a driver FD), passes it, and reads every peer's content through the
// descriptors it received.
func TestAllGatherFDs(t *testing.T) {
	b := needWorld(t, 2)
	seed := sharedSeed(t, b)
	base, err := fdtest.OpenFDs()
	require.NoError(t, err)
	for k := range 3 {
		content := append([]byte(fmt.Sprintf("rank %d:", b.Rank())), payload(seed, b.Rank(), k+1)...)
		fd, err := fdtest.Memfd("rank"+strconv.Itoa(b.Rank()), content)
		require.NoError(t, err)
		fds, err := b.AllGatherFDs(tctx(t, 30*time.Second), fd)
		require.NoError(t, err, "round %d", k)
		require.Len(t, fds, b.Size())
		for r, got := range fds {
			require.GreaterOrEqual(t, got, 0, "rank %d's descriptor", r)
			data, err := fdtest.ReadAll(got)
			require.NoError(t, err)
			want := append([]byte(fmt.Sprintf("rank %d:", r)), payload(seed, r, k+1)...)
			assert.True(t, slices.Equal(want, data), "round %d: rank %d's file read through the received descriptor differs", k, r)
			require.NoError(t, syscall.Close(got))
		}
		assert.True(t, fdtest.IsOpen(fd), "own fd not consumed")
		require.NoError(t, syscall.Close(fd))
	}
	// fd = -1 from odd ranks.
	fd, err := fdtest.Memfd("even", []byte{byte(b.Rank())})
	require.NoError(t, err)
	mine := fd
	if b.Rank()%2 == 1 {
		mine = -1
	}
	fds, err := b.AllGatherFDs(tctx(t, 30*time.Second), mine)
	require.NoError(t, err)
	for r, got := range fds {
		if r%2 == 1 {
			assert.Equal(t, -1, got, "rank %d passed none", r)
			continue
		}
		data, err := fdtest.ReadAll(got)
		require.NoError(t, err)
		assert.Equal(t, []byte{byte(r)}, data)
		syscall.Close(got)
	}
	syscall.Close(fd)
	// MPI opens and closes descriptors of its own meanwhile: no more open
	// than before is what counts.
	assert.Eventually(t, func() bool {
		n, err := fdtest.OpenFDs()
		return err == nil && n <= base
	}, 5*time.Second, 10*time.Millisecond, "descriptors leaked")
	require.NoError(t, b.Barrier(tctx(t, 30*time.Second)))
}

// A process without the token (a child process that makes one up) is
// refused by every rank's server, and the refusal is logged.
func TestRefusedWithoutToken(t *testing.T) {
	b := needWorld(t, 2)
	exe, err := os.Executable()
	require.NoError(t, err)
	out, pid, _ := runChild(t, exe, b.SocketPath(), b.Rank(), nil, nil)
	assert.Contains(t, out, "RESULT refused:")
	assert.Contains(t, out, "wrong job token")
	require.Eventually(t, func() bool {
		return containsAll(worldLog.String(), "refused connection", "wrong job token", fmt.Sprintf("peer_pid=%d", pid))
	}, 5*time.Second, 10*time.Millisecond, "log: %s", worldLog.String())
	// And the bootstrap works on.
	require.NoError(t, b.Barrier(tctx(t, 30*time.Second)))
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// A process of another uid, even one holding the token, is refused by
// SO_PEERCRED (the test opens the private directory to let it reach the
// socket at all; without that it cannot even connect).
func TestRefusedOtherUID(t *testing.T) {
	needWorld(t, 2)
	if os.Getuid() != 0 {
		t.Skip("needs root to start a process as uid 65534; not root here")
	}
	parent, err := os.MkdirTemp("", "nvls-mpi-uid-")
	require.NoError(t, err)
	defer os.RemoveAll(parent)
	require.NoError(t, os.Chmod(parent, 0o755))
	lb := &fdtest.LogBuf{}
	b, err := New(tctx(t, 30*time.Second), WithSocketDir(parent), WithLogger(newLogger(lb)))
	require.NoError(t, err)
	defer b.Close()
	exe := fdtest.CopyExecutable(t)
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}

	out, _, skipped := runChild(t, exe, b.SocketPath(), b.Rank(), b.srvToken(), cred)
	if skipped {
		b.Barrier(tctx(t, 30*time.Second))
		t.Skipf("cannot start a process as uid 65534 here: %s", out)
	}
	assert.Contains(t, out, "RESULT denied:", "the private directory keeps other uids out")

	require.NoError(t, os.Chmod(filepath.Dir(b.SocketPath()), 0o755))
	require.NoError(t, os.Chmod(b.SocketPath(), 0o777))
	out, pid, _ := runChild(t, exe, b.SocketPath(), b.Rank(), b.srvToken(), cred)
	assert.Contains(t, out, "RESULT refused:")
	require.Eventually(t, func() bool {
		return containsAll(lb.String(), "refused connection", "peer uid 65534 is not this job's uid 0", "peer_uid=65534", fmt.Sprintf("peer_pid=%d", pid))
	}, 5*time.Second, 10*time.Millisecond, "log: %s", lb.String())
	require.NoError(t, b.Barrier(tctx(t, 30*time.Second)))
	dir := filepath.Dir(b.SocketPath())
	require.NoError(t, b.Close())
	_, err = os.Lstat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "Close removes the socket directory")
}

// A rank that does not arrive is named, on every rank, before anyone's
// deadline has long passed; the bootstrap is broken afterwards.
func TestMissingRankNamed(t *testing.T) {
	w := needWorld(t, 2)
	b, err := New(tctx(t, 30*time.Second), WithLogger(newLogger(&fdtest.LogBuf{})))
	require.NoError(t, err)
	defer b.Close()
	late := b.Size() - 1
	start := time.Now()
	if b.Rank() == late {
		time.Sleep(1700 * time.Millisecond)
	}
	wait := 1500 * time.Millisecond
	if b.Rank() == late {
		wait = 300 * time.Millisecond
	}
	_, err = b.AllGather(tctx(t, wait), []byte{1})
	el := time.Since(start)
	var me *team.MissingRanksError
	require.ErrorAs(t, err, &me)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, b.Rank(), me.Rank)
	assert.Equal(t, "AllGather", me.Op)
	assert.True(t, strings.HasSuffix(err.Error(), "context deadline exceeded (the caller's context deadline)"), err.Error())
	if b.Rank() == late {
		assert.Equal(t, []int{0}, me.Missing, "the late rank finds rank 0 gone")
	} else {
		assert.Equal(t, []int{late}, me.Missing)
		assert.Less(t, el, 3*time.Second)
	}
	_, err = b.AllGather(tctx(t, time.Second), nil)
	assert.ErrorIs(t, err, ErrBroken)
	assert.ErrorIs(t, b.Barrier(tctx(t, time.Second)), ErrBroken)
	require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
}

// A collective whose context has no deadline ends at the timeout, and the
// error names it and where it came from (issue 24): NVLS_SETUP_TIMEOUT on
// the ranks that wait, WithTimeout on the late one.
func TestMissingRankNamedSetupDeadline(t *testing.T) {
	w := needWorld(t, 2)
	late := w.Size() - 1
	opts := []Option{WithLogger(newLogger(&fdtest.LogBuf{}))}
	named := "(setup deadline NVLS_SETUP_TIMEOUT=1.5 (1.5s))"
	if w.Rank() == late {
		opts = append(opts, WithTimeout(300*time.Millisecond))
		named = "(setup deadline WithTimeout(300ms))"
	}
	t.Setenv(EnvSetupTimeout, "1.5")
	b, err := New(tctx(t, 30*time.Second), opts...)
	require.NoError(t, err)
	defer b.Close()
	if b.Rank() == late {
		time.Sleep(1700 * time.Millisecond)
	}
	_, err = b.AllGather(context.Background(), []byte{1})
	var me *team.MissingRanksError
	require.ErrorAs(t, err, &me)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, strings.HasSuffix(err.Error(), "context deadline exceeded "+named), err.Error())
	_, err = b.AllGather(tctx(t, time.Second), nil)
	assert.ErrorIs(t, err, ErrBroken)
	assert.Contains(t, err.Error(), named, "the broken bootstrap's error names it too")
	require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
}

// A rank that comes to New late is named by every rank that waited; the
// hello it leaves behind does not disturb the next New.
func TestNewMissingRankNamed(t *testing.T) {
	w := needWorld(t, 2)
	late := w.Size() - 1
	require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
	start := time.Now()
	wait := 1500 * time.Millisecond
	if w.Rank() == late {
		time.Sleep(1700 * time.Millisecond)
		wait = 300 * time.Millisecond
	}
	b, err := New(tctx(t, wait), WithLogger(newLogger(&fdtest.LogBuf{})))
	el := time.Since(start)
	require.Error(t, err)
	assert.Nil(t, b)
	var me *team.MissingRanksError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "New", me.Op)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	if w.Rank() == late {
		assert.Equal(t, []int{0}, me.Missing, "the late rank finds rank 0 gone")
	} else {
		assert.Equal(t, []int{late}, me.Missing, "every waiting rank names the late one")
		assert.Less(t, el, 3*time.Second)
	}
	require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
	b, err = New(tctx(t, 30*time.Second), WithLogger(newLogger(&fdtest.LogBuf{})))
	require.NoError(t, err, "the next New works")
	require.NoError(t, b.Barrier(tctx(t, 30*time.Second)))
	require.NoError(t, b.Close())
	require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
}

// Barrier and AllGatherFDs name a rank that does not arrive, as
// AllGather does.
func TestMissingRankNamedBarrierAndFDs(t *testing.T) {
	w := needWorld(t, 2)
	late := w.Size() - 1
	for _, op := range []string{"Barrier", "AllGatherFDs"} {
		b, err := New(tctx(t, 30*time.Second), WithLogger(newLogger(&fdtest.LogBuf{})))
		require.NoError(t, err)
		fd, err := fdtest.Memfd("missing", []byte(op))
		require.NoError(t, err)
		call := func(ctx context.Context) error {
			if op == "Barrier" {
				return b.Barrier(ctx)
			}
			fds, err := b.AllGatherFDs(ctx, fd)
			for _, f := range fds {
				syscall.Close(f)
			}
			return err
		}
		start := time.Now()
		var cerr error
		if b.Rank() == late {
			time.Sleep(1700 * time.Millisecond)
			cerr = call(tctx(t, 300*time.Millisecond))
		} else {
			cerr = call(tctx(t, 1500*time.Millisecond))
		}
		el := time.Since(start)
		var me *team.MissingRanksError
		require.ErrorAs(t, cerr, &me, op)
		assert.Equal(t, op, me.Op)
		if b.Rank() != late {
			assert.Contains(t, me.Missing, late, "%s: the late rank is named", op)
			assert.Less(t, el, 3*time.Second)
		} else {
			assert.NotEmpty(t, me.Missing)
		}
		assert.ErrorIs(t, call(tctx(t, time.Second)), ErrBroken, op)
		syscall.Close(fd)
		require.NoError(t, b.Close())
		require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
	}
}

// Ranks that call different collectives all fail, saying which.
func TestCollectiveMismatch(t *testing.T) {
	w := needWorld(t, 2)
	b, err := New(tctx(t, 30*time.Second), WithLogger(newLogger(&fdtest.LogBuf{})))
	require.NoError(t, err)
	defer b.Close()
	if b.Rank() == 1 {
		err = b.Barrier(tctx(t, 10*time.Second))
	} else {
		_, err = b.AllGather(tctx(t, 10*time.Second), []byte("x"))
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 1 called Barrier where rank 0 called AllGather")
	require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
}

func TestLocalRank(t *testing.T) {
	b := needWorld(t, 2)
	all, err := b.AllGather(tctx(t, 30*time.Second), []byte(strconv.Itoa(b.LocalRank())))
	require.NoError(t, err)
	if b.Hosts() == 1 {
		assert.Equal(t, b.Size(), b.LocalSize())
		for r, m := range all {
			assert.Equal(t, strconv.Itoa(r), string(m), "one host: local rank = rank")
		}
	}
	if v, ok := os.LookupEnv("OMPI_COMM_WORLD_LOCAL_RANK"); ok {
		assert.Equal(t, v, strconv.Itoa(b.LocalRank()))
		assert.Equal(t, "OMPI_COMM_WORLD_LOCAL_RANK", b.LocalRankSource())
	}
	// The host-name computation agrees with the launcher.
	saved := [3]int{b.localRank, b.localSize, b.hosts}
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "")
	os.Unsetenv("OMPI_COMM_WORLD_LOCAL_RANK")
	b.localRank, b.localSize = 0, 0
	b.localRanks()
	assert.Equal(t, saved, [3]int{b.localRank, b.localSize, b.hosts})
	assert.Equal(t, "host names", b.LocalRankSource())
}

func TestClosedBootstrap(t *testing.T) {
	w := needWorld(t, 2)
	b, err := New(tctx(t, 30*time.Second), WithLogger(newLogger(&fdtest.LogBuf{})))
	require.NoError(t, err)
	dir := filepath.Dir(b.SocketPath())
	_, err = os.Lstat(b.SocketPath())
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	_, err = os.Lstat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = b.AllGather(context.Background(), nil)
	assert.ErrorIs(t, err, team.ErrBootstrapClosed)
	_, err = b.AllGatherFDs(context.Background(), -1)
	assert.ErrorIs(t, err, team.ErrBootstrapClosed)
	require.NoError(t, w.Barrier(tctx(t, 30*time.Second)))
}

// New gives every rank the same token and different sockets.
func TestSetup(t *testing.T) {
	b := needWorld(t, 2)
	all, err := b.AllGather(tctx(t, 30*time.Second), b.srvToken())
	require.NoError(t, err)
	for r := range all {
		assert.Equal(t, all[0], all[r], "rank %d's token", r)
	}
	paths := b.SocketPaths()
	assert.Equal(t, b.SocketPath(), paths[b.Rank()])
	for r := range paths {
		for q := range r {
			assert.NotEqual(t, paths[q], paths[r])
		}
	}
	fi, err := os.Lstat(filepath.Dir(b.SocketPath()))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	assert.False(t, b.InProcess())
	assert.True(t, errors.Is(Init(), nil), "Init again is a no-op")
}
