package grow_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/bench/grow"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

const mib = 1 << 20

func newNode(t *testing.T) *sim.Node {
	t.Helper()
	n := sim.New(sim.Config{Devices: 2, MemoryPerDevice: 1 << 30})
	require.NoError(t, n.Init())
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// inCtx runs fn on a locked OS thread with dev's primary context current.
func inCtx(t *testing.T, d cuda.Driver, dev cuda.Device, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := d.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	require.NoError(t, d.CtxSetCurrent(c))
	fn()
	require.NoError(t, d.CtxSetCurrent(0))
	require.NoError(t, d.PrimaryCtxRelease(dev))
}

var small = grow.Config{Start: 2 * mib, Target: 64 * mib, Step: 8 * mib, Pattern: 256 << 10}

func TestSizes(t *testing.T) {
	s, err := small.Sizes(grow.Steps)
	require.NoError(t, err)
	assert.Equal(t, []uint64{2 * mib, 10 * mib, 18 * mib, 26 * mib, 34 * mib, 42 * mib, 50 * mib, 58 * mib, 64 * mib}, s)
	s, err = small.Sizes(grow.Doubling)
	require.NoError(t, err)
	assert.Equal(t, []uint64{2 * mib, 4 * mib, 8 * mib, 16 * mib, 32 * mib, 64 * mib}, s)
	s, err = grow.Config{}.Sizes(grow.Doubling)
	require.NoError(t, err)
	assert.Equal(t, uint64(grow.DefaultStart), s[0])
	assert.Equal(t, uint64(16<<30), s[len(s)-1])
	assert.Len(t, s, 14)
	_, err = grow.Config{Start: 4 * mib, Target: 2 * mib}.Sizes(grow.Steps)
	assert.Error(t, err)
	_, err = small.Sizes("sideways")
	assert.Error(t, err)
}

func TestRunOnSim(t *testing.T) {
	n := newNode(t)
	var res grow.Result
	inCtx(t, n, 1, func() {
		var err error
		res, err = grow.Run(context.Background(), n, 1, small)
		require.NoError(t, err)
	})
	require.NoError(t, n.CheckNoLeaks())
	require.Len(t, res.Series, 6)
	assert.Equal(t, "sim", res.Driver)
	assert.Equal(t, cuda.Device(1), res.Device)

	for _, mode := range []grow.Mode{grow.Steps, grow.Doubling} {
		sizes, err := small.Sizes(mode)
		require.NoError(t, err)
		// Realloc holds the old and the new buffer at once: its peak is
		// the largest old+new.
		var reallocPeak uint64
		for i := 1; i < len(sizes); i++ {
			reallocPeak = max(reallocPeak, sizes[i-1]+sizes[i])
		}
		for _, m := range []grow.Method{grow.Growable, grow.Realloc, grow.Managed} {
			s, ok := res.Find(m, mode)
			require.True(t, ok, "%s %s", m, mode)
			require.Len(t, s.Steps, len(sizes))
			for i, st := range s.Steps {
				assert.Equal(t, sizes[i], st.Size)
				assert.Positive(t, st.Time)
			}
			assert.Equal(t, uint64(64*mib), s.Final())
			assert.Equal(t, len(sizes)-1, s.Checked, "every grow was checked")
			var sum int64
			for _, st := range s.Steps {
				sum += int64(st.Time)
			}
			assert.Equal(t, sum, int64(s.Total))
			switch m {
			case grow.Growable:
				assert.Equal(t, uint64(64*mib), s.Peak, "%s: peak at the final size", mode)
				assert.Zero(t, s.Moves)
			case grow.Realloc:
				assert.Equal(t, reallocPeak, s.Peak, "%s: old + new", mode)
			case grow.Managed:
				// The simulator charges managed memory when allocated.
				assert.Equal(t, uint64(64*mib), s.Peak)
			}
		}
	}

	var tbl bytes.Buffer
	require.NoError(t, res.WriteTable(&tbl))
	lines := strings.Split(strings.TrimSpace(tbl.String()), "\n")
	require.Len(t, lines, 7)
	assert.Contains(t, lines[0], "peak mem")
	for _, l := range lines[1:] {
		assert.Contains(t, l, "64 MiB")
	}
	var steps bytes.Buffer
	require.NoError(t, res.WriteSteps(&steps))
	assert.Contains(t, steps.String(), "mode step")
	assert.Contains(t, steps.String(), "mode double")
	assert.Contains(t, steps.String(), "58 MiB")

	dir := t.TempDir()
	for _, name := range []string{"grow.svg", "grow.png"} {
		p := filepath.Join(dir, name)
		require.NoError(t, res.Plot(p))
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Greater(t, len(b), 1000, name)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "grow.svg"))
	assert.Contains(t, string(b), "<svg")
	b, _ = os.ReadFile(filepath.Join(dir, "grow.png"))
	assert.True(t, bytes.HasPrefix(b, []byte("\x89PNG")))
	assert.Error(t, res.Plot(filepath.Join(dir, "grow.txt")))
}

// The Growable's reservation can be made small so that growing has to
// extend it; the data checks still pass.
func TestRunGrowableExtends(t *testing.T) {
	n := newNode(t)
	inCtx(t, n, 0, func() {
		cfg := small
		cfg.Methods = []grow.Method{grow.Growable}
		cfg.Modes = []grow.Mode{grow.Doubling}
		cfg.Reserve = 4 * mib
		cfg.PerChunk = true
		res, err := grow.Run(context.Background(), n, 0, cfg)
		require.NoError(t, err)
		require.Len(t, res.Series, 1)
		assert.Equal(t, 5, res.Series[0].Checked)
	})
	require.NoError(t, n.CheckNoLeaks())
}

// corrupting is a driver whose device-to-device copies drop a byte, to
// prove that the data check catches a bad grow.
type corrupting struct{ *sim.Node }

func (c corrupting) MemcpyDtoD(dst, src cuda.DevicePtr, k uint64) error {
	if err := c.Node.MemcpyDtoD(dst, src, k); err != nil {
		return err
	}
	return c.Node.WriteDevice(dst+cuda.DevicePtr(k-1), []byte{^mustRead(c.Node, dst+cuda.DevicePtr(k-1))})
}

func mustRead(n *sim.Node, p cuda.DevicePtr) byte {
	b, err := n.ReadDevice(p, 1)
	if err != nil {
		panic(err)
	}
	return b[0]
}

func TestRunDetectsCorruption(t *testing.T) {
	n := newNode(t)
	inCtx(t, n, 0, func() {
		cfg := small
		cfg.Methods = []grow.Method{grow.Realloc}
		_, err := grow.Run(context.Background(), corrupting{n}, 0, cfg)
		require.ErrorIs(t, err, grow.ErrMismatch)
		assert.Contains(t, err.Error(), "realloc")
	})
	require.NoError(t, n.CheckNoLeaks(), "a failed run frees what it allocated")
}

func TestRunNeedsContextAndStops(t *testing.T) {
	n := newNode(t)
	_, err := grow.Run(context.Background(), n, 0, small)
	require.Error(t, err, "no current context")
	inCtx(t, n, 0, func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := grow.Run(ctx, n, 0, small)
		require.ErrorIs(t, err, context.Canceled)
	})
	require.NoError(t, n.CheckNoLeaks())
}
