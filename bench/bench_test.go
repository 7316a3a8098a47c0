package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// withRefColl makes the sweep use the reference double instead of package
// collectives for the duration of a test.
func withRefColl(t *testing.T, bug uint32) {
	t.Helper()
	old := newCollectives
	newCollectives = func(tm *team.Team, n *node, cfg *config) (collectiveLauncher, error) {
		return newRefColl(tm, n, cfg.maxBytes, bug)
	}
	t.Cleanup(func() { newCollectives = old })
}

func runBench(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func readReport(t *testing.T, path string) Report {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var rep Report
	require.NoError(t, json.Unmarshal(b, &rep))
	return rep
}

func TestSimSweepWithReferenceCollective(t *testing.T) {
	withRefColl(t, 0)
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.svg")
	code, out, errOut := runBench(t, "-sim", "-g", "4", "-b", "8", "-e", "64K", "-n", "3", "-w", "1", "-json", js, "-plot", svg)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "\n# Simulated NVSwitch node (asked for with -sim): times are NOT hardware times\n")
	assert.Contains(t, out, "# Out of bounds values : 0 OK")
	rep := readReport(t, js)
	assert.True(t, rep.Machine.Simulated)
	require.Len(t, rep.Machine.GPUs, 4)
	require.Len(t, rep.Rows, 14) // 8 B .. 64 KiB
	for i, r := range rep.Rows {
		assert.Equal(t, uint64(8)<<i, r.Size)
		assert.Equal(t, r.Size/4, r.Count)
		for _, f := range []*Figures{r.OutOfPlace, r.InPlace} {
			require.NotNil(t, f)
			assert.Equal(t, int64(0), f.Wrong)
			assert.Len(t, f.RankTimesUS, 4)
			assert.Greater(t, f.TimeUS, 0.0)
			assert.InDelta(t, f.AlgBW*1.5, f.BusBW, 1e-9)
		}
	}
	st, err := os.Stat(svg)
	require.NoError(t, err)
	assert.Greater(t, st.Size(), int64(1000))
}

func TestBrokenCollectiveIsCounted(t *testing.T) {
	withRefColl(t, refBugSkipFirst)
	js := filepath.Join(t.TempDir(), "out.json")
	// An exact type: with bf16 the unwritten element (which keeps rank 1's
	// input in place) could fall inside the float tolerance.
	code, out, _ := runBench(t, "-sim", "-g", "3", "-b", "64", "-e", "256", "-n", "1", "-w", "0", "-d", "u32", "-json", js)
	assert.Equal(t, exitFail, code)
	assert.Contains(t, out, "FAILED")
	rep := readReport(t, js)
	require.Len(t, rep.Rows, 3)
	for _, r := range rep.Rows {
		for _, f := range []*Figures{r.OutOfPlace, r.InPlace} {
			assert.Equal(t, int64(1), f.Wrong, "rank 1 leaves one element unwritten")
			assert.Equal(t, []int64{0, 1, 0}, f.WrongPerRank)
		}
	}
}

func TestGraphMedianBroadcast(t *testing.T) {
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "out.json")
	code, out, errOut := runBench(t, "-sim", "-g", "2", "-coll", "broadcast", "-r", "1", "-d", "u64",
		"-b", "1K", "-e", "4K", "-n", "4", "-w", "1", "-graph", "-timing", "median", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	rep := readReport(t, js)
	require.Len(t, rep.Rows, 3)
	for _, r := range rep.Rows {
		assert.Equal(t, "none", r.RedOp)
		assert.Equal(t, 1, r.Root)
		assert.Equal(t, "uint64", r.Type)
		assert.Len(t, r.OutOfPlace.IterTimesUS, 4)
		assert.Equal(t, medianOf(r.OutOfPlace.IterTimesUS), r.OutOfPlace.TimeUS)
		assert.Equal(t, r.OutOfPlace.AlgBW, r.OutOfPlace.BusBW) // broadcast: factor 1
		assert.Equal(t, int64(0), r.InPlace.Wrong)
	}
	assert.True(t, strings.Contains(out, "graph: 1"))
	assert.Equal(t, 1, rep.Config.Segment, "-timing median: segments of one iteration by default")

	// -segment 2: the median of 2 segments of 2 iterations, the JSON says
	// so.
	code, out, errOut = runBench(t, "-sim", "-g", "2", "-b", "1K", "-e", "1K", "-n", "4", "-w", "1", "-timing", "median", "-segment", "2", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	rep = readReport(t, js)
	assert.Equal(t, 2, rep.Config.Segment)
	require.Len(t, rep.Rows, 1)
	assert.Len(t, rep.Rows[0].OutOfPlace.IterTimesUS, 2)
	assert.Contains(t, out, "median over segments of 2 iterations")
}

func TestAllReduceTypesAndOps(t *testing.T) {
	withRefColl(t, 0)
	for _, c := range []struct{ d, o string }{{"half", "sum"}, {"float", "max"}, {"s32", "sum"}, {"u32", "min"}, {"u64", "sum"}, {"bfloat16", "min"}} {
		code, out, errOut := runBench(t, "-sim", "-g", "3", "-d", c.d, "-o", c.o, "-b", "1000", "-e", "1000", "-n", "1", "-w", "0", "-transport", "unicast")
		require.Equal(t, exitOK, code, "%v\nstdout:\n%s\nstderr:\n%s", c, out, errOut)
	}
}

func TestHungCollectiveTimesOut(t *testing.T) {
	withRefColl(t, refBugRank0Absent)
	start := time.Now()
	code, _, errOut := runBench(t, "-sim", "-g", "3", "-b", "64", "-e", "64", "-n", "2", "-w", "1", "-timeout", "500ms")
	assert.Equal(t, exitFail, code)
	assert.Contains(t, errOut, "ranks [1 2] still busy: context deadline exceeded")
	assert.Contains(t, errOut, "allreduce 64 B")
	assert.Less(t, time.Since(start), 30*time.Second)
}

func TestNoDriverFallsBackToTheSimulatedNode(t *testing.T) {
	if _, err := cuda.Load(); err == nil {
		t.Skip("a CUDA driver is installed here")
	}
	withRefColl(t, 0)
	code, out, errOut := runBench(t, "-g", "2", "-b", "1M", "-n", "1", "-w", "0")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	// One sentence, naming the missing driver once (issue 15, item 10).
	assert.Regexp(t, `\n# Simulated NVSwitch node \(no CUDA driver: [^\n]*libcuda[^\n]*\): times are NOT hardware times\n`, out)
	assert.Equal(t, 1, strings.Count(out, "no CUDA driver"), out)
	assert.NotContains(t, out, "simulated because")
	// Without -e the simulated node stops at 1 MiB.
	assert.Contains(t, out, "maxBytes 1048576 ")
	assert.Contains(t, out, "     1048576        262144     float     sum      -1")
}

func TestRootBeyondTheNodeIsAUsageError(t *testing.T) {
	withRefColl(t, 0)
	code, _, errOut := runBench(t, "-sim", "-coll", "broadcast", "-r", "5", "-b", "64", "-e", "64")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "nvls-bench: -r 5: root out of range (0 to 3: 4 ranks)\n", errOut)
}

// TestF32MaxOnMulticast: f32 max, which multimem cannot reduce, runs on
// the multicast transport (the unicast kernel over the UC aliases) with
// package collectives, every row checked.
func TestF32MaxOnMulticast(t *testing.T) {
	code, out, errOut := runBench(t, "-sim", "-g", "2", "-transport", "multicast", "-d", "float", "-o", "max", "-b", "64", "-e", "256K", "-n", "2", "-w", "1")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "# Out of bounds values : 0 OK")
	assert.Contains(t, out, "float     max")
}

func TestBarrierRow(t *testing.T) {
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "b.json")
	code, out, errOut := runBench(t, "-sim", "-g", "4", "-coll", "barrier", "-n", "10", "-w", "2", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	rep := readReport(t, js)
	require.Len(t, rep.Rows, 1)
	r := rep.Rows[0]
	assert.Equal(t, uint64(0), r.Size)
	assert.Equal(t, "none", r.Type)
	assert.Nil(t, r.InPlace)
	assert.Greater(t, r.OutOfPlace.TimeUS, 0.0)
	assert.Equal(t, int64(-1), r.OutOfPlace.Wrong)
	assert.Contains(t, out, "           0             0      none    none      -1")
	assert.Contains(t, out, "     N/A     N/A    N/A")
	assert.NotContains(t, out, "Avg bus bandwidth")
	assert.Contains(t, out, "# Out of bounds values : N/A (a barrier moves no data)")
}

// Issue 9's shape at CI scale: eight ranks on the simulated node.
func TestEightRanks(t *testing.T) {
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "8.json")
	code, out, errOut := runBench(t, "-sim", "-g", "8", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-graph", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	rep := readReport(t, js)
	assert.Len(t, rep.Machine.GPUs, 8)
	assert.Equal(t, 1.75, rep.Config.BusFactor)
	for _, r := range rep.Rows {
		assert.Equal(t, int64(0), r.OutOfPlace.Wrong)
		assert.Equal(t, int64(0), r.InPlace.Wrong)
		assert.Len(t, r.OutOfPlace.WrongPerRank, 8)
	}
}
