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
			require.True(t, tm.OneContext())
			want := tm.Context(0)
			order := make([]int, n)
			for l := range order {
				order[l] = l
			}

			j := newHereJob(node, n)
			tid, after := onThread(t, node, 0, func() { require.NoError(t, tm.RunHere(j)) })
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
			_, after = onThread(t, node, other, func() { require.NoError(t, tm.RunHere(j)) })
			assert.Equal(t, want, j.ctxs[0])
			assert.Equal(t, other, after, "the thread's own context is current again")
			// Its restore failing is an error too (after every job ran).
			j = newHereJob(node, n)
			onThread(t, node, other, func() {
				node.FailAt("cuCtxSetCurrent", 2, cuda.ErrorUnknown)
				err := tm.RunHere(j)
				node.ClearFaults()
				require.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown})
				assert.Contains(t, err.Error(), "current again")
			})
			assert.Equal(t, order, j.order)

			// The first error stops the later ranks.
			j = newHereJob(node, n)
			j.failOn = 0
			onThread(t, node, 0, func() { require.ErrorIs(t, tm.RunHere(j), errHere) })
			assert.Equal(t, []int{0}, j.order, "no rank after the failed one")
		})
	}
}

// TestRunHereRefused: a team on two GPUs (two contexts) is refused, as
// are a broken and a closed team; a failed context call is an error and
// runs no job.
func TestRunHereRefused(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	tm, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	require.False(t, tm.OneContext())
	j := newHereJob(node, 2)
	err = tm.RunHere(j)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than one context")
	assert.Empty(t, j.order)
	require.NoError(t, tm.Close())

	node = newNode(t, sim.Config{Devices: 1})
	tm, err = New(testCtx(t), node, []cuda.Device{0, 0}, WithSharedDevices(), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	for _, op := range []string{"cuCtxGetCurrent", "cuCtxSetCurrent"} {
		j = newHereJob(node, 2)
		onThread(t, node, 0, func() {
			node.FailAt(op, 1, cuda.ErrorUnknown)
			err := tm.RunHere(j)
			node.ClearFaults()
			require.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown}, op)
			assert.Contains(t, err.Error(), op)
		})
		assert.Empty(t, j.order, "no job runs after %s failed", op)
	}
	tm.Fail(errHere)
	require.ErrorIs(t, tm.RunHere(j), ErrBroken)
	require.NoError(t, tm.Close())
	require.ErrorIs(t, tm.RunHere(j), ErrClosed)
	require.NoError(t, node.CheckNoLeaks())
}
