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

// gpuCount is the number of GPUs the real driver reports (skips without
// 2).
func gpuCount(t *testing.T) int { return gpusAtLeast(t, 2) }

// gpusAtLeast is the number of GPUs the real driver reports (skips
// without min).
func gpusAtLeast(t *testing.T, min int) int {
	d, err := cuda.Load()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skip("no CUDA driver")
	}
	require.NoError(t, err)
	n, err := d.DeviceCount()
	require.NoError(t, err)
	if n < min {
		t.Skipf("%d GPU(s); need %d", n, min)
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

// Ranks that share GPU 0 (issue 13): the checks pass, the header and the
// JSON say so, and the copy roofline is measured with every row's
// fraction of it.
func TestGPUSharedRanks(t *testing.T) {
	gpusAtLeast(t, 1)
	for _, ranks := range []string{"2", "4"} {
		t.Run(ranks, func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "out.json")
			code, out, errOut := runBench(t, "-transport", "unicast", "-g", "1", "-ranks", ranks, "-b", "8", "-e", "256M", "-f", "8", "-n", "5", "-w", "2", "-json", js)
			t.Log("\n" + out)
			require.Equal(t, exitOK, code, "stderr:\n%s", errOut)
			assert.Contains(t, out, "# Shared GPUs (-ranks "+ranks+")")
			rep := readReport(t, js)
			assert.True(t, rep.Config.SharedDevices)
			require.NotNil(t, rep.Roofline)
			require.Len(t, rep.Roofline.GPUs, 1)
			assert.Greater(t, rep.Roofline.TotalGBs, 100.0, "a GPU copies at more than 100 GB/s")
			for _, r := range rep.Rows {
				for _, f := range []*Figures{r.OutOfPlace, r.InPlace} {
					assert.Equal(t, int64(0), f.Wrong, "size %d", r.Size)
					assert.Greater(t, f.RooflineFraction, 0.0, "size %d", r.Size)
				}
			}
		})
	}
}

// -compare nccl with NCCL on symmetric memory where the loaded NCCL has it:
// on every GPU (one is enough: a one-rank communicator, all NCCL runs on
// one GPU), both NCCL columns checked, #wrong 0. Without symmetric memory
// the header says why. Skips without NCCL.
func TestGPUCompareNCCLSymmetric(t *testing.T) {
	n := gpusAtLeast(t, 1)
	t.Setenv("NCCL_NVLS_ENABLE", "0")
	lib, err := nccl.Open()
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	symErr := lib.Symmetric()
	_ = lib.Close()
	js := filepath.Join(t.TempDir(), "out.json")
	code, out, errOut := runBench(t, "-transport", "unicast", "-g", fmt.Sprint(n), "-compare", "nccl", "-b", "8", "-e", "64M", "-f", "8", "-n", "5", "-w", "2", "-json", js)
	t.Log("\n" + out)
	require.Equal(t, exitOK, code, "stderr:\n%s", errOut)
	rep := readReport(t, js)
	require.NotNil(t, rep.NCCL)
	if symErr != nil {
		assert.Nil(t, rep.NCCLSym)
		assert.Equal(t, symErr.Error(), rep.NCCLSymSkipped)
		return
	}
	require.NotNil(t, rep.NCCLSym, rep.NCCLSymSkipped)
	for _, r := range rep.Rows {
		for _, f := range []*Figures{r.NCCLSymOutOfPlace, r.NCCLSymInPlace} {
			require.NotNil(t, f, "size %d", r.Size)
			assert.Equal(t, int64(0), f.Wrong, "size %d", r.Size)
		}
		assert.Greater(t, r.RatioSymOutOfPlace, 0.0)
	}
}
