package collectives

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team"
)

// mismatchTimeout is the kernels' barrier deadline in these tests: far
// longer than a mismatch may take to be found, so that a found mismatch
// is told from a timeout by the time it took.
const mismatchTimeout = 20 * time.Second

// rankCall is one rank's collective: a and b are team buffers of
// mismatchBuf bytes, filled with random data.
type rankCall func(ctx context.Context, c *Comm, a, b cuda.DevicePtr, s []cuda.Stream) error

const mismatchBuf = 1 << 20

// runRanks runs call(r) on every rank of a per-rank team (team.NewRank, as
// under MPI), then Sync, and returns each rank's error and how long the
// slowest rank took.
func runRanks(t *testing.T, tr team.Transport, ranks int, call func(r int) rankCall) ([]error, time.Duration) {
	t.Helper()
	node, boots := newPerRankNode(t, ranks, ranks)
	devs := make([]cuda.Device, ranks)
	for r := range devs {
		devs[r] = cuda.Device(r)
	}
	return runRanksOn(t, node, devs, boots, tr, call)
}

// runRanksOn is runRanks on driver d's devices devs (one rank each), with
// bootstraps boots; the buffers hold random data on the simulated node.
func runRanksOn(t *testing.T, d cuda.Driver, devs []cuda.Device, boots []team.Bootstrap, tr team.Transport, call func(r int) rankCall) ([]error, time.Duration) {
	t.Helper()
	rng := newRNG(t)
	errs := make([]error, len(devs))
	start := time.Now()
	var wg sync.WaitGroup
	for r := range devs {
		data := input(rng, U32, mismatchBuf/4)
		wg.Go(func() {
			errs[r] = runMismatchRank(d, boots[r], devs[r], tr, data, call(r))
		})
	}
	wg.Wait()
	return errs, time.Since(start)
}

func runMismatchRank(d cuda.Driver, boot team.Bootstrap, dev cuda.Device, tr team.Transport, data []byte, call rankCall) (err error) {
	ctx := context.Background()
	tm, err := team.NewRank(ctx, d, dev, boot, team.WithTransport(tr), team.WithWorkspaceSize(8<<20), team.WithLogger(quietLogger()))
	if err != nil {
		return err
	}
	defer func() {
		if cerr := tm.Close(); err == nil {
			err = cerr
		}
	}()
	// The root case's broadcast (2 x big) is above the two-step LL limit.
	c, err := New(tm, WithTimeout(mismatchTimeout), WithStageBytes(64<<10), WithLLTwoBcastMax(256<<10))
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.Close(); err == nil || errors.Is(cerr, ErrArgMismatch) {
			err = errors.Join(err, filterMismatch(cerr))
		}
	}()
	var bufs [2]team.Buffer
	for i := range bufs {
		if bufs[i], err = tm.Alloc(mismatchBuf); err != nil {
			return err
		}
		if node, ok := d.(*sim.Node); ok {
			if err := node.WriteDevice(bufs[i].Ptr(0), data); err != nil {
				return err
			}
		}
	}
	var s cuda.Stream
	if err := tm.Run(team.JobFunc(func(int) error { s, err = d.StreamCreate(cuda.StreamNonBlocking); return err })); err != nil {
		return err
	}
	defer func() {
		if derr := tm.Run(team.JobFunc(func(int) error { return d.StreamDestroy(s) })); err == nil {
			err = derr
		}
	}()
	streams := []cuda.Stream{s}
	if err := call(ctx, c, bufs[0].Ptr(0), bufs[1].Ptr(0), streams); err != nil {
		return err
	}
	return c.Sync(ctx, streams)
}

// filterMismatch drops what Close repeats of the collective's failure.
func filterMismatch(err error) error {
	if errors.Is(err, ErrArgMismatch) {
		return nil
	}
	return err
}

// allReduceOf is an all-reduce of count elements of dt with op, in place.
func allReduceOf(count uint64, dt DType, op Op) rankCall {
	return func(ctx context.Context, c *Comm, a, _ cuda.DevicePtr, s []cuda.Stream) error {
		return c.AllReduce(ctx, []cuda.DevicePtr{a}, []cuda.DevicePtr{a}, count, dt, op, s)
	}
}

// TestArgMismatch: a rank that calls a collective with other arguments
// than its peers (count, element type, operator, root, or another
// collective) makes every rank's call fail with ErrArgMismatch, found on
// the device in far less than the barrier deadline; where a rank's kernel
// saw every rank's arguments (a start barrier), its *MismatchError names
// the argument and the ranks that hold each value; and the teams close
// without a leak (newPerRankNode's cleanup).
func TestArgMismatch(t *testing.T) {
	for _, tr := range transports() {
		for _, tc := range mismatchCases() {
			t.Run(tr.String()+"/"+tc.name, func(t *testing.T) {
				errs, took := runRanks(t, tr, 4, tc.call)
				checkMismatch(t, tc, errs, took)
			})
		}
	}
}

// mismatchCase is a collective that rank 3 (or 0, 1, 2) of 4 calls with
// other arguments.
type mismatchCase struct {
	name string
	call func(r int) rankCall
	// want is what a *MismatchError that saw every rank says; fullAll:
	// every rank must see every word (no LL kernel on any rank).
	want    string
	fullAll bool
}

func mismatchCases() []mismatchCase {
	const ranks = 4
	const odd = ranks - 1
	big, small := uint64(50000), uint64(40000) // f32: above DefaultLLMax
	return []mismatchCase{
		{"count", func(r int) rankCall {
			if r == odd {
				return allReduceOf(small, F32, Sum)
			}
			return allReduceOf(big, F32, Sum)
		}, fmt.Sprintf("count: ranks 0, 1, 2 have %d, rank 3 has %d", big, small), true},
		{"dtype", func(r int) rankCall {
			if r == odd {
				return allReduceOf(big, S32, Sum)
			}
			return allReduceOf(big, F32, Sum)
		}, "dtype: ranks 0, 1, 2 have f32, rank 3 has s32", true},
		{"op", func(r int) rankCall {
			if r == 1 {
				return allReduceOf(big, S32, Max)
			}
			return allReduceOf(big, S32, Sum)
		}, "op: ranks 0, 2, 3 have sum, rank 1 has max", true},
		{"root", func(r int) rankCall {
			root := 0
			if r == 2 {
				root = 1
			}
			return func(ctx context.Context, c *Comm, a, _ cuda.DevicePtr, s []cuda.Stream) error {
				return c.Broadcast(ctx, []cuda.DevicePtr{a}, []cuda.DevicePtr{a}, 2*big, U32, root, s) // above the two-step LL limit
			}
		}, "root: ranks 0, 1, 3 have 0, rank 2 has 1", true},
		{"collective", func(r int) rankCall {
			if r == 0 {
				return func(ctx context.Context, c *Comm, a, b cuda.DevicePtr, s []cuda.Stream) error {
					return c.AllGather(ctx, []cuda.DevicePtr{a}, []cuda.DevicePtr{b}, big, F32, s)
				}
			}
			return allReduceOf(big, F32, Sum)
		}, "collective: rank 0 has all-gather, ranks 1, 2, 3 have all-reduce", true},
		// LL on every rank: the lines carry the check.
		{"ll-dtype", func(r int) rankCall {
			if r == odd {
				return allReduceOf(64, U32, Sum)
			}
			return allReduceOf(64, F32, Sum)
		}, "dtype:", false},
		// The LL broadcast: its lines carry the root in the check.
		{"ll-root", func(r int) rankCall {
			root := 0
			if r == 2 {
				root = 1
			}
			return func(ctx context.Context, c *Comm, a, _ cuda.DevicePtr, s []cuda.Stream) error {
				return c.Broadcast(ctx, []cuda.DevicePtr{a}, []cuda.DevicePtr{a}, 1000, U32, root, s)
			}
		}, "root:", false},
		// LL on one rank, the one-shot kernel on the others: its block 0
		// still stores the start barrier's arrival word.
		{"ll-against-barrier", func(r int) rankCall {
			if r == odd {
				return allReduceOf(1000, F32, Sum)
			}
			return allReduceOf(big, F32, Sum)
		}, "count: ranks 0, 1, 2 have 50000, rank 3 has 1000", false},
	}
}

// checkMismatch: every rank failed with ErrArgMismatch, not a timeout, in
// far less than the deadline, and named what tc says.
func checkMismatch(t *testing.T, tc mismatchCase, errs []error, took time.Duration) {
	t.Helper()
	assert.Less(t, took, mismatchTimeout/2, "the mismatch took as long as a timeout")
	named := 0
	for r, err := range errs {
		require.Error(t, err, "rank %d returned nil", r)
		assert.ErrorIs(t, err, ErrArgMismatch, "rank %d", r)
		assert.NotErrorIs(t, err, ErrTimeout, "rank %d", r)
		var me *MismatchError
		if errors.As(err, &me) {
			assert.Equal(t, r, me.Rank)
			assert.Contains(t, me.Error(), tc.want, "rank %d", r)
			named++
		} else {
			assert.False(t, tc.fullAll, "rank %d: want a *MismatchError, got %v", r, err)
		}
	}
	assert.NotZero(t, named, "no rank named the argument")
}

// TestArgMismatchThenClean: after a mismatch the team is failed (its
// ranks' barriers are out of step for good): the next collective fails at
// once, and says why.
func TestArgMismatchThenClean(t *testing.T) {
	errs, _ := runRanks(t, team.Unicast, 2, func(r int) rankCall {
		return func(ctx context.Context, c *Comm, a, _ cuda.DevicePtr, s []cuda.Stream) error {
			count := uint64(50000)
			if r == 1 {
				count++
			}
			if err := c.AllReduce(ctx, []cuda.DevicePtr{a}, []cuda.DevicePtr{a}, count, F32, Sum, s); err != nil {
				return err
			}
			if err := c.Sync(ctx, s); !errors.Is(err, ErrArgMismatch) {
				return fmt.Errorf("first Sync: %w, want ErrArgMismatch", err)
			}
			err := c.AllReduce(ctx, []cuda.DevicePtr{a}, []cuda.DevicePtr{a}, 50000, F32, Sum, s)
			if err == nil {
				err = c.Sync(ctx, s)
			}
			return err
		}
	})
	for r, err := range errs {
		assert.ErrorIs(t, err, ErrArgMismatch, "rank %d", r)
	}
}
