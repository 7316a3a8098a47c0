//go:build gpu

package grow_test

// The growth experiment on a real GPU, run by hand on the GPU machine:
//
//	go test -tags gpu -c -o grow-gpu.test ./bench/grow
//	NVLS_GROW_OUT=docs ./grow-gpu.test -test.run GPU -test.v -test.timeout 30m
//
// NVLS_GROW_OUT names a directory for grow.txt (the tables) and grow.svg
// and grow.png (the plot); NVLS_GROW_TARGET and NVLS_GROW_STEP change the
// target (default 16 GiB) and the step (default 256 MiB): sizes, read as
// every NVLS_* size (internal/env).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/bench/grow"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/vmm"
)

func sizeEnv(t *testing.T, name string) uint64 {
	n, _, err := env.OS.Size(name)
	require.NoError(t, err)
	return n
}

func TestGPUGrowthExperiment(t *testing.T) {
	d, err := cuda.Load()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skipf("no CUDA driver: %v", err)
	}
	require.NoError(t, err)
	n, err := d.DeviceCount()
	require.NoError(t, err)
	if n < 1 {
		t.Skip("no GPU")
	}
	dev, err := d.DeviceGet(0)
	require.NoError(t, err)

	cfg := grow.Config{Target: sizeEnv(t, "NVLS_GROW_TARGET"), Step: sizeEnv(t, "NVLS_GROW_STEP")}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := d.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.PrimaryCtxRelease(dev)) }()
	require.NoError(t, d.CtxSetCurrent(c))

	res, err := grow.Run(context.Background(), d, dev, cfg)
	require.NoError(t, err)

	var sb strings.Builder
	fmt.Fprintf(&sb, "device %d: %s (driver %s)\n\n", res.Device, res.DeviceName, res.Driver)
	require.NoError(t, res.WriteTable(&sb))
	sb.WriteString("\n")
	require.NoError(t, res.WriteSteps(&sb))
	t.Log("\n" + sb.String())

	chunk, err := vmm.Granularity(d, dev, cuda.HandleNone, true)
	require.NoError(t, err)
	for _, mode := range res.Config.Modes {
		gs, ok := res.Find(grow.Growable, mode)
		require.True(t, ok)
		rs, ok := res.Find(grow.Realloc, mode)
		require.True(t, ok)
		ratio := float64(rs.Total) / float64(gs.Total)
		t.Logf("%s mode: growable %v, realloc %v: growable %.1fx faster; peaks %s vs %s (final %s)",
			mode, gs.Total, rs.Total, ratio, grow.Bytes(gs.Peak), grow.Bytes(rs.Peak), grow.Bytes(gs.Final()))
		// The memory goal: the Growable peaks at the final size
		// plus at most a granularity (cuMemGetInfo counts in 2 MiB pages;
		// allow one more for the driver's own bookkeeping).
		assert.LessOrEqual(t, gs.Peak, gs.Final()+2*chunk, "%s: growable peak", mode)
		if ratio < 10 {
			t.Logf("NOTE: the issue's goal is 10x; measured %.1fx in %s mode", ratio, mode)
		}
	}

	if dir, set := env.OS.String("NVLS_GROW_OUT"); set {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "grow.txt"), []byte(sb.String()), 0o644))
		require.NoError(t, res.Plot(filepath.Join(dir, "grow.svg")))
		require.NoError(t, res.Plot(filepath.Join(dir, "grow.png")))
		t.Logf("wrote %s/grow.txt, grow.svg, grow.png", dir)
	}
}
