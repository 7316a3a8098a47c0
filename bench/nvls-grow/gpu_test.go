//go:build gpu

package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// The command on a real GPU: 2 MiB to 2 GiB in 256 MiB steps, with a plot.
func TestGPUGrow(t *testing.T) {
	d, err := cuda.Load()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skip("no CUDA driver")
	}
	require.NoError(t, err)
	if n, err := d.DeviceCount(); err != nil || n < 1 {
		t.Skipf("no GPU (%d, %v)", n, err)
	}
	plot := filepath.Join(t.TempDir(), "grow.svg")
	code, out, errOut := runGrow(t, "-b", "2M", "-e", "2G", "-step", "256M", "-plot", plot)
	t.Log("\n" + out)
	require.Equal(t, 0, code, errOut)
	st, err := os.Stat(plot)
	require.NoError(t, err)
	assert.Greater(t, st.Size(), int64(1000))
}
