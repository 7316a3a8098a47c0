package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The CI run of the real library: nvls-bench -sim -g 4, a short sweep of
// every collective, #wrong 0, JSON that parses. Skipped (saying why) until
// package collectives is wired in.
func TestSimSweepOfTheLibrary(t *testing.T) {
	for _, args := range [][]string{
		{"-d", "float"},
		{"-d", "bf16", "-graph"},
		{"-d", "s32", "-o", "max", "-transport", "unicast", "-timing", "median"},
		{"-coll", "broadcast", "-r", "2"},
		{"-coll", "barrier"},
		{"-coll", "reducescatter", "-d", "half"},
		{"-coll", "reducescatter", "-d", "u64", "-o", "min", "-transport", "unicast", "-graph"},
		{"-coll", "allgather", "-d", "bf16"},
		{"-coll", "reduce", "-r", "3", "-d", "int32", "-o", "max"},
		{"-coll", "reduce", "-r", "1", "-transport", "unicast"},
		{"-d", "float", "-z", "1"},
		{"-coll", "barrier", "-z", "1", "-timing", "median"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "out.json")
			full := append([]string{"-sim", "-g", "4", "-b", "8", "-e", "64K", "-f", "4", "-n", "3", "-w", "1", "-json", js}, args...)
			code, out, errOut := runBench(t, full...)
			require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			rep := readReport(t, js)
			require.NotEmpty(t, rep.Rows)
			for _, r := range rep.Rows {
				for _, f := range []*Figures{r.OutOfPlace, r.InPlace} {
					if f != nil && rep.Config.Check {
						assert.Equal(t, int64(0), f.Wrong, "size %d", r.Size)
					}
				}
			}
		})
	}
}

// TestLatencyMode: -z 1 on the real library: every collective followed by
// Comm.Sync, host-timed; the header says so, and every size has a time.
func TestLatencyMode(t *testing.T) {
	js := filepath.Join(t.TempDir(), "out.json")
	code, out, errOut := runBench(t, "-sim", "-g", "2", "-b", "8", "-e", "64", "-f", "8", "-n", "5", "-w", "1", "-z", "1", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "\n# Blocking: every collective is waited for before the next is issued (nvls: Comm.Sync; NCCL: a cuStreamQuery spin): the latency mode\n")
	assert.Contains(t, out, "\n# Time: host time per collective, issue + wait (-z 1), average over -n iterations of the slowest rank\n")
	rep := readReport(t, js)
	assert.True(t, rep.Config.Blocking)
	require.Len(t, rep.Rows, 2)
	for _, r := range rep.Rows {
		assert.Positive(t, r.OutOfPlace.TimeUS, "size %d", r.Size)
		assert.Len(t, r.OutOfPlace.RankTimesUS, 2)
		assert.Equal(t, r.OutOfPlace.RankTimesUS[0], r.OutOfPlace.RankTimesUS[1], "one host time per process")
	}
}

// TestSettingsReported: the header's "# nvls:" line and the JSON's nvls
// object say what the library's Comm ran with, environment included.
func TestSettingsReported(t *testing.T) {
	t.Setenv("NVLS_RING_MIN", "64M")
	js := filepath.Join(t.TempDir(), "out.json")
	code, out, errOut := runBench(t, "-sim", "-g", "4", "-transport", "unicast", "-coll", "reduce", "-b", "1M", "-e", "1M", "-n", "2", "-w", "1", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "# nvls: LL to 128 KiB; two LL steps: reduce to 256 KiB, broadcast to 1 MiB;")
	assert.Contains(t, out, "ring reduce from 64 MiB (FIFO 32 MiB a rank)")
	rep := readReport(t, js)
	require.NotNil(t, rep.NVLS)
	assert.Equal(t, uint64(64<<20), rep.NVLS.RingMin)
	assert.Equal(t, uint64(32<<20), rep.NVLS.RingBytes)
	assert.Equal(t, uint64(128<<10), rep.NVLS.LLMax)
	assert.Zero(t, rep.Config.Segment, "-timing avg: no segments in the JSON")
	assert.Contains(t, out, "reduce pulled by the root off;", "4 ranks: no pull by default")

	// 2 ranks: the reduce pulled by the root from 8 MiB, and its copy
	// engines from 256 MiB.
	t.Setenv("NVLS_RING_MIN", "")
	code, out, errOut = runBench(t, "-sim", "-g", "2", "-transport", "unicast", "-coll", "reduce", "-b", "1M", "-e", "1M", "-n", "2", "-w", "1", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "copy engines from 128 MiB (reduce from 256 MiB); reduce pulled by the root from 8 MiB; ring reduce off;")
	rep = readReport(t, js)
	require.NotNil(t, rep.NVLS)
	assert.Equal(t, uint64(8<<20), rep.NVLS.ReducePullMin)
	assert.Equal(t, uint64(256<<20), rep.NVLS.ReduceCopyEngineMin)
}
