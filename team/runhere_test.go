package team

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/osthread"
)

// hereJob records, per local rank, the OS thread it ran on and the context
// current there; it fails on rank failOn (-1: never).
type hereJob struct {
	node   *sim.Node
	tids   []int
	ctxs   []cuda.Context
	order  []int
	failOn int
}

var errHere = errors.New("here job: chosen failure")

func (j *hereJob) Run(l int) error {
	c, err := j.node.CtxGetCurrent()
	if err != nil {
		return err
	}
	j.order = append(j.order, l)
	j.tids[l], j.ctxs[l] = osthread.ID(), c
	if l == j.failOn {
		return fmt.Errorf("rank %d: %w", l, errHere)
	}
	return nil
}

func newHereJob(node *sim.Node, n int) *hereJob {
	return &hereJob{node: node, tids: make([]int, n), ctxs: make([]cuda.Context, n), failOn: -1}
}

// onThread runs f on a goroutine locked to its thread, with c current
// there (0: none), and returns the thread's id and its current context
// after f.
func onThread(t *testing.T, node *sim.Node, c cuda.Context, f func()) (tid int, after cuda.Context) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, node.CtxSetCurrent(c))
		defer func() { _ = node.CtxSetCurrent(0) }()
		tid = osthread.ID()
		f()
		var err error
		after, err = node.CtxGetCurrent()
		require.NoError(t, err)
	}()
	<-done
	return tid, after
}

// TestRunHere: on a team whose local ranks share one context (1 rank; 3
// ranks on one GPU), RunHere runs every rank's job in order on the calling
// thread with that context current; the thread keeps it when it had none
// and gets its own back when it had another (a failure to is an error).
// The first error stops the later ranks.
func TestRunHere(t *testing.T) {
	for _, devs := range [][]cuda.Device{{0}, {0, 0, 0}} {
		n := len(devs)
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			node := newNode(t, sim.Config{Devices: 2})
			opts := []Option{WithWorkspaceSize(smallData), quiet()}
			if n > 1 {
				opts = append(opts, WithSharedDevices())
			}
			tm, err := New(testCtx(t), node, devs, opts...)
			require.NoError(t, err)
			defer func() { require.NoError(t, tm.Close()) }()
			require.True(t, tm.oneContext())
			want := tm.Context(0)
			order := make([]int, n)
			for l := range order {
				order[l] = l
			}

			j := newHereJob(node, n)
			tid, after := onThread(t, node, 0, func() { require.NoError(t, tm.runHere(j)) })
			assert.Equal(t, order, j.order, "every rank, in order")
			for l := range n {
				assert.Equal(t, tid, j.tids[l], "rank %d's job on the calling thread", l)
				assert.Equal(t, want, j.ctxs[l], "rank %d's job with the ranks' context current", l)
			}
			assert.Equal(t, want, after, "a thread that had no context keeps the ranks'")

			// A thread with another context current (device 1's) gets it back.
			other, err := node.PrimaryCtxRetain(1)
			require.NoError(t, err)
			defer func() { require.NoError(t, node.PrimaryCtxRelease(1)) }()
			j = newHereJob(node, n)
			_, after = onThread(t, node, other, func() { require.NoError(t, tm.runHere(j)) })
			assert.Equal(t, want, j.ctxs[0])
			assert.Equal(t, other, after, "the thread's own context is current again")
			// Its restore failing is an error too (after every job ran).
			j = newHereJob(node, n)
			onThread(t, node, other, func() {
				node.FailAt("cuCtxSetCurrent", 2, cuda.ErrorUnknown)
				err := tm.runHere(j)
				node.ClearFaults()
				require.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown})
				assert.Contains(t, err.Error(), "current again")
			})
			assert.Equal(t, order, j.order)

			// The first error stops the later ranks.
			j = newHereJob(node, n)
			j.failOn = 0
			onThread(t, node, 0, func() { require.ErrorIs(t, tm.runHere(j), errHere) })
			assert.Equal(t, []int{0}, j.order, "no rank after the failed one")
		})
	}
}

// TestRunHereContexts: on a team of three GPUs (a context each), RunHere
// runs every rank's job in order on the calling thread with that rank's
// own context current; a thread that had none keeps the last rank's, one
// that had another gets it back; a failure to make rank 1's current stops
// before its job, and the thread still gets its own back.
func TestRunHereContexts(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	tm, err := New(testCtx(t), node, devices(3), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	require.False(t, tm.oneContext())
	j := newHereJob(node, 3)
	tid, after := onThread(t, node, 0, func() { require.NoError(t, tm.runHere(j)) })
	assert.Equal(t, []int{0, 1, 2}, j.order, "every rank, in order")
	for l := range 3 {
		assert.Equal(t, tid, j.tids[l], "rank %d's job on the calling thread", l)
		assert.Equal(t, tm.Context(l), j.ctxs[l], "rank %d's job with its own context current", l)
	}
	assert.Equal(t, tm.Context(2), after, "a thread that had no context keeps the last rank's")

	other, err := node.PrimaryCtxRetain(3)
	require.NoError(t, err)
	defer func() { require.NoError(t, node.PrimaryCtxRelease(3)) }()
	j = newHereJob(node, 3)
	_, after = onThread(t, node, other, func() { require.NoError(t, tm.runHere(j)) })
	assert.Equal(t, []int{0, 1, 2}, j.order)
	assert.Equal(t, other, after, "the thread's own context is current again")

	j = newHereJob(node, 3)
	_, after = onThread(t, node, other, func() {
		node.FailAt("cuCtxSetCurrent", 2, cuda.ErrorUnknown) // rank 1's
		err := tm.runHere(j)
		node.ClearFaults()
		require.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown})
		assert.Contains(t, err.Error(), "device 1's primary context")
	})
	assert.Equal(t, []int{0}, j.order, "no job after the failed switch")
	assert.Equal(t, other, after, "the thread's own context is current again")
}

// TestRunHereStaleContext: a thread whose current context was released
// since (a closed team's, left on a pooled thread) runs the jobs and keeps
// the last rank's context, as one that had none: no error.
func TestRunHereStaleContext(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	tm, err := New(testCtx(t), node, devices(3), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	j := newHereJob(node, 3)
	_, after := onThread(t, node, 0, func() {
		stale, err := node.PrimaryCtxRetain(3)
		require.NoError(t, err)
		require.NoError(t, node.CtxSetCurrent(stale))
		require.NoError(t, node.PrimaryCtxRelease(3))
		require.ErrorIs(t, node.CtxSetCurrent(stale), cuda.ErrInvalidContext, "released: it cannot be current again")
		require.NoError(t, tm.runHere(j))
	})
	assert.Equal(t, []int{0, 1, 2}, j.order)
	assert.Equal(t, tm.Context(2), after, "the last rank's context stays current")
}

// TestRunHereRefused: a broken and a closed team are refused; a failed
// context call is an error and runs no job.
func TestRunHereRefused(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 1})
	tm, err := New(testCtx(t), node, []cuda.Device{0, 0}, WithSharedDevices(), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	var j *hereJob
	for _, op := range []string{"cuCtxGetCurrent", "cuCtxSetCurrent"} {
		j = newHereJob(node, 2)
		onThread(t, node, 0, func() {
			node.FailAt(op, 1, cuda.ErrorUnknown)
			err := tm.runHere(j)
			node.ClearFaults()
			require.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown}, op)
			assert.Contains(t, err.Error(), op)
		})
		assert.Empty(t, j.order, "no job runs after %s failed", op)
	}
	tm.markFailed(errHere)
	require.ErrorIs(t, tm.runHere(j), ErrBroken)
	require.NoError(t, tm.Close())
	require.ErrorIs(t, tm.runHere(j), ErrClosed)
	require.NoError(t, node.CheckNoLeaks())
}
