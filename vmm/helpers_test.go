package vmm_test

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

const mib = 1 << 20

// newNode is an initialized simulated node, closed and checked for leaks
// when the test ends.
func newNode(t testing.TB, cfg sim.Config) *sim.Node {
	t.Helper()
	cfg.Kernels = stripedKernels
	n := sim.New(cfg)
	require.NoError(t, n.Init())
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// noLeaks fails the test if the node still holds anything.
func noLeaks(t testing.TB, n *sim.Node) {
	t.Helper()
	require.NoError(t, n.CheckNoLeaks())
}

// randBytes is fresh random data (never all zeros).
func randBytes(k int) []byte {
	b := make([]byte, k)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	b[0] |= 1
	return b
}

// inCtx runs fn on a locked OS thread with dev's primary context current.
func inCtx(t testing.TB, d cuda.Driver, dev cuda.Device, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := d.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.PrimaryCtxRelease(dev)) }()
	require.NoError(t, d.CtxSetCurrent(c))
	defer func() { _ = d.CtxSetCurrent(0) }()
	fn()
}

// opsOf returns the entry point names of the calls recorded since the last
// ResetCalls, keeping only those in keep.
func opsOf(n *sim.Node, keep ...string) []string {
	want := map[string]bool{}
	for _, k := range keep {
		want[k] = true
	}
	var out []string
	for _, c := range n.Calls() {
		if want[c.Op] {
			out = append(out, c.Op)
		}
	}
	return out
}
