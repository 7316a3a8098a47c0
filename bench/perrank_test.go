package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team"
)

// rankRun is what one rank of a per-rank run printed and returned.
type rankRun struct {
	code           int
	stdout, stderr string
}

// runRanks runs nvls-bench in the per-rank mode that mpirun uses, with
// one goroutine per rank instead of one process: each rank drives one
// device of a shared simulated node and meets the others through an
// in-process bootstrap (the MPI launcher, mpi.go, passes team/mpi's).
//
// The sweeps ask for the unicast transport: with per-rank teams
// (team.NewRank) over an in-process bootstrap, the ranks share the
// multicast object's handle by value, and rank 0's Close releases it
// before the others unbind (across processes each holds its own
// imported handle, so mpirun runs are not affected).
func runRanks(t *testing.T, ranks int, args ...string) []rankRun {
	t.Helper()
	node := newSimNode(sim.Config{Devices: ranks, MemoryPerDevice: 2 << 30})
	t.Cleanup(func() { _ = node.Close() })
	boots := team.NewInProcess(ranks)
	out := make([]rankRun, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			var o, e bytes.Buffer
			w := &perRank{boot: boots[r], local: r, shared: &cli.Backend{Driver: node, Simulated: true, Why: "test: in-process ranks"}}
			out[r].code = runRank(args, w, &o, &e)
			out[r].stdout, out[r].stderr = o.String(), e.String()
		})
	}
	wg.Wait()
	for _, b := range boots {
		require.NoError(t, b.Close())
	}
	return out
}

func dump(runs []rankRun) string {
	var b strings.Builder
	for r, x := range runs {
		b.WriteString("--- rank " + string(rune('0'+r)) + " stdout:\n" + x.stdout + "--- stderr:\n" + x.stderr)
	}
	return b.String()
}

// One table, printed by rank 0; the time of each row is the slowest
// rank's; JSON from rank 0 only; every rank agrees on the result.
func TestPerRankSweep(t *testing.T) {
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "out.json")
	runs := runRanks(t, 4, "-transport", "unicast", "-b", "8", "-e", "16K", "-f", "4", "-n", "3", "-w", "1", "-json", js)
	for r, x := range runs {
		require.Equal(t, exitOK, x.code, "rank %d\n%s", r, dump(runs))
		if r > 0 {
			assert.Empty(t, x.stdout, "rank %d prints nothing", r)
		}
	}
	out := runs[0].stdout
	assert.Equal(t, 1, strings.Count(out, "#       size         count"), "one table:\n%s", out)
	assert.Contains(t, out, "nGpus 4")
	assert.Contains(t, out, "# Out of bounds values : 0 OK")
	for r := range 4 {
		assert.Contains(t, out, "#  Rank  "+string(rune('0'+r))+" Pid")
	}
	rep := readReport(t, js)
	require.Len(t, rep.Machine.GPUs, 4)
	for r, g := range rep.Machine.GPUs {
		assert.Equal(t, r, g.Rank)
		assert.Equal(t, r, g.Ordinal, "local rank r drives device r")
		assert.Equal(t, os.Getpid(), g.Pid)
	}
	assert.Equal(t, 4, rep.Config.NGPUs)
	require.Len(t, rep.Rows, 6) // 8 B, 32 B, ... 8 KiB
	for _, row := range rep.Rows {
		for _, f := range []*Figures{row.OutOfPlace, row.InPlace} {
			require.NotNil(t, f)
			require.Len(t, f.RankTimesUS, 4, "every rank's own time")
			assert.Equal(t, slices.Max(f.RankTimesUS), f.TimeUS, "the slowest rank's time")
			assert.Equal(t, []int64{0, 0, 0, 0}, f.WrongPerRank)
			assert.InDelta(t, f.AlgBW*1.5, f.BusBW, 1e-9, "4 ranks: bus factor 2(n-1)/n")
		}
	}
}

// The library's own collectives (package collectives) in the per-rank
// mode: every rank's team from team.NewRank, #wrong 0.
func TestPerRankLibrary(t *testing.T) {
	for _, args := range [][]string{
		{"-d", "float"},
		{"-d", "s32", "-o", "min", "-timing", "median", "-graph"},
		{"-coll", "broadcast", "-r", "2", "-d", "bf16"},
		{"-coll", "barrier"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "out.json")
			full := append([]string{"-transport", "unicast", "-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "-json", js}, args...)
			runs := runRanks(t, 4, full...)
			for r, x := range runs {
				require.Equal(t, exitOK, x.code, "rank %d\n%s", r, dump(runs))
			}
			rep := readReport(t, js)
			require.NotEmpty(t, rep.Rows)
			assert.Equal(t, "unicast", rep.Transport.Name)
			for _, row := range rep.Rows {
				for _, f := range []*Figures{row.OutOfPlace, row.InPlace} {
					if f == nil {
						continue
					}
					assert.Len(t, f.RankTimesUS, 4)
					if rep.Config.Check {
						assert.Equal(t, []int64{0, 0, 0, 0}, f.WrongPerRank, "size %d", row.Size)
					}
				}
			}
		})
	}
}

// #wrong is summed over the ranks: the double's rank 1 leaves one element
// unwritten; every rank fails the run. (An exact type: in place, the
// unwritten element keeps rank 1's input, which a float sum's tolerance
// could accept now and then.)
func TestPerRankWrongSummed(t *testing.T) {
	withRefColl(t, refBugSkipFirst)
	js := filepath.Join(t.TempDir(), "out.json")
	runs := runRanks(t, 3, "-transport", "unicast", "-b", "64", "-e", "256", "-n", "1", "-w", "0", "-d", "u32", "-json", js)
	for r, x := range runs {
		assert.Equal(t, exitFail, x.code, "rank %d\n%s", r, dump(runs))
	}
	assert.Contains(t, runs[0].stdout, "FAILED")
	assert.Contains(t, runs[1].stderr, "[rank 1] nvls-bench: 6 wrong elements")
	rep := readReport(t, js)
	require.Len(t, rep.Rows, 3)
	for _, row := range rep.Rows {
		for _, f := range []*Figures{row.OutOfPlace, row.InPlace} {
			assert.Equal(t, int64(1), f.Wrong)
			assert.Equal(t, []int64{0, 1, 0}, f.WrongPerRank)
		}
	}
	assert.Equal(t, int64(6), rep.Summary.Wrong)
}

// Median timing and broadcast from a root other than 0, with graphs.
func TestPerRankMedianBroadcast(t *testing.T) {
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "out.json")
	runs := runRanks(t, 2, "-transport", "unicast", "-coll", "broadcast", "-r", "1", "-d", "u64", "-b", "1K", "-e", "2K",
		"-n", "4", "-w", "1", "-graph", "-timing", "median", "-json", js)
	for r, x := range runs {
		require.Equal(t, exitOK, x.code, "rank %d\n%s", r, dump(runs))
	}
	rep := readReport(t, js)
	require.Len(t, rep.Rows, 2)
	for _, row := range rep.Rows {
		f := row.OutOfPlace
		require.Len(t, f.IterTimesUS, 4)
		require.Len(t, f.RankTimesUS, 2)
		assert.Equal(t, medianOf(f.IterTimesUS), f.TimeUS)
		assert.Equal(t, int64(0), row.InPlace.Wrong)
	}
}

// The rank-0 aggregation on its own: every rank's times in rank order,
// the slowest per iteration, the check counts by rank, the largest error.
func TestGatherTimesAndCheck(t *testing.T) {
	const ranks = 3
	boots := team.NewInProcess(ranks)
	ms := make([]measurement, ranks)
	cs := make([]checkResult, ranks)
	errs := make([]error, ranks)
	want := make([]float64, ranks)
	iters := [][]float64{{5, 1, 7}, {2, 9, 3}, {4, 4, 8}}
	var wg sync.WaitGroup
	for r := range ranks {
		want[r] = 10 + float64(r)*1.25
		wg.Go(func() {
			n := &node{w: &perRank{boot: boots[r]}}
			ctx := t.Context()
			ms[r] = measurement{rankTimesUS: []float64{want[r]}, iterRankUS: [][]float64{slices.Clone(iters[r])}}
			if errs[r] = n.gatherTimes(ctx, &ms[r]); errs[r] != nil {
				return
			}
			ms[r].aggregate(avgMax)
			cs[r] = checkResult{wrongPerRank: []int64{int64(r * r)}, maxErr: float64(r) / 8}
			errs[r] = n.gatherCheck(ctx, &cs[r])
		})
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, errs[r])
		assert.Equal(t, want, ms[r].rankTimesUS, "rank %d", r)
		assert.Equal(t, []float64{5, 9, 8}, ms[r].iterTimesUS, "rank %d", r)
		assert.Equal(t, []int64{0, 1, 4}, cs[r].wrongPerRank, "rank %d", r)
		assert.Equal(t, 5, int(cs[r].wrong()))
		assert.Equal(t, 0.25, cs[r].maxErr)
	}
}

// A rank that cannot open its GPU stops every rank, and all of them say
// which rank it was.
func TestPerRankSetupFailureNamed(t *testing.T) {
	withRefColl(t, 0)
	node := newSimNode(sim.Config{Devices: 2})
	defer node.Close()
	boots := team.NewInProcess(3)
	runs := make([]rankRun, 3)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range 3 {
		wg.Go(func() {
			var o, e bytes.Buffer
			runs[r].code = runRank([]string{"-b", "8", "-e", "8", "-timeout", "20s"},
				&perRank{boot: boots[r], local: r, shared: &cli.Backend{Driver: node, Simulated: true, Why: "test"}}, &o, &e)
			runs[r].stdout, runs[r].stderr = o.String(), e.String()
		})
	}
	wg.Wait()
	assert.Less(t, time.Since(start), 10*time.Second, "no rank waits for its deadline")
	for r, x := range runs {
		assert.Equal(t, exitFail, x.code, "rank %d", r)
		assert.Contains(t, x.stderr, "local rank 2 on", "rank %d:\n%s", r, x.stderr)
		assert.Contains(t, x.stderr, "no GPU of its own (2 visible)")
	}
	assert.Contains(t, runs[0].stderr, "opening the GPUs: rank(s) [2]: local rank 2")
	assert.Empty(t, runs[1].stdout)
}

// Flags: -g must match the ranks; -coll grow and bad flags are reported
// by rank 0 alone; -h prints the usage once.
func TestPerRankFlags(t *testing.T) {
	runs := runRanks(t, 2, "-g", "3")
	for r, x := range runs {
		assert.Equal(t, exitUsage, x.code, "rank %d", r)
	}
	assert.Contains(t, runs[0].stderr, "-g 3: under mpirun every rank is one GPU: -g must be the number of ranks (2)")

	runs = runRanks(t, 2, "-ranks", "4")
	for r, x := range runs {
		assert.Equal(t, exitUsage, x.code, "rank %d", r)
	}
	assert.Contains(t, runs[0].stderr, "-ranks 4: under mpirun every rank is a process with a GPU of its own: -ranks does not apply")

	runs = runRanks(t, 2, "-coll", "grow")
	assert.Equal(t, []int{exitUsage, exitUsage}, []int{runs[0].code, runs[1].code})
	assert.Contains(t, runs[0].stderr, "-coll grow: the VMM growth experiment is its own command now")
	assert.Empty(t, runs[1].stderr)

	runs = runRanks(t, 2, "-d", "float64")
	assert.Contains(t, runs[0].stderr, "-d float64: unknown dtype")
	assert.Empty(t, runs[1].stderr)

	runs = runRanks(t, 2, "-h")
	assert.Equal(t, []int{exitOK, exitOK}, []int{runs[0].code, runs[1].code})
	assert.Contains(t, runs[0].stderr, "Usage: nvls-bench")
	assert.Empty(t, runs[1].stderr)
}

// -roofline under mpirun: every rank measures its GPU, rank 0 reports
// them all.
func TestPerRankRoofline(t *testing.T) {
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "r.json")
	runs := runRanks(t, 3, "-transport", "unicast", "-roofline", "-b", "1K", "-e", "4K", "-n", "2", "-w", "1", "-json", js)
	for r, x := range runs {
		require.Equal(t, exitOK, x.code, "rank %d\n%s", r, dump(runs))
	}
	rep := readReport(t, js)
	require.NotNil(t, rep.Roofline)
	require.Len(t, rep.Roofline.GPUs, 3)
	var sum float64
	for r, g := range rep.Roofline.GPUs {
		assert.Equal(t, []int{r}, g.Ranks)
		assert.Equal(t, r, g.Device)
		assert.NotEmpty(t, g.Host)
		assert.Greater(t, g.GBs, 0.0)
		sum += g.GBs
	}
	assert.InDelta(t, sum, rep.Roofline.TotalGBs, 1e-9)
	assert.False(t, rep.Config.SharedDevices)
	assert.Equal(t, 3, rep.Config.Devices)
	for _, row := range rep.Rows {
		assert.Greater(t, row.OutOfPlace.RooflineFraction, 0.0)
	}
	assert.Contains(t, runs[0].stdout, "# Copy roofline (")
}

func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	w := &prefixWriter{w: &b, prefix: "[rank 3] ", bol: true}
	fprintf(w, "one\ntw")
	fprintf(w, "o\n\nthree\n")
	assert.Equal(t, "[rank 3] one\n[rank 3] two\n[rank 3] \n[rank 3] three\n", b.String())
}

func TestReadFloats(t *testing.T) {
	xs := []float64{1.5, math.Inf(1), -0, 3e-300}
	b := appendFloats(appendFloats(nil, xs), nil)
	got, rest, err := readFloats(b)
	require.NoError(t, err)
	assert.Equal(t, xs, got)
	none, rest, err := readFloats(rest)
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Empty(t, rest)
	_, _, err = readFloats(b[:2])
	assert.Error(t, err)
	bad := binary.LittleEndian.AppendUint32(nil, 3)
	_, _, err = readFloats(append(bad, make([]byte, 16)...))
	assert.Error(t, err, "3 values in 16 bytes")
}
