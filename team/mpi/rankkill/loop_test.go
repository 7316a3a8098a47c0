//go:build mpi

package rankkill

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The loop of the team variants (TestGPURankKill on GPUs under mpirun,
// TestSimRankKill on the simulated node in one process): a unicast team of
// one rank per device (team.NewRank), checked all-reduces through package
// collectives until the victim is gone, then the survivor's error, the
// team's broken state, Close and cuMemGetInfo.

// killSetup is one rank's part in a team variant.
type killSetup struct {
	d    cuda.Driver
	dev  cuda.Device
	boot team.Bootstrap
	plan Plan
	// seed is rank 0's, the same on every rank: every rank computes every
	// rank's inputs from it.
	seed [32]byte
	// kernelTimeout is the kernels' barrier deadline (collectives.WithTimeout).
	kernelTimeout time.Duration
	// counts are the all-reduce sizes (uint32 elements), taken in turn.
	counts []uint64
	log    *slog.Logger
}

// killResult is what a rank saw; the test goroutine checks it
// (checkSurvivor), since the ranks may run on goroutines of their own.
type killResult struct {
	rank int
	dev  cuda.Device
	// setupErr: the bring-up failed (nothing else is set).
	setupErr error
	o        Outcome
	// later is a collective called after the failure; teamErr the team's
	// error then.
	later, teamErr error
	// closeErr: closing the Comm, the stream and the team.
	closeErr error
	// before and after are cuMemGetInfo's free bytes before the team and
	// after Close; memErr says why they could not be read.
	before, after uint64
	memErr        error
	// leftOpen closes what the victim left open (a process that dies
	// leaves nothing; a goroutine that stops leaves its team).
	leftOpen func() error
}

// values is rank r's input of iteration i, from the shared seed.
func values(seed [32]byte, r, i int, count uint64) []uint32 {
	var key [32]byte
	copy(key[:], seed[:])
	binary.LittleEndian.PutUint32(key[24:], uint32(r))
	binary.LittleEndian.PutUint32(key[28:], uint32(i))
	rng := mrand.New(mrand.NewChaCha8(key))
	out := make([]uint32, count)
	for k := range out {
		out[k] = rng.Uint32()
	}
	return out
}

// errWrong marks a wrong all-reduce result (as opposed to the timeout the
// test expects).
var errWrong = errors.New("wrong all-reduce result")

// onCtx runs fn on a locked thread with c current.
func onCtx(d cuda.Driver, c cuda.Context, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.CtxSetCurrent(c); err != nil {
		return err
	}
	err := fn()
	return errors.Join(err, d.CtxSetCurrent(0))
}

// freeMem is cuMemGetInfo's free bytes on the device of c.
func freeMem(d cuda.Driver, c cuda.Context) (free uint64, err error) {
	err = onCtx(d, c, func() (err error) {
		free, _, err = d.MemGetInfo()
		return err
	})
	return free, err
}

// killRun is one rank's run of a team variant.
func killRun(s killSetup) (res killResult) {
	d, rank := s.d, s.boot.Rank()
	res.rank, res.dev = rank, s.dev
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A reference of our own to the primary context, so that the team's
	// retain and release neither create nor destroy it between the two
	// readings of cuMemGetInfo.
	pc, err := d.PrimaryCtxRetain(s.dev)
	if err != nil {
		res.setupErr = err
		return res
	}
	release := func() error { return d.PrimaryCtxRelease(s.dev) }
	defer func() {
		if res.leftOpen == nil {
			res.closeErr = errors.Join(res.closeErr, release())
		}
	}()
	if res.before, res.memErr = freeMem(d, pc); res.memErr != nil {
		res.setupErr = res.memErr
		return res
	}
	tm, err := team.NewRank(ctx, d, s.dev, s.boot, team.WithTransport(team.Unicast), team.WithWorkspaceSize(32<<20), team.WithLogger(s.log))
	if err != nil {
		res.setupErr = err
		return res
	}
	if tm.Transport() != team.Unicast {
		res.setupErr = fmt.Errorf("transport %v, want unicast", tm.Transport())
		_ = tm.Close()
		return res
	}
	comm, err := collectives.New(tm, collectives.WithTimeout(s.kernelTimeout))
	if err != nil {
		res.setupErr = errors.Join(err, tm.Close())
		return res
	}
	maxCount := s.counts[len(s.counts)-1]
	send, err1 := tm.Alloc(4 * maxCount)
	recv, err2 := tm.Alloc(4 * maxCount)
	var stream cuda.Stream
	err3 := onCtx(d, pc, func() (err error) {
		stream, err = d.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
	closeAll := func() error {
		err := comm.Close()
		if stream != 0 {
			err = errors.Join(err, onCtx(d, pc, func() error { return d.StreamDestroy(stream) }))
		}
		return errors.Join(err, tm.Close())
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		res.setupErr = errors.Join(err, closeAll())
		return res
	}
	streams := []cuda.Stream{stream}
	// Every rank is set up before the first collective.
	if err := s.boot.Barrier(ctx); err != nil {
		res.setupErr = errors.Join(err, closeAll())
		return res
	}

	host := make([]byte, 4*maxCount)
	res.o = s.plan.Run(context.Background(), rank, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, 3*s.kernelTimeout)
		defer cancel()
		count := s.counts[i%len(s.counts)]
		b := host[:4*count]
		for k, v := range values(s.seed, rank, i, count) {
			binary.LittleEndian.PutUint32(b[4*k:], v)
		}
		// Synchronous copies: done before the all-reduce is enqueued, and,
		// after Sync, after it finished.
		if err := onCtx(d, pc, func() error { return cuda.CopyHtoD(d, send.Ptr(0), b) }); err != nil {
			return fmt.Errorf("iteration %d: upload: %w", i, err)
		}
		if err := comm.AllReduce(ctx, []cuda.DevicePtr{send.Ptr(0)}, []cuda.DevicePtr{recv.Ptr(0)}, count, collectives.U32, collectives.Sum, streams); err != nil {
			return err
		}
		if err := comm.Sync(ctx, streams); err != nil {
			return err
		}
		if err := onCtx(d, pc, func() error { return cuda.CopyDtoH(d, b, recv.Ptr(0)) }); err != nil {
			return fmt.Errorf("iteration %d: download: %w", i, err)
		}
		want := make([]uint32, count)
		for r := range s.boot.Size() {
			for k, v := range values(s.seed, r, i, count) {
				want[k] += v // wraps, as the device's u32 sums do
			}
		}
		for k := range want {
			if got := binary.LittleEndian.Uint32(b[4*k:]); got != want[k] {
				return fmt.Errorf("iteration %d (%d elements): element %d is %d, want %d: %w", i, count, k, got, want[k], errWrong)
			}
		}
		return nil
	})
	if errors.Is(res.o.Err, ErrVictim) {
		res.leftOpen = func() error { return errors.Join(closeAll(), release()) }
		return res
	}
	res.later = comm.AllReduce(ctx, []cuda.DevicePtr{send.Ptr(0)}, []cuda.DevicePtr{recv.Ptr(0)}, 1024, collectives.U32, collectives.Sum, streams)
	res.teamErr = tm.Err()
	// Close frees everything: the kernels, the stream, the workspace and
	// the mappings of every peer's (the dead one's included).
	res.closeErr = closeAll()
	// A survivor's memory is free only once every other survivor has
	// unmapped it too.
	if err := s.plan.Meet("closed", rank, s.boot.Size(), 30*time.Second); err != nil {
		res.memErr = err
		return res
	}
	res.after, res.memErr = freeMem(d, pc)
	return res
}

// checkSurvivor checks a survivor's result: every iteration before the
// kill right, none after; the kernel's barrier timed out after about the
// kernel timeout, naming this rank; the team broken with that error;
// Close clean and, once every survivor closed, cuMemGetInfo back where it
// was.
func checkSurvivor(t *testing.T, s killSetup, res killResult) {
	t.Helper()
	require.NoError(t, res.setupErr, "rank %d: setup", res.rank)
	o := res.o
	require.NoError(t, o.KillErr, "rank %d", res.rank)
	assert.NotErrorIs(t, o.Err, errWrong, "rank %d: every result before the kill is right", res.rank)
	assert.Equal(t, s.plan.After, o.Iterations, "rank %d: every iteration before the kill completes, none after", res.rank)
	// Its own barrier timed out, or (where the survivors see each other's
	// status, as ranks of one process do) it gave up at once on another
	// survivor's timeout: either names this rank and its device.
	var te *collectives.TimeoutError
	var ae *collectives.AbortError
	switch {
	case errors.As(o.Err, &te):
		assert.Equal(t, res.rank, te.Rank)
		assert.Equal(t, res.dev, te.Device)
	case errors.As(o.Err, &ae):
		assert.Equal(t, res.rank, ae.Rank)
		assert.Equal(t, res.dev, ae.Device)
		assert.NotEqual(t, res.rank, ae.FailedRank, "rank %d: the failure it found was another's", res.rank)
	default:
		t.Errorf("rank %d: the kernel's barrier timed out or gave up on a peer's timeout: %v", res.rank, o.Err)
	}
	assert.ErrorIs(t, o.Err, collectives.ErrTimeout)
	assert.ErrorIs(t, o.Err, team.ErrBroken)
	assert.GreaterOrEqual(t, o.SinceKill(), s.kernelTimeout/2, "rank %d: the device-side deadline, not something sooner", res.rank)
	assert.Less(t, o.SinceKill(), s.kernelTimeout+3*time.Second, "rank %d: within the deadline (plus Sync's polling and a loaded host)", res.rank)
	assert.ErrorIs(t, res.later, team.ErrBroken, "rank %d: later calls fail", res.rank)
	assert.ErrorIs(t, res.later, collectives.ErrTimeout, "rank %d: with the same error", res.rank)
	assert.ErrorIs(t, res.teamErr, collectives.ErrTimeout)
	assert.NoError(t, res.closeErr, "rank %d: Close", res.rank)
	require.NoError(t, res.memErr)
	assert.Equal(t, res.before, res.after, "rank %d (device %d): cuMemGetInfo free before the team %d, after Close %d", res.rank, res.dev, res.before, res.after)
}
