package collectives

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// TestTimeoutRankNeverArrives: rank 2 never launches the all-reduce. The
// others' kernels give up after the timeout; Sync returns, well within its
// deadline, an error naming the operation, the ranks and the phase; the
// team is broken and every later call returns that error; Close still
// frees everything (the fixture's cleanup checks the node for leaks).
//
// 4000 bytes run the LL kernel (its poll for the missing rank's lines
// times out; it has one phase, 0) and, with LL off, the one-shot kernel
// (its start barrier times out).
func TestTimeoutRankNeverArrives(t *testing.T) {
	for _, tr := range transports() {
		for _, llMax := range []uint64{DefaultLLMax, 0} {
			t.Run(fmt.Sprintf("%v LL max %d", tr, llMax), func(t *testing.T) {
				timeoutRankNeverArrives(t, tr, llMax)
			})
		}
	}
}

func timeoutRankNeverArrives(t *testing.T, tr team.Transport, llMax uint64) {
	const timeout = 200 * time.Millisecond
	f := newFixture(t, fixtureConfig{ranks: 4, transport: tr, dataBytes: 8 << 20, opts: []Option{WithTimeout(timeout), WithLLMax(llMax)}})
	if llMax != 0 {
		require.Equal(t, kernels.LL, f.c.algo(4000))
	} else {
		require.Equal(t, kernels.OneShot, f.c.algo(4000))
	}
	b := f.alloc(4096)
	f.c.skip = []bool{false, false, true, false}
	require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 1000, F32, Sum, f.streams))
	f.c.skip = nil

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := f.c.Sync(ctx, f.streams)
	took := time.Since(start)
	require.Error(t, err)
	t.Logf("Sync returned after %v: %v", took, err)
	assert.Less(t, took, 5*time.Second, "Sync must return soon after the kernels' timeout, not at its own deadline")
	assert.ErrorIs(t, err, team.ErrBroken)
	assert.ErrorIs(t, err, ErrTimeout)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "all-reduce", te.Op)
	assert.Equal(t, uint32(kernels.OpAllReduce), te.Opcode)
	assert.Equal(t, uint32(0), te.Phase, "the start barrier")
	assert.NotEqual(t, 2, te.Rank)
	msg := err.Error()
	for _, want := range []string{"all-reduce", "timed out waiting for peers", "rank 0 (device 0)", "rank 1 (device 1)", "rank 3 (device 3)", "rank 2 reported no timeout", "phase 0",
		"the barrier deadline WithTimeout(200ms) expired"} {
		assert.Contains(t, msg, want)
	}
	assert.Equal(t, "WithTimeout(200ms)", te.Deadline)

	// Broken: everything returns the team's error, before
	// launching anything.
	f.node.ResetCalls()
	for name, call := range map[string]func() error{
		"AllReduce": func() error {
			return f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 1000, F32, Sum, f.streams)
		},
		"Broadcast": func() error {
			return f.c.Broadcast(context.Background(), f.ptrs(b), f.ptrs(b), 1000, F32, 0, f.streams)
		},
		"Barrier": func() error { return f.c.Barrier(context.Background(), f.streams) },
		"Sync":    func() error { return f.c.Sync(context.Background(), f.streams) },
	} {
		err := call()
		assert.ErrorIs(t, err, team.ErrBroken, name)
		assert.ErrorIs(t, err, ErrTimeout, name)
		assert.Equal(t, msg, err.Error(), name)
	}
	assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"))
	_, err = f.t.Alloc(16)
	assert.ErrorIs(t, err, ErrTimeout, "the team refuses work too")
	// A new Comm on the broken team is refused.
	_, err = New(f.t)
	assert.ErrorIs(t, err, team.ErrBroken)
}

// TestNewTimeoutNamesDeadline: NVLS_TIMEOUT=1ns makes New's barrier
// (after zeroing the LL area) time out; New's error, on a rank that timed
// out or one that gave up because another had, names that deadline and
// where it came from, and blames no rank for failing (issue 24: "gave up
// ... rank 1 had failed first").
func TestNewTimeoutNamesDeadline(t *testing.T) {
	for _, tc := range []struct {
		env   string
		opts  []Option
		named string
	}{
		{"1ns", nil, "NVLS_TIMEOUT=1ns"},
		{"0.000000001", nil, "NVLS_TIMEOUT=0.000000001 (1ns)"},
		{"10s", []Option{WithTimeout(time.Nanosecond)}, "WithTimeout(1ns)"},
	} {
		for _, ranks := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d ranks", tc.named, ranks), func(t *testing.T) {
				t.Setenv(EnvTimeout, tc.env)
				node := newSimNode(sim.Config{Devices: ranks})
				devs := make([]cuda.Device, ranks)
				for i := range devs {
					devs[i] = cuda.Device(i)
				}
				tm, err := team.New(context.Background(), node, devs, team.WithTransport(team.Unicast),
					team.WithWorkspaceSize(8<<20), team.WithLogger(quietLogger()))
				require.NoError(t, err)
				// The barrier passes when every rank arrived before any
				// looked at the clock, which a 1 ns deadline only makes
				// rare: New again until one times out.
				for range 50 {
					var c *Comm
					if c, err = New(tm, tc.opts...); err != nil {
						break
					}
					require.NoError(t, c.Close())
				}
				require.Error(t, err, "50 News with a 1 ns barrier deadline all passed")
				t.Log(err)
				assert.ErrorIs(t, err, ErrTimeout)
				assert.ErrorIs(t, tm.Err(), team.ErrBroken)
				msg := err.Error()
				var ae *AbortError
				if errors.As(err, &ae) {
					assert.Contains(t, msg, fmt.Sprintf("gave up in barrier phase 0 (block 0): the barrier deadline %s expired on rank %d first", tc.named, ae.FailedRank))
				} else {
					assert.Contains(t, msg, "timed out waiting for peers in barrier phase 0 (block 0): the barrier deadline "+tc.named+" expired")
				}
				assert.NotContains(t, msg, "had failed first")
				assert.Contains(t, tm.Err().Error(), "the barrier deadline "+tc.named+" expired")
				require.NoError(t, tm.Close())
				require.NoError(t, node.Close())
			})
		}
	}
	// The default, named as such.
	t.Setenv(EnvTimeout, "")
	c, err := resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, "10s, the default; NVLS_TIMEOUT or WithTimeout sets it", c.deadline)
}

// TestTimeoutDefaultDeadline: with no deadline on Sync's context, Sync
// still returns (the kernels' timeout plus grace bounds it).
func TestTimeoutDefaultDeadline(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(150 * time.Millisecond)}})
	f.c.skip = []bool{true, false, false}
	require.NoError(t, f.c.Barrier(context.Background(), f.streams))
	f.c.skip = nil
	start := time.Now()
	err := f.c.Sync(context.Background(), f.streams)
	assert.Less(t, time.Since(start), 3*time.Second)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "barrier", te.Op)
	assert.Contains(t, err.Error(), "rank 0 reported no timeout")
}

// TestSyncDefaultDeadlineHungStream: with no deadline on its context,
// Sync waits for a busy stream until the kernels' timeout plus a grace of
// min(timeout, 1 s) and then returns a *DeadlineError naming its rank: not
// sooner, and not much later (the margin is what a loaded machine needs
// to schedule the poll). The stream is held by a gate kernel, not by a
// collective, so no kernel reports a timeout. Two timeouts: one under the
// grace's cap (300 ms: 600 ms) and one over it (2 s: 3 s).
func TestSyncDefaultDeadlineHungStream(t *testing.T) {
	const margin = 500 * time.Millisecond
	for _, timeout := range []time.Duration{300 * time.Millisecond, 2 * time.Second} {
		t.Run(timeout.String(), func(t *testing.T) {
			want := timeout + min(timeout, time.Second)
			f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(timeout)}})
			open := f.gate(1)
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- f.c.Sync(context.Background(), f.streams) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(want + 5*time.Second):
				open()
				<-done
				t.Fatalf("Sync without a deadline still waited on a hung stream %v after its default deadline (%v)", 5*time.Second, want)
			}
			took := time.Since(start)
			t.Logf("Sync returned after %v (default deadline %v): %v", took, want, err)
			var de *DeadlineError
			require.ErrorAs(t, err, &de)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, []int{1}, de.Ranks)
			assert.GreaterOrEqual(t, de.Waited, want, "returned before the default deadline")
			assert.Less(t, took, want+margin, "returned long after the default deadline")
			assert.NoError(t, f.t.Err(), "a host deadline alone does not break the team")
			open()
			f.sync()
		})
	}
}

// TestTimeoutLateRank: rank 1 arrives, but only after the others gave up.
// The late rank then times out as well (its peers are gone): Sync reports
// every rank.
func TestTimeoutLateRank(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Multicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(100 * time.Millisecond)}})
	b := f.alloc(1 << 12)
	open := f.gate(1)
	require.NoError(t, f.c.Broadcast(context.Background(), f.ptrs(b), f.ptrs(b), 512, U64, 0, f.streams))
	time.Sleep(300 * time.Millisecond)
	open()
	err := f.c.Sync(context.Background(), f.streams)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "broadcast", te.Op)
	for _, want := range []string{"rank 0 (device 0)", "rank 1 (device 1)", "rank 2 (device 2)"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "reported no timeout")
}

// TestSyncDeadline: Sync's deadline passes while a rank is held back (for
// less than the kernels' timeout): a *DeadlineError naming the busy ranks,
// and the team stays usable; once the rank is let go the all-reduce
// completes and is right.
func TestSyncDeadline(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(20 * time.Second)}})
	rng := newRNG(t)
	a, b := f.alloc(4096), f.alloc(4096)
	ins := make([][]byte, 3)
	for l := range 3 {
		ins[l] = input(rng, S32, 1000)
		f.write(a.Ptr(l), ins[l])
	}
	open := f.gate(2)
	require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(a), f.ptrs(b), 1000, S32, Sum, f.streams))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := f.c.Sync(ctx, f.streams)
	var de *DeadlineError
	require.ErrorAs(t, err, &de)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, []int{0, 1, 2}, de.Ranks)
	assert.NoError(t, f.t.Err(), "a host deadline alone does not break the team")
	open()
	f.sync()
	gots := make([][]byte, 3)
	for l := range 3 {
		gots[l] = f.read(b.Ptr(l), 4000)
	}
	msg, bad := checkAllReduce(S32, Sum, ins, gots, 1000)
	assert.Zero(t, bad, msg)
}

// TestLaunchFailureBreaksTeam: a launch that fails on one rank after
// others launched breaks the team (their counters moved, its did not);
// one that fails before any rank launched does not.
func TestLaunchFailureBreaksTeam(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20, opts: []Option{WithTimeout(100 * time.Millisecond)}})
	b := f.alloc(4096)
	// Every rank's launch fails: nothing was launched, the team is fine.
	// (A fault that fires is gone; the others count only the calls after
	// it: three faults at "the next call" fail three calls in a row.)
	for range 3 {
		f.node.FailAt("cuLaunchKernelEx", 1, cuda.ErrorLaunchOutOfRes)
	}
	err := f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 100, U32, Max, f.streams)
	require.Error(t, err)
	assert.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorLaunchOutOfRes})
	assert.Contains(t, err.Error(), "AllReduce: rank")
	require.NoError(t, f.t.Err())
	f.sync()

	// One rank's launch fails: broken.
	f.node.FailAt("cuLaunchKernelEx", 2, cuda.ErrorLaunchOutOfRes)
	err = f.c.AllReduce(context.Background(), f.ptrs(b), f.ptrs(b), 100, U32, Max, f.streams)
	assert.ErrorIs(t, err, team.ErrBroken)
	assert.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorLaunchOutOfRes})
	assert.True(t, errors.Is(f.c.Barrier(context.Background(), f.streams), team.ErrBroken))
	// The ranks that did launch time out; Close must still free
	// everything (the fixture's cleanup drains the streams and checks).
}

// TestTimeoutErrorPushPhase: a timeout in the push broadcast's wait for
// the root's data (kabi.PhasePush) says so, where the barrier phases name
// their number.
func TestTimeoutErrorPushPhase(t *testing.T) {
	for _, tc := range []struct {
		phase uint32
		want  string
	}{
		{0, "timed out waiting for peers in barrier phase 0 (block 3)"},
		{kabi.PhasePush, "timed out waiting for the root's data (block 3)"},
	} {
		e := &TimeoutError{Op: "broadcast", Opcode: kernels.OpBroadcast, Rank: 1, Device: 1, Phase: tc.phase, Block: 3,
			Status: kabi.TimeoutStatus(kernels.OpBroadcast, tc.phase, 3)}
		assert.Equal(t, "collectives: broadcast (opcode "+fmt.Sprint(kernels.OpBroadcast)+") on rank 1 (device 1): "+tc.want, e.Error())
	}
}
