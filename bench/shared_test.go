package main

// -ranks (ranks that share GPUs) and the copy roofline (issue 13).

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda/sim"
)

// runOnSim runs nvls-bench on a simulated node of devices GPUs that the
// test holds (the solo world otherwise: the fallback to the simulated
// node is not needed, so it runs the same where a driver is installed).
func runOnSim(t *testing.T, devices int, args ...string) (code int, stdout, stderr string, node *sim.Node) {
	t.Helper()
	node = newSimNode(sim.Config{Devices: devices, MemoryPerDevice: 2 << 30})
	t.Cleanup(func() { assert.NoError(t, node.Close()) })
	cfg, err := parseFlags(args, io.Discard)
	require.NoError(t, err)
	var o, e bytes.Buffer
	code = bench(cfg, simWorld{node: node}, newOutput(&o, &e))
	return code, o.String(), e.String(), node
}

func TestRanksOnGPUs(t *testing.T) {
	for _, c := range []struct {
		args  string
		count int
		want  []int
	}{
		{"", 4, []int{0, 1, 2, 3}},
		{"-g 2", 4, []int{0, 1}},
		{"-ranks 4", 1, []int{0, 0, 0, 0}},
		{"-ranks 2", 4, []int{0, 1}},
		{"-ranks 8 -g 2", 8, []int{0, 1, 0, 1, 0, 1, 0, 1}},
		{"-ranks 5 -g 2", 2, []int{0, 1, 0, 1, 0}},
		{"-ranks 3", 2, []int{0, 1, 0}},
		{"-ranks 2 -g 2", 2, []int{0, 1}},
	} {
		cfg, err := parseFlags(strings.Fields(c.args), io.Discard)
		require.NoError(t, err, c.args)
		got, err := solo{}.devices(cfg, c.count)
		require.NoError(t, err, c.args)
		assert.Equal(t, c.want, got, "%q on %d GPUs", c.args, c.count)
	}
	cfg, err := parseFlags(strings.Fields("-ranks 4 -g 2"), io.Discard)
	require.NoError(t, err)
	_, err = solo{}.devices(cfg, 1)
	assert.EqualError(t, err, "-g 2: only 1 GPUs on this machine")
}

// Four ranks on one simulated GPU: the header and the JSON say so, the
// team is unicast, every rank is on device 0, the roofline is measured
// and every row has its fraction of it, from the collective's traffic.
func TestSharedRanksOnOneGPU(t *testing.T) {
	withRefColl(t, 0)
	js := filepath.Join(t.TempDir(), "s.json")
	code, out, errOut, _ := runOnSim(t, 1, "-ranks", "4", "-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "# nvls-bench allreduce: nRanks 4 nGpus 1 minBytes 8 ")
	assert.Contains(t, out, "\n# Shared GPUs (-ranks 4): 4 ranks on 1 GPU(s), rank r on GPU r mod 1: ")
	assert.Contains(t, out, "times are NOT a node's\n")
	assert.Contains(t, out, "\n# Copy roofline (20 copies of 1 MiB, cuMemcpyDtoDAsync on every GPU at once, bytes read + written): device 0 (ranks [0 1 2 3]) ")
	assert.Contains(t, out, "#wrong   roof     time")
	rep := readReport(t, js)
	assert.Equal(t, Config{NGPUs: 4, Devices: 1, SharedDevices: true}, Config{NGPUs: rep.Config.NGPUs, Devices: rep.Config.Devices, SharedDevices: rep.Config.SharedDevices})
	assert.Equal(t, "unicast", rep.Transport.Name)
	assert.Contains(t, rep.Transport.Reason, "shared devices")
	require.Len(t, rep.Machine.GPUs, 4)
	for r, g := range rep.Machine.GPUs {
		assert.Equal(t, 0, g.Ordinal, "rank %d", r)
	}
	rl := rep.Roofline
	require.NotNil(t, rl)
	assert.Equal(t, uint64(simRooflineBytes), rl.Bytes)
	require.Len(t, rl.GPUs, 1)
	assert.Equal(t, []int{0, 1, 2, 3}, rl.GPUs[0].Ranks)
	assert.Greater(t, rl.TotalGBs, 0.0)
	assert.Equal(t, rl.GPUs[0].GBs, rl.TotalGBs)
	require.Len(t, rep.Rows, 5) // 8 B to 32 KiB by 8
	for _, r := range rep.Rows {
		for _, f := range []*Figures{r.OutOfPlace, r.InPlace} {
			assert.Equal(t, int64(0), f.Wrong)
			// all-reduce on 4 ranks: 4 x size read, 4 x size written.
			assert.InDelta(t, float64(8*r.Size)/1e3/f.TimeUS, f.EffBW, 1e-9*f.EffBW, "size %d", r.Size)
			assert.InDelta(t, f.EffBW/rl.TotalGBs, f.RooflineFraction, 1e-12, "size %d", r.Size)
		}
	}
	// The table's column is the percentage.
	last := rep.Rows[len(rep.Rows)-1].InPlace
	assert.Contains(t, out, formatRoof(last.RooflineFraction, true)+"\n")
}

// Eight ranks on two GPUs (rank r on GPU r mod 2), with package
// collectives and CUDA graphs: the checks pass and the roofline sums both
// GPUs'.
func TestSharedRanksLibrary(t *testing.T) {
	js := filepath.Join(t.TempDir(), "l.json")
	code, out, errOut, _ := runOnSim(t, 2, "-ranks", "8", "-g", "2", "-b", "8", "-e", "64K", "-f", "32", "-n", "2", "-w", "1", "-graph", "-d", "bf16", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	rep := readReport(t, js)
	assert.True(t, rep.Config.SharedDevices)
	require.Len(t, rep.Machine.GPUs, 8)
	for r, g := range rep.Machine.GPUs {
		assert.Equal(t, r%2, g.Ordinal, "rank %d", r)
	}
	require.NotNil(t, rep.Roofline)
	require.Len(t, rep.Roofline.GPUs, 2)
	assert.Equal(t, []int{0, 2, 4, 6}, rep.Roofline.GPUs[0].Ranks)
	assert.Equal(t, []int{1, 3, 5, 7}, rep.Roofline.GPUs[1].Ranks)
	assert.InDelta(t, rep.Roofline.GPUs[0].GBs+rep.Roofline.GPUs[1].GBs, rep.Roofline.TotalGBs, 1e-9)
	for _, r := range rep.Rows {
		assert.Equal(t, int64(0), r.OutOfPlace.Wrong, "size %d", r.Size)
		assert.Equal(t, int64(0), r.InPlace.Wrong, "size %d", r.Size)
		assert.Greater(t, r.OutOfPlace.RooflineFraction, 0.0)
	}
}

// NCCL cannot run ranks that share a GPU: refused once the GPUs are
// known (here one, without -g), saying why.
func TestSharedRanksRefuseNCCL(t *testing.T) {
	withRefColl(t, 0)
	code, out, errOut, _ := runOnSim(t, 1, "-ranks", "2", "-compare", "nccl", "-b", "8", "-e", "8")
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Equal(t, "nvls-bench: -compare nccl: -ranks 2 on 1 GPU(s): ranks share GPUs, and "+noNCCLShared+"\n", errOut)
}

// -roofline asks for the column on any run, -roofline=false leaves it
// out with shared GPUs; a barrier gets none.
func TestRooflineFlag(t *testing.T) {
	withRefColl(t, 0)
	for _, c := range []struct {
		devices int
		args    string
		want    bool
	}{
		{2, "-roofline", true},
		{2, "", false},
		{1, "-ranks 2 -roofline=false", false},
		{1, "-ranks 2 -coll barrier", false},
	} {
		js := filepath.Join(t.TempDir(), "r.json")
		args := append(strings.Fields(c.args), "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-json", js)
		code, out, errOut, _ := runOnSim(t, c.devices, args...)
		require.Equal(t, exitOK, code, "%s\nstdout:\n%s\nstderr:\n%s", c.args, out, errOut)
		rep := readReport(t, js)
		assert.Equal(t, c.want, rep.Roofline != nil, c.args)
		assert.Equal(t, c.want, strings.Contains(out, "# Copy roofline"), c.args)
		assert.Equal(t, c.want, strings.Contains(out, " roof "), c.args)
	}
}

// The byte counts of issue 13: every input read once, every output
// written once, for a row of size bytes (nccl-tests' max(send, recv)).
func TestTraffic(t *testing.T) {
	const n, size = 4, 1 << 20
	for _, c := range []struct {
		coll     string
		traffic  func(int, uint64) (uint64, uint64)
		rd, wr   uint64
		sendRecv [2]uint64 // one rank's send and recv bytes
	}{
		// all-reduce: n x size read, n x size written.
		{"allreduce", trafficAllReduce, n * size, n * size, [2]uint64{size, size}},
		// broadcast: the root's size read, n x size written.
		{"broadcast", trafficSpread, size, n * size, [2]uint64{size, size}},
		// all-gather: n x sendsize read, n x n x sendsize written.
		{"allgather", trafficSpread, n * (size / n), n * n * (size / n), [2]uint64{size / n, size}},
		// reduce-scatter: n x sendsize read, n x recvsize written.
		{"reducescatter", trafficCombine, n * size, n * (size / n), [2]uint64{size, size / n}},
		// reduce: n x size read, size written.
		{"reduce", trafficCombine, n * size, size, [2]uint64{size, size}},
	} {
		rd, wr := c.traffic(n, size)
		assert.Equal(t, c.rd, rd, c.coll)
		assert.Equal(t, c.wr, wr, c.coll)
		assert.Equal(t, uint64(size), max(c.sendRecv[0], c.sendRecv[1]), "%s: the row's size is the larger buffer", c.coll)
	}
	rd, wr := collAllReduce.traffic(8, 100)
	assert.Equal(t, [2]uint64{800, 800}, [2]uint64{rd, wr})
	rd, wr = collBroadcast.traffic(8, 100)
	assert.Equal(t, [2]uint64{100, 800}, [2]uint64{rd, wr})
	assert.Nil(t, collBarrier.traffic)
	for _, c := range colls {
		assert.Equal(t, c.Moves, c.traffic != nil, "%s: a collective that moves data has a traffic", c.Name)
	}
}

func TestEfficiency(t *testing.T) {
	row := Row{OutOfPlace: &Figures{TimeUS: 100}, InPlace: &Figures{TimeUS: 0}, NCCLOutOfPlace: &Figures{TimeUS: 200}}
	op := opSpec{coll: collAllReduce, size: 1 << 20}
	row.setEfficiency(op, 2, &Roofline{TotalGBs: 100})
	// 2 ranks: 4 MiB moved in 100 us = 41.94 GB/s, 41.9 % of 100 GB/s.
	assert.InDelta(t, 4*1048576/100e-6/1e9, row.OutOfPlace.EffBW, 1e-9)
	assert.InDelta(t, row.OutOfPlace.EffBW/100, row.OutOfPlace.RooflineFraction, 1e-12)
	assert.InDelta(t, row.OutOfPlace.EffBW/2, row.NCCLOutOfPlace.EffBW, 1e-9)
	assert.Zero(t, row.InPlace.EffBW, "no time, no bandwidth")
	assert.Equal(t, "   41.9", formatRoof(row.OutOfPlace.RooflineFraction, true))
	assert.Equal(t, "    N/A", formatRoof(0, true))
	assert.Equal(t, "    N/A", formatRoof(0.5, false))

	row = Row{OutOfPlace: &Figures{TimeUS: 100}}
	row.setEfficiency(op, 2, nil)
	assert.Greater(t, row.OutOfPlace.EffBW, 0.0)
	assert.Zero(t, row.OutOfPlace.RooflineFraction, "no roofline")
	row.setEfficiency(opSpec{coll: collBarrier}, 2, &Roofline{TotalGBs: 1})
}
