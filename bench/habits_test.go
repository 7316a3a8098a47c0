package main

// nvls-bench against nccl-tests' habits (issue 15, item 11): -G, -m, -a,
// -z, -c N, the nccl-tests flags that do not apply, -compare nccl where
// NCCL cannot run, and the progress lines in a terminal.

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

func TestNCCLTestsFlagsParsed(t *testing.T) {
	cfg, err := parseFlags(strings.Fields("-G 5 -m 3 -a 1 -z 0 -c 4 -t 1 -p 0 -y 0 -C 0"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 5, cfg.graphLaunches)
	assert.True(t, cfg.graph)
	assert.Equal(t, 3, cfg.aggIters)
	assert.Equal(t, avgMean, cfg.average)
	assert.False(t, cfg.blocking)
	assert.Equal(t, 4, cfg.checkIters)

	def, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 0, def.graphLaunches)
	assert.Equal(t, 1, def.aggIters)
	assert.Equal(t, avgMax, def.average, "the slowest rank, as before -a")
	assert.Equal(t, 1, def.checkIters)

	for args, want := range map[string]int{"-graph": 1, "-graph=false": 0, "-graph -G 1": 1, "-G 0": 0, "-z 1": 0} {
		cfg, err := parseFlags(strings.Fields(args), io.Discard)
		require.NoError(t, err, args)
		assert.Equal(t, want, cfg.graphLaunches, args)
		assert.Equal(t, want > 0, cfg.graph, args)
	}
}

func TestNCCLTestsFlagErrors(t *testing.T) {
	for args, want := range map[string]string{
		"-G -1":                     "-G -1: out of range (CUDA graph replays: 0 (no graph) or more)",
		"-m 0":                      "-m 0: out of range (collectives per iteration: an integer >= 1)",
		"-a 4":                      "-a 4: must be 0 (rank 0), 1 (mean over the ranks), 2 (fastest rank) or 3 (slowest rank)",
		"-z 2":                      "-z 2: blocking must be 0 or 1",
		"-graph -G 2":               "-G 2: -graph is -G 1: give one of them",
		"-z 1 -G 2":                 "-z 1: -z 1 waits for every collective to finish, and a CUDA graph (-G, -graph) only records collectives to run later: give one of them",
		"-z 1 -graph":               "-z 1: -z 1 waits for every collective to finish, and a CUDA graph (-G, -graph) only records collectives to run later: give one of them",
		"-z 1 -m 4":                 "-z 1: -z 1 waits for every collective to finish, and -m 4 issues its collectives together (one NCCL group): give one of them",
		"-coll barrier -c 2":        "-c 2: -coll barrier moves no data: there is nothing to check (leave -c out)",
		"-sim -compare nccl":        "-compare nccl: NCCL needs real GPUs and this run is on the simulated node (-sim)",
		"-t 2":                      "-t 2: nccl-tests' flag does not apply: nvls-bench has no threads per process: one process drives every GPU (-g), or mpirun starts one process per GPU",
		"-p 1":                      "-p 1: nccl-tests' flag does not apply: nvls-bench has no threads to initialize NCCL in parallel",
		"-y 1":                      "-y 1: nccl-tests' flag does not apply: every rank runs on a stream of its own; the NULL stream is not used",
		"-C 1":                      "-C 1: nccl-tests' flag does not apply: times are CUDA event times on every rank's stream; CPU time is not reported",
		"-i 1M":                     "-i 1M: nccl-tests' flag does not apply: sizes grow by a factor (-f) only, not by fixed increments",
		"-T 30":                     "-T 30: nccl-tests' flag does not apply: nvls-bench's deadline is -timeout, a duration (e.g. -timeout 30s)",
		"-F out.csv":                "-F out.csv: nccl-tests' flag does not apply: nvls-bench writes no CSV: -json FILE writes every figure",
		"-coll barrier -c 1 -g 2":   "-c 1: -coll barrier moves no data: there is nothing to check (leave -c out)",
		"-coll broadcast -m 2 -z 1": "-z 1: -z 1 waits for every collective to finish, and -m 2 issues its collectives together (one NCCL group): give one of them",
	} {
		code, out, errOut := runBench(t, strings.Fields(args)...)
		assert.Equal(t, exitUsage, code, args)
		assert.Empty(t, out, args)
		assert.Equal(t, "nvls-bench: "+want+"\n", errOut, args)
	}
	// -c 0 with a barrier is what it does anyway.
	_, err := parseFlags(strings.Fields("-coll barrier -c 0"), io.Discard)
	assert.NoError(t, err)
}

// simWorld is the solo world on a simulated node the test holds (to count
// its calls).
type simWorld struct {
	solo
	node *sim.Node
}

func (w simWorld) open(*config) (*cli.Backend, error) {
	return &cli.Backend{Driver: w.node, Simulated: true, Why: "test"}, nil
}

// rig is a node of two simulated GPUs, nvls on it (the reference double)
// and a timer, set up as args say.
type rig struct {
	cfg  *config
	node *sim.Node
	n    *node
	ours *oursRunner
	t    *timer
	op   opSpec
}

func newRig(t *testing.T, bug uint32, args ...string) *rig {
	t.Helper()
	withRefColl(t, bug)
	cfg, err := parseFlags(append([]string{"-b", "256", "-e", "256", "-d", "u32"}, args...), io.Discard)
	require.NoError(t, err)
	r := &rig{cfg: cfg, node: newSimNode(sim.Config{Devices: 2, MemoryPerDevice: 1 << 30})}
	t.Cleanup(func() { assert.NoError(t, r.node.Close()) })
	r.n, err = openNode(cfg, simWorld{node: r.node})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.n.Close()) })
	r.ours, err = newOursRunner(t.Context(), r.n, cfg, 256)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.ours.Close()) })
	r.t, err = newTimer(r.n, cfg.iters+1)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.t.Close()) })
	r.op = opSpec{coll: cfg.coll, size: 256, count: 64, dtype: cfg.dtype, op: cfg.op}
	return r
}

// counting counts what a runner is asked to issue.
type counting struct {
	runner
	calls, colls int
	ks           []int
}

func (c *counting) enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr, k int) error {
	c.calls++
	c.colls += k
	c.ks = append(c.ks, k)
	return c.runner.enqueue(ctx, op, send, recv, k)
}

func (r *rig) timing(t *testing.T, rn runner) measurement {
	send, recv := r.ours.buffers()
	m, err := timing(t.Context(), r.n, r.t, r.cfg, rn, r.op, send, recv)
	require.NoError(t, err)
	return m
}

// -m: every timed iteration issues m collectives at once; warm-up and the
// aligning collective one each.
func TestAggIters(t *testing.T) {
	r := newRig(t, 0, "-n", "4", "-w", "2", "-m", "3")
	c := &counting{runner: r.ours}
	before := len(r.node.CallsOf("cuLaunchKernel"))
	m := r.timing(t, c)
	assert.Equal(t, []int{1, 1, 1, 3, 3, 3, 3}, c.ks)
	assert.Equal(t, 2*c.colls, len(r.node.CallsOf("cuLaunchKernel"))-before, "one kernel per collective and rank")
	assert.Len(t, m.rankTimesUS, 2)
	assert.Equal(t, 60.0, schedule{segments: 1, itersPerSegment: 4, agg: 3, launches: 5}.perSegment())
	assert.Equal(t, 3.0, schedule{segments: 4, itersPerSegment: 1, agg: 3}.perSegment())
}

// -G N: the timed iterations are captured once and replayed N times (avg
// timing: one graph of every iteration; median: one of one iteration,
// replayed N times per iteration), after one untimed replay unless
// -cold-graph.
func TestGraphLaunches(t *testing.T) {
	r := newRig(t, 0, "-n", "4", "-w", "1", "-m", "2", "-G", "5")
	c := &counting{runner: r.ours}
	launches := len(r.node.CallsOf("cuGraphLaunch"))
	r.timing(t, c)
	assert.Equal(t, []int{1, 2, 2, 2, 2, 1}, c.ks, "warm-up, the captured iterations, the aligning collective")
	assert.Equal(t, 2*(1+5), len(r.node.CallsOf("cuGraphLaunch"))-launches, "1 untimed and 5 timed replays on each of 2 GPUs")
	assert.Contains(t, timeMethod(r.cfg), "after one untimed replay that uploads it")

	r = newRig(t, 0, "-n", "4", "-w", "1", "-G", "5", "-cold-graph")
	launches = len(r.node.CallsOf("cuGraphLaunch"))
	r.timing(t, &counting{runner: r.ours})
	assert.Equal(t, 2*5, len(r.node.CallsOf("cuGraphLaunch"))-launches, "-cold-graph: the 5 timed replays alone")
	assert.Contains(t, timeMethod(r.cfg), "-cold-graph")

	r = newRig(t, 0, "-n", "3", "-w", "0", "-m", "2", "-G", "2", "-timing", "median")
	c = &counting{runner: r.ours}
	launches = len(r.node.CallsOf("cuGraphLaunch"))
	m := r.timing(t, c)
	assert.Equal(t, []int{2, 1}, c.ks, "one iteration captured, then the aligning collective")
	assert.Equal(t, 2*(1+3*2), len(r.node.CallsOf("cuGraphLaunch"))-launches, "1 untimed replay, then 2 per iteration, 3 iterations, 2 GPUs")
	assert.Len(t, m.iterTimesUS, 3)
	require.Len(t, m.iterRankUS, 2)
	assert.Equal(t, medianOf(m.iterTimesUS), m.timeUS)

	// -segment 3: 6 iterations in 2 timed segments of 3, without graphs
	// (an event after each segment), the median over the 2 segments'
	// averages.
	r = newRig(t, 0, "-n", "6", "-w", "0", "-timing", "median", "-segment", "3")
	c = &counting{runner: r.ours}
	m = r.timing(t, c)
	assert.Equal(t, []int{1, 1, 1, 1, 1, 1, 1}, c.ks, "the aligning collective, then 6 timed")
	assert.Len(t, m.iterTimesUS, 2, "a time a segment")
	require.Len(t, m.iterRankUS, 2)
	assert.Equal(t, medianOf(m.iterTimesUS), m.timeUS)
	assert.Contains(t, timeMethod(r.cfg), "median over segments of 3 iterations of the slowest rank's average")
}

// -c N: N checked runs on fresh data, stopping at the first wrong one.
func TestCheckIters(t *testing.T) {
	for _, c := range []struct {
		bug          uint32
		checks, runs int
		wrong        int64
	}{{0, 3, 3, 0}, {refBugSkipFirst, 3, 1, 1}, {0, 0, 0, -1}} {
		r := newRig(t, c.bug, "-n", "2", "-w", "1", "-c", strconv.Itoa(c.checks))
		cr := &counting{runner: r.ours}
		send, recv := r.ours.buffers()
		f, err := measureVariant(t.Context(), r.cfg, r.n, r.t, cr, r.op, false, send, recv)
		require.NoError(t, err)
		assert.Equal(t, 1+1+2+c.runs, cr.calls, "warm-up, align, -n, the checks: %+v", c)
		assert.Equal(t, c.wrong, f.Wrong, "%+v", c)
	}
}

// -a: whose time the table reports.
func TestAverageAcrossRanks(t *testing.T) {
	m := measurement{rankTimesUS: []float64{3, 1, 2}}
	for a, want := range map[average]float64{avgRank0: 3, avgMean: 2, avgMin: 1, avgMax: 3} {
		m.aggregate(a)
		assert.Equal(t, want, m.timeUS, "-a %d", a)
	}
	m = measurement{rankTimesUS: []float64{2, 3}, iterRankUS: [][]float64{{1, 5, 3}, {4, 2, 6}}}
	m.aggregate(avgMin)
	assert.Equal(t, []float64{1, 2, 3}, m.iterTimesUS)
	assert.Equal(t, 2.0, m.timeUS)
	m.aggregate(avgMean)
	assert.Equal(t, []float64{2.5, 3.5, 4.5}, m.iterTimesUS)
	assert.Equal(t, 3.5, m.timeUS)

	withRefColl(t, 0)
	for a, of := range map[string]func([]float64) float64{
		"0": func(x []float64) float64 { return x[0] }, "2": slices.Min[[]float64], "3": slices.Max[[]float64],
		"1": func(x []float64) float64 { return (x[0] + x[1] + x[2]) / 3 },
	} {
		js := filepath.Join(t.TempDir(), "a.json")
		code, out, errOut := runBench(t, "-sim", "-g", "3", "-b", "1K", "-e", "4K", "-n", "3", "-w", "1", "-a", a, "-json", js)
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		rep := readReport(t, js)
		assert.Equal(t, averageNames[a[0]-'0'], rep.Config.Average)
		for _, row := range rep.Rows {
			assert.InDelta(t, of(row.OutOfPlace.RankTimesUS), row.OutOfPlace.TimeUS, 1e-9, "-a %s", a)
		}
	}
	_, out, _ := runBench(t, "-sim", "-g", "2", "-b", "64", "-e", "64", "-n", "1", "-w", "0", "-a", "1")
	assert.Contains(t, out, "# Time: average over -n iterations of the mean over the ranks (CUDA events per rank)\n")
}

// -z 1: each collective is waited for before the next: a hung one is
// found right after it, not at the end of the iterations.
func TestBlocking(t *testing.T) {
	withRefColl(t, 0)
	code, out, errOut := runBench(t, "-sim", "-g", "2", "-b", "64", "-e", "256", "-n", "3", "-w", "1", "-z", "1")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "\n# Blocking: every collective is waited for")

	withRefColl(t, refBugRank0Absent)
	for z, where := range map[string]string{"1": "blocking collective", "0": "timed iterations"} {
		code, _, errOut := runBench(t, "-sim", "-g", "3", "-b", "64", "-e", "64", "-n", "2", "-w", "0", "-z", z, "-timeout", "500ms")
		assert.Equal(t, exitFail, code)
		assert.Contains(t, errOut, where+": ranks [1 2] still busy: context deadline exceeded", "-z %s", z)
	}
}

// The README's `make bench BENCH_ARGS="... -compare nccl"` on a machine
// without GPUs: the sweep runs on the simulated node and the header says
// why there are no NCCL columns.
func TestCompareNCCLWithoutGPUs(t *testing.T) {
	if _, err := cuda.Load(); err == nil {
		t.Skip("a CUDA driver is installed here")
	}
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "c.json")
	code, out, errOut := runBench(t, "-g", "2", "-transport", "unicast", "-compare", "nccl", "-b", "8", "-e", "1K", "-n", "2", "-w", "1", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "\n# NCCL: not run (-compare nccl): NCCL needs real GPUs and this run is on the simulated node\n")
	assert.NotContains(t, out, "NCCL out-of-place")
	assert.Contains(t, out, "# Out of bounds values : 0 OK")
	rep := readReport(t, js)
	assert.Nil(t, rep.NCCL)
	assert.Equal(t, noNCCLOnSim, rep.NCCLSkipped)
	assert.Equal(t, "nccl", rep.Config.Compare)
}

// The same in the per-rank world (every rank on the shared simulated
// node).
func TestPerRankCompareNCCLOnSim(t *testing.T) {
	withRefColl(t, 0)
	runs := runRanks(t, 2, "-transport", "unicast", "-compare", "nccl", "-b", "8", "-e", "64", "-n", "1", "-w", "0")
	for r, x := range runs {
		require.Equal(t, exitOK, x.code, "rank %d\n%s", r, dump(runs))
	}
	assert.Contains(t, runs[0].stdout, "# NCCL: not run (-compare nccl): "+noNCCLOnSim+"\n")
}

// fakeTTY is a terminal to the progress writer (a character device).
type fakeTTY struct{ bytes.Buffer }

func (*fakeTTY) Stat() (os.FileInfo, error) { return ttyInfo{}, nil }

type ttyInfo struct{}

func (ttyInfo) Name() string       { return "tty" }
func (ttyInfo) Size() int64        { return 0 }
func (ttyInfo) Mode() fs.FileMode  { return fs.ModeDevice | fs.ModeCharDevice | 0o620 }
func (ttyInfo) ModTime() time.Time { return time.Time{} }
func (ttyInfo) IsDir() bool        { return false }
func (ttyInfo) Sys() any           { return nil }

// screen is what a terminal shows of out: each line as the last carriage
// return and erase left it.
func screen(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if i := strings.LastIndex(l, "\r"); i >= 0 {
			l = l[i+1:]
		}
		lines = append(lines, strings.ReplaceAll(l, "\x1b[K", ""))
	}
	return lines
}

// In a terminal the progress is one status line that the next row
// replaces: the table on the screen is whole. In a log, a line per size.
func TestProgressKeepsTheTableWhole(t *testing.T) {
	withRefColl(t, 0)
	args := []string{"-sim", "-g", "2", "-b", "8", "-e", "4K", "-n", "1", "-w", "0"} // 10 sizes: progress shown
	term := &fakeTTY{}
	cfg, err := parseFlags(args, io.Discard)
	require.NoError(t, err)
	require.Equal(t, exitOK, bench(cfg, solo{}, newOutput(term, term)), term.String())
	lines := screen(term.String())
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "#        (B)") }) + 1
	last := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "# Out of bounds") })
	require.Greater(t, last, first, term.String())
	assert.Len(t, lines[first:last], 10)
	for _, l := range lines[first:last] {
		assert.Regexp(t, `^ +\d+ +\d+ +float +sum +-1 `, l, "a table row")
	}
	assert.Contains(t, term.String(), "\r\x1b[Knvls-bench: [10/10] 4 KiB done", "the status line was shown")

	var o, e bytes.Buffer
	code := run(args, &o, &e)
	require.Equal(t, exitOK, code)
	assert.Contains(t, e.String(), "nvls-bench: [1/10] 8 B done")
	assert.Equal(t, 10, strings.Count(e.String(), "\n"), "a line per size")
	assert.NotContains(t, e.String(), "\x1b")
}

func TestProgressStatusLine(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, tty: true}
	p.clear()
	assert.Empty(t, b.String(), "nothing to clear")
	p.show("one")
	p.show("two")
	p.clear()
	p.clear()
	assert.Equal(t, "\r\x1b[Kone\r\x1b[Ktwo\r\x1b[K", b.String())
	assert.True(t, terminal(&fakeTTY{}))
	assert.False(t, terminal(&b))
	f, err := os.CreateTemp(t.TempDir(), "log")
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, terminal(f), "a file is not a terminal")
}

// -launch parallel: every GPU's graph is still launched once per replay
// (from a thread per GPU), the schedule, the JSON and the header say so;
// the default is nccl-tests' serial launch.
func TestGraphLaunchParallel(t *testing.T) {
	r := newRig(t, 0, "-n", "4", "-w", "1", "-G", "3", "-launch", "parallel")
	require.Equal(t, "parallel", scheduleOf(r.cfg).launch)
	launches := len(r.node.CallsOf("cuGraphLaunch"))
	r.timing(t, &counting{runner: r.ours})
	assert.Equal(t, 2*(1+3), len(r.node.CallsOf("cuGraphLaunch"))-launches, "1 untimed and 3 timed replays on each of 2 GPUs")
	assert.Contains(t, timeMethod(r.cfg), "a thread per GPU at once (-launch parallel)")

	cfg, err := parseFlags([]string{"-graph"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "serial", scheduleOf(cfg).launch, "serial by default")
	assert.Equal(t, "serial", reportConfig(cfg, 2, 2).Launch)
	assert.NotContains(t, timeMethod(cfg), "-launch parallel")
	_, err = parseFlags([]string{"-launch", "threads"}, io.Discard)
	assert.ErrorContains(t, err, "unknown launch (allowed: serial, parallel, workers)")
}

// -launch workers: every GPU's graph is launched once per replay through
// nvls's team (team.Run on every local rank), the header and the JSON say
// so.
func TestGraphLaunchWorkers(t *testing.T) {
	r := newRig(t, 0, "-n", "4", "-w", "1", "-G", "3", "-launch", "workers")
	require.Equal(t, "workers", scheduleOf(r.cfg).launch)
	require.NotNil(t, r.n.workers, "nvls's team is up")
	team, calls := r.n.workers, 0
	r.n.workers = func(fn func(r int) error) error { calls++; return team(fn) }
	launches := len(r.node.CallsOf("cuGraphLaunch"))
	r.timing(t, &counting{runner: r.ours})
	assert.Equal(t, 2*(1+3), len(r.node.CallsOf("cuGraphLaunch"))-launches, "1 untimed and 3 timed replays on each of 2 GPUs")
	assert.Equal(t, 1+3, calls, "every replay through the team")
	r.n.workers = team
	assert.Contains(t, timeMethod(r.cfg), "on that GPU's team worker (team.Run: a thread per GPU, spinning between jobs; -launch workers)")
	assert.Equal(t, "workers", reportConfig(r.cfg, 2, 2).Launch)

	var ran [2]atomic.Int32
	require.NoError(t, r.n.workers(func(l int) error { ran[l].Add(1); return nil }))
	assert.Equal(t, []int32{1, 1}, []int32{ran[0].Load(), ran[1].Load()}, "every local rank once")
}
