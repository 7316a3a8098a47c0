//go:build gpu

package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
)

// gpuCount is the number of GPUs the real driver reports (skips without one).
func gpuCount(t *testing.T) int {
	d, err := cuda.Load()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skip("no CUDA driver")
	}
	require.NoError(t, err)
	n, err := d.DeviceCount()
	require.NoError(t, err)
	if n < 2 {
		t.Skipf("%d GPU(s); need 2", n)
	}
	return n
}

// A short sweep of the real binary logic on real GPUs, unicast only, with
// every check passing; NCCL alongside when libnccl.so.2 is there (with its
// NVLink SHARP off: no multicast on the shared GPU machines).
func TestGPUSweep(t *testing.T) {
	n := gpuCount(t)
	t.Setenv("NCCL_NVLS_ENABLE", "0")
	compare := []string{"-compare", "nccl"}
	if l, err := nccl.Open(); err != nil {
		t.Logf("no NCCL (%v): nvls only", err)
		compare = nil
	} else {
		_ = l.Close()
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"allreduce-f32", []string{"-d", "float"}},
		{"allreduce-bf16-graph", []string{"-d", "bf16", "-graph"}},
		{"allreduce-u32-max-median", []string{"-d", "u32", "-o", "max", "-timing", "median"}},
		{"broadcast", []string{"-coll", "broadcast", "-r", fmt.Sprint(n - 1)}},
		{"broadcast-graph", []string{"-coll", "broadcast", "-graph"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "out.json")
			args := append([]string{"-transport", "unicast", "-g", fmt.Sprint(n), "-b", "8", "-e", "64M", "-f", "4", "-n", "5", "-w", "2", "-json", js}, c.args...)
			args = append(args, compare...)
			code, out, errOut := runBench(t, args...)
			t.Log("\n" + out)
			require.Equal(t, exitOK, code, "stderr:\n%s", errOut)
			rep := readReport(t, js)
			assert.False(t, rep.Machine.Simulated)
			assert.Equal(t, "unicast", rep.Transport.Name)
			assert.Len(t, rep.Rows, 13)
			for _, r := range rep.Rows {
				for _, f := range []*Figures{r.OutOfPlace, r.InPlace, r.NCCLOutOfPlace, r.NCCLInPlace} {
					if f != nil {
						assert.Equal(t, int64(0), f.Wrong, "size %d", r.Size)
						assert.Greater(t, f.TimeUS, 0.0)
					}
				}
			}
		})
	}
}

func TestGPUBarrier(t *testing.T) {
	n := gpuCount(t)
	code, out, errOut := runBench(t, "-transport", "unicast", "-g", fmt.Sprint(n), "-coll", "barrier", "-n", "100")
	t.Log("\n" + out)
	require.Equal(t, exitOK, code, errOut)
}
