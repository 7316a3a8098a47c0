//go:build mpi

package rankkill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mismatched arguments across processes (issue 24): every collective, each
// argument it has, one rank (the last) calling it otherwise. Under mpirun
// on GPUs (TestGPUArgMismatchMPI) and on the simulated node with the ranks
// goroutines of one process (TestSimArgMismatch), each case on a team of
// its own, since a mismatch fails the team.

// mismatchTimeout is the kernels' barrier deadline: a mismatch must be
// found in far less, so that it is told from a timeout by the time it took.
const mismatchTimeout = 20 * time.Second

// argCall is one rank's call on buffers a and b (mismatchBytes each).
type argCall func(ctx context.Context, c *collectives.Comm, a, b cuda.DevicePtr, s []cuda.Stream) error

const mismatchBytes = 4 << 20

// argCase is a collective that rank odd calls otherwise than the others;
// arg is the argument a *collectives.MismatchError must name where the
// rank saw every rank's arguments (ll: an LL kernel on some rank, which
// sees only its own line checks: any rank may lack the names).
type argCase struct {
	name, arg string
	ll        bool
	call      func(odd bool) argCall
}

func ptrs(p cuda.DevicePtr) []cuda.DevicePtr { return []cuda.DevicePtr{p} }

// argCases are the cases: each collective and each of its arguments, with
// per-rank counts above the LL limit unless the case is about LL (the
// largest side, an all-gather's recv, is 8 x 200 KB at 8 ranks).
func argCases() []argCase {
	const big, small = 50000, 40000 // f32 elements: above DefaultLLMax
	// The reduce's and the broadcast's: above DefaultLLTwoMax and
	// DefaultLLTwoBcastMax too (their two LL steps, like any LL kernel,
	// see only their own lines' checks).
	const reduceCount = 100000
	const bcastBig, bcastSmall = 400000, 300000
	allReduce := func(count uint64, dt collectives.DType, op collectives.Op) argCall {
		return func(ctx context.Context, c *collectives.Comm, a, _ cuda.DevicePtr, s []cuda.Stream) error {
			return c.AllReduce(ctx, ptrs(a), ptrs(a), count, dt, op, s)
		}
	}
	pick := func(odd bool, x, y argCall) argCall {
		if odd {
			return y
		}
		return x
	}
	broadcast := func(count uint64, root int) argCall {
		return func(ctx context.Context, c *collectives.Comm, a, _ cuda.DevicePtr, s []cuda.Stream) error {
			return c.Broadcast(ctx, ptrs(a), ptrs(a), count, collectives.U32, root, s)
		}
	}
	reduceOf := func(count uint64, op collectives.Op, root int) argCall {
		return func(ctx context.Context, c *collectives.Comm, a, b cuda.DevicePtr, s []cuda.Stream) error {
			return c.Reduce(ctx, ptrs(a), ptrs(b), count, collectives.S32, op, root, s)
		}
	}
	reduce := func(op collectives.Op, root int) argCall { return reduceOf(reduceCount, op, root) }
	reduceScatter := func(count uint64, dt collectives.DType) argCall {
		return func(ctx context.Context, c *collectives.Comm, a, b cuda.DevicePtr, s []cuda.Stream) error {
			return c.ReduceScatter(ctx, ptrs(a), ptrs(b), count, dt, collectives.Sum, s)
		}
	}
	allGather := func(count uint64, dt collectives.DType) argCall {
		return func(ctx context.Context, c *collectives.Comm, a, b cuda.DevicePtr, s []cuda.Stream) error {
			return c.AllGather(ctx, ptrs(a), ptrs(b), count, dt, s)
		}
	}
	barrier := func(ctx context.Context, c *collectives.Comm, _, _ cuda.DevicePtr, s []cuda.Stream) error {
		return c.Barrier(ctx, s)
	}
	return []argCase{
		{"all-reduce/count", "count", false, func(o bool) argCall {
			return pick(o, allReduce(big, collectives.F32, collectives.Sum), allReduce(small, collectives.F32, collectives.Sum))
		}},
		{"all-reduce/dtype", "dtype", false, func(o bool) argCall {
			return pick(o, allReduce(big, collectives.F32, collectives.Sum), allReduce(big, collectives.S32, collectives.Sum))
		}},
		{"all-reduce/op", "op", false, func(o bool) argCall {
			return pick(o, allReduce(big, collectives.S32, collectives.Sum), allReduce(big, collectives.S32, collectives.Max))
		}},
		{"all-reduce/ll-dtype", "dtype", true, func(o bool) argCall {
			return pick(o, allReduce(64, collectives.F32, collectives.Sum), allReduce(64, collectives.U32, collectives.Sum))
		}},
		{"all-reduce/ll-against-one-shot", "count", true, func(o bool) argCall {
			return pick(o, allReduce(big, collectives.F32, collectives.Sum), allReduce(1000, collectives.F32, collectives.Sum))
		}},
		{"broadcast/count", "count", false, func(o bool) argCall { return pick(o, broadcast(bcastBig, 0), broadcast(bcastSmall, 0)) }},
		{"broadcast/root", "root", false, func(o bool) argCall { return pick(o, broadcast(bcastBig, 0), broadcast(bcastBig, 1)) }},
		{"broadcast/ll-root", "root", true, func(o bool) argCall { return pick(o, broadcast(1000, 0), broadcast(1000, 1)) }},
		{"broadcast/ll-two-root", "root", true, func(o bool) argCall { // two LL steps from 3 ranks
			return pick(o, broadcast(big, 0), broadcast(big, 1))
		}},
		{"reduce/op", "op", false, func(o bool) argCall {
			return pick(o, reduce(collectives.Sum, 0), reduce(collectives.Min, 0))
		}},
		{"reduce/root", "root", false, func(o bool) argCall {
			return pick(o, reduce(collectives.Sum, 0), reduce(collectives.Sum, 1))
		}},
		{"reduce/ll-two-root", "root", true, func(o bool) argCall { // two LL steps from 3 ranks
			return pick(o, reduceOf(big, collectives.Sum, 0), reduceOf(big, collectives.Sum, 1))
		}},
		{"reduce-scatter/count", "count", false, func(o bool) argCall {
			return pick(o, reduceScatter(big, collectives.F32), reduceScatter(small, collectives.F32))
		}},
		{"reduce-scatter/dtype", "dtype", false, func(o bool) argCall {
			return pick(o, reduceScatter(big, collectives.F32), reduceScatter(big, collectives.U32))
		}},
		{"all-gather/count", "count", false, func(o bool) argCall {
			return pick(o, allGather(big, collectives.F32), allGather(small, collectives.F32))
		}},
		{"all-gather/dtype", "dtype", false, func(o bool) argCall {
			return pick(o, allGather(big, collectives.F32), allGather(big, collectives.U32))
		}},
		{"collective/all-gather-against-all-reduce", "collective", false, func(o bool) argCall {
			return pick(o, allReduce(big, collectives.F32, collectives.Sum), allGather(big, collectives.F32))
		}},
		{"collective/barrier-against-broadcast", "collective", false, func(o bool) argCall {
			return pick(o, broadcast(bcastBig, 0), barrier)
		}},
	}
}

// argOutcome is one rank's result of one case.
type argOutcome struct {
	err  error
	took time.Duration
}

// runArgCase brings up a unicast team on dev over boot, makes the call,
// waits for it and closes everything; the error is the call's (or its
// Sync's), Close's repeats of it dropped.
func runArgCase(d cuda.Driver, dev cuda.Device, boot team.Bootstrap, log *slog.Logger, call argCall) (out argOutcome) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*mismatchTimeout)
	defer cancel()
	ws, err := collectives.WorkspaceBytes(boot.Size(), collectives.WithTimeout(mismatchTimeout))
	if err != nil {
		return argOutcome{err: fmt.Errorf("bring-up: %w", err)}
	}
	tm, err := team.NewRank(ctx, d, dev, boot, team.WithTransport(team.Unicast), team.WithWorkspaceSize(2*mismatchBytes+ws), team.WithLogger(log))
	if err != nil {
		return argOutcome{err: fmt.Errorf("bring-up: %w", err)}
	}
	c, err := collectives.New(tm, collectives.WithTimeout(mismatchTimeout))
	if err != nil {
		return argOutcome{err: errors.Join(fmt.Errorf("bring-up: %w", err), tm.Close())}
	}
	ss, err := collectives.NewStreams(tm)
	if err != nil {
		return argOutcome{err: errors.Join(fmt.Errorf("bring-up: %w", err), c.Close(), tm.Close())}
	}
	a, err1 := tm.Alloc(mismatchBytes)
	b, err2 := tm.Alloc(mismatchBytes)
	if err := errors.Join(err1, err2); err != nil {
		return argOutcome{err: errors.Join(fmt.Errorf("bring-up: %w", err), ss.Close(), c.Close(), tm.Close())}
	}
	streams := []cuda.Stream{ss.Stream(0)}
	start := time.Now()
	err = call(ctx, c, a.Ptr(0), b.Ptr(0), streams)
	if err == nil {
		err = c.Sync(ctx, streams)
	}
	out = argOutcome{err: err, took: time.Since(start)}
	var closeErrs []error
	for _, e := range []error{ss.Close(), c.Close(), tm.Close()} {
		if e != nil && !errors.Is(e, collectives.ErrArgMismatch) && !errors.Is(e, team.ErrBroken) {
			closeErrs = append(closeErrs, e)
		}
	}
	if cerr := errors.Join(closeErrs...); cerr != nil {
		out.err = errors.Join(out.err, fmt.Errorf("close: %w", cerr))
	}
	return out
}

// checkArgOutcome: the rank's call failed with ErrArgMismatch, not a
// timeout, in far less than the deadline, and a *MismatchError names the
// argument. It reports whether the rank's error named it.
func checkArgOutcome(t *testing.T, tc argCase, rank int, o argOutcome) (named bool) {
	t.Helper()
	assert.Less(t, o.took, mismatchTimeout/2, "rank %d: as long as a timeout", rank)
	if !assert.ErrorIs(t, o.err, collectives.ErrArgMismatch, "rank %d", rank) {
		return false
	}
	assert.NotErrorIs(t, o.err, collectives.ErrTimeout, "rank %d", rank)
	assert.NotContains(t, o.err.Error(), "close:", "rank %d: Close failed", rank)
	var me *collectives.MismatchError
	if errors.As(o.err, &me) {
		assert.Equal(t, rank, me.Rank)
		assert.True(t, strings.HasPrefix(me.Differs, tc.arg+":"), "rank %d: %q names %s", rank, me.Differs, tc.arg)
		return true
	}
	assert.True(t, tc.ll, "rank %d: want a *MismatchError, got %v", rank, o.err)
	return false
}

// TestSimArgMismatch: the cases on the simulated node, 4 ranks in one
// process with a team each (as under mpirun).
func TestSimArgMismatch(t *testing.T) {
	const ranks = 4
	node := simnode.New(sim.Config{Devices: ranks})
	defer func() { assert.NoError(t, node.Close()) }()
	require.NoError(t, node.Init())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range argCases() {
		t.Run(tc.name, func(t *testing.T) {
			boots := team.NewInProcess(ranks)
			defer func() {
				for _, b := range boots {
					assert.NoError(t, b.Close())
				}
			}()
			outs := make([]argOutcome, ranks)
			var wg sync.WaitGroup
			for r := range ranks {
				wg.Go(func() { outs[r] = runArgCase(node, cuda.Device(r), boots[r], log, tc.call(r == ranks-1)) })
			}
			wg.Wait()
			named := 0
			for r, o := range outs {
				if checkArgOutcome(t, tc, r, o) {
					named++
				}
			}
			assert.NotZero(t, named, "no rank named the argument")
		})
	}
	assert.NoError(t, node.CheckNoLeaks())
}
