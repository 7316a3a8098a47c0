package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestBusFactorsMatchNCCLTests(t *testing.T) {
	cases := []struct {
		coll string
		n    int
		want float64
	}{
		{"allreduce", 2, 1}, {"allreduce", 4, 1.5}, {"allreduce", 8, 1.75}, {"allreduce", 3, 4.0 / 3}, {"allreduce", 1, 0},
		{"reducescatter", 4, 0.75}, {"allgather", 8, 0.875}, {"allgather", 2, 0.5},
		{"broadcast", 2, 1}, {"broadcast", 8, 1}, {"reduce", 4, 1}, {"barrier", 4, 0},
	}
	for _, c := range cases {
		assert.InDelta(t, c.want, collByName(c.coll).BusFactor(c.n), 1e-15, "%s n=%d", c.coll, c.n)
	}
	// The table's entries use them.
	assert.Equal(t, 1.5, collAllReduce.BusFactor(4))
	assert.Equal(t, 1.0, collBroadcast.BusFactor(4))
	assert.Equal(t, 0.0, collBarrier.BusFactor(4))
	// Lines of nccl-tests' all_reduce_perf on 8 GPUs:
	//      1048576  262144  float  sum  -1    105.9    9.90   17.33
	//   8589934592  ...     float  sum  -1    36863  233.02  407.79
	alg, bus := bandwidth(1048576, 105.9e-6, collAllReduce.BusFactor(8))
	assert.Equal(t, "9.90", fmtf(alg))
	assert.Equal(t, "17.33", fmtf(bus))
	alg, bus = bandwidth(8589934592, 36863e-6, collAllReduce.BusFactor(8))
	assert.Equal(t, "233.02", fmtf(alg))
	assert.Equal(t, "407.79", fmtf(bus))
	// A 2-GPU broadcast line: 134217728 B in 857.57 us (printed 857.6): 156.51 both.
	alg, bus = bandwidth(134217728, 857.57e-6, collBroadcast.BusFactor(2))
	assert.Equal(t, "156.51", fmtf(alg))
	assert.Equal(t, "156.51", fmtf(bus))
	alg, bus = bandwidth(8, 0, collAllReduce.BusFactor(4))
	assert.Zero(t, alg+bus)
}

func fmtf(x float64) string { return strings.TrimSpace(formatBW(x, true)) }

// Lines of real nccl-tests output, reproduced from the same figures.
func TestRowLayoutMatchesNCCLTests(t *testing.T) {
	cases := []struct {
		line string
		row  Row
	}{
		{
			"           8             2     float     sum      -1    11.45    0.00    0.00      0    10.87    0.00    0.00      0",
			Row{Coll: "allreduce", Size: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: &Figures{TimeUS: 11.45}, InPlace: &Figures{TimeUS: 10.87}},
		},
		{
			"     1048576        262144     float     sum      -1    105.9    9.90   17.33      0    105.7    9.92   17.37      0",
			Row{Coll: "allreduce", Size: 1048576, Count: 262144, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: &Figures{TimeUS: 105.9, AlgBW: 9.90, BusBW: 17.33}, InPlace: &Figures{TimeUS: 105.7, AlgBW: 9.92, BusBW: 17.37}},
		},
		{
			"  8589934592    2147483648     float     sum      -1    36863  233.02  407.79      0    36835  233.20  408.10      0",
			Row{Coll: "allreduce", Size: 8589934592, Count: 2147483648, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: &Figures{TimeUS: 36863, AlgBW: 233.02, BusBW: 407.79}, InPlace: &Figures{TimeUS: 36835, AlgBW: 233.20, BusBW: 408.10}},
		},
		{
			"   134217728      33554432     float    none      -1   1211.2  110.81  110.81      0   1211.8  110.76  110.76    N/A",
			Row{Coll: "broadcast", Size: 134217728, Count: 33554432, Type: "float", RedOp: "none", Root: -1,
				OutOfPlace: &Figures{TimeUS: 1211.2, AlgBW: 110.81, BusBW: 110.81}, InPlace: &Figures{TimeUS: 1211.8, AlgBW: 110.76, BusBW: 110.76, Wrong: -1}},
		},
	}
	for _, c := range cases {
		var b bytes.Buffer
		tableRow(&b, &c.row, columns{})
		assert.Equal(t, c.line+"\n", b.String())
	}
	var b bytes.Buffer
	tableHeader(&b, columns{})
	assert.Equal(t, ""+
		"#                                                              out-of-place                       in-place          \n"+
		"#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"+
		"#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n",
		b.String())
}

// The whole table with NCCL columns, against a golden file.
func TestTableGolden(t *testing.T) {
	rep := &Report{Config: Config{Coll: "allreduce", Check: true}}
	rep.Rows = []Row{
		{Coll: "allreduce", Size: 8, Count: 2, Type: "bfloat16", RedOp: "sum", Root: -1,
			OutOfPlace: &Figures{TimeUS: 4.21}, InPlace: &Figures{TimeUS: 4.5},
			NCCLOutOfPlace: &Figures{TimeUS: 7.8}, NCCLInPlace: &Figures{TimeUS: 7.95},
			RatioOutOfPlace: 7.8 / 4.21, RatioInPlace: 7.95 / 4.5},
		{Coll: "allreduce", Size: 536870912, Count: 268435456, Type: "bfloat16", RedOp: "sum", Root: -1,
			OutOfPlace: &Figures{TimeUS: 2101.3, AlgBW: 255.49, BusBW: 383.24}, InPlace: &Figures{TimeUS: 2110, AlgBW: 254.44, BusBW: 381.66, Wrong: 3},
			NCCLOutOfPlace: &Figures{TimeUS: 2320.5, AlgBW: 231.36, BusBW: 347.04}, NCCLInPlace: &Figures{TimeUS: 2330.1, AlgBW: 230.41, BusBW: 345.61},
			RatioOutOfPlace: 2320.5 / 2101.3, RatioInPlace: 2330.1 / 2110},
	}
	rep.summarize()
	rep.NCCL = &NCCLInfo{}
	// Every line of the table is as wide as the header: 52 + 4 groups of 32.
	out := checkGolden(t, rep, "table_nccl.golden", 52+4*32)
	assert.Contains(t, out, "# Out of bounds values : 3 FAILED")
}

func TestFormatTime(t *testing.T) {
	for us, want := range map[float64]string{7.8: "   7.80", 99.994: "  99.99", 100: "  100.0", 9999.94: " 9999.9", 10000: "  10000", 1234567: "1234567"} {
		assert.Equal(t, want, formatTime(us), "%v", us)
	}
	assert.Equal(t, "    0", formatWrong(0))
	assert.Equal(t, "  N/A", formatWrong(-1))
	assert.Equal(t, "1e+06", formatWrong(1000000))
	assert.Equal(t, "12345", formatWrong(12345))
}

// The table with the roof column and both NCCL groups, against a golden
// file: nvls's groups are 7 wider, NCCL's keep their width.
func TestTableGoldenRooflineSymmetric(t *testing.T) {
	rep := &Report{Config: Config{Coll: "allreduce", Check: true}, Roofline: &Roofline{TotalGBs: 2600},
		NCCL: &NCCLInfo{VersionText: "2.28.3"}, NCCLSym: &NCCLSymInfo{}}
	rep.Rows = []Row{
		{Coll: "allreduce", Size: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
			OutOfPlace: &Figures{TimeUS: 4.21, Wrong: 0}, InPlace: &Figures{TimeUS: 4.5, Wrong: -1},
			NCCLOutOfPlace: &Figures{TimeUS: 7.8}, NCCLInPlace: &Figures{TimeUS: 7.95},
			NCCLSymOutOfPlace: &Figures{TimeUS: 3.1}, NCCLSymInPlace: &Figures{TimeUS: 3.3}},
		{Coll: "allreduce", Size: 268435456, Count: 67108864, Type: "float", RedOp: "sum", Root: -1,
			OutOfPlace: &Figures{TimeUS: 1650.2, AlgBW: 162.67, BusBW: 244.0}, InPlace: &Figures{TimeUS: 1660.9, AlgBW: 161.62, BusBW: 242.43},
			NCCLOutOfPlace: &Figures{TimeUS: 1802.5, BusBW: 223.38}, NCCLInPlace: &Figures{TimeUS: 1810.0, BusBW: 222.45},
			NCCLSymOutOfPlace: &Figures{TimeUS: 1702.7, BusBW: 236.47, Wrong: 5}, NCCLSymInPlace: &Figures{TimeUS: 1705.3, BusBW: 236.11}},
	}
	for i := range rep.Rows {
		op := opSpec{coll: collAllReduce, size: rep.Rows[i].Size}
		rep.Rows[i].setEfficiency(op, 4, rep.Roofline)
		rep.Rows[i].setRatios()
	}
	rep.summarize()
	out := checkGolden(t, rep, "table_roofline_symmetric.golden", 52+2*(32+7)+4*32)
	// 268435456 B on 4 ranks in 1650.2 us: 2.147 GB moved, 1301.3 GB/s, 50.05 % of 2600.
	assert.Contains(t, out, "  244.00      0   50.1   1660.9")
	assert.Equal(t, int64(5), rep.Summary.NCCLSymWrong)
}

// checkGolden writes rep's table (its columns) and compares it with
// testdata/name; the header and the rows must be width wide. It returns
// the table.
func checkGolden(t *testing.T, rep *Report, name string, width int) string {
	t.Helper()
	var b bytes.Buffer
	cols := columnsOf(rep)
	tableHeader(&b, cols)
	for i := range rep.Rows {
		tableRow(&b, &rep.Rows[i], cols)
	}
	tableFooter(&b, rep)
	golden := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String())
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n")[:5] {
		assert.Len(t, l, width, "%q", l)
	}
	return b.String()
}

// TestSlicedShapes: reduce-scatter's and all-gather's counts, sizes and
// bus factors are nccl-tests' (reduce_scatter.cu, all_gather.cu: count =
// the size's elements / ranks rounded down to whole 16-byte vectors,
// the row's size ranks x count elements, algbw over that size, busbw x
// (n-1)/n); reduce's are all-reduce's sizes with busbw = algbw.
func TestSlicedShapes(t *testing.T) {
	for _, tc := range []struct {
		c            *collective
		size, elem   uint64
		ranks        int
		count, shown uint64
		sendN, recvN uint64
	}{
		{collReduceScatter, 1 << 20, 4, 8, 32768, 1 << 20, 8 * 32768, 32768},
		{collReduceScatter, 100, 4, 3, 8, 96, 24, 8},
		{collReduceScatter, 40, 8, 3, 0, 0, 0, 0},
		{collAllGather, 1000, 2, 4, 120, 960, 120, 480},
		{collAllGather, 128, 1, 8, 16, 128, 16, 128},
		{collReduce, 1000, 4, 5, 250, 1000, 250, 250},
	} {
		count, shown := tc.c.shape(tc.size, tc.elem, tc.ranks)
		assert.Equal(t, tc.count, count, "%s %d", tc.c.Name, tc.size)
		assert.Equal(t, tc.shown, shown, "%s %d", tc.c.Name, tc.size)
		s, r := tc.c.counts(opSpec{count: count}, tc.ranks)
		assert.Equal(t, [2]uint64{tc.sendN, tc.recvN}, [2]uint64{s, r}, "%s %d", tc.c.Name, tc.size)
	}
	assert.Equal(t, 0.75, collReduceScatter.BusFactor(4))
	assert.Equal(t, 0.875, collAllGather.BusFactor(8))
	assert.Equal(t, 1.0, collReduce.BusFactor(8))
	algbw, busbw := bandwidth(1<<20, 1e-3, collAllGather.BusFactor(4))
	assert.InDelta(t, 1.048576, algbw, 1e-9)
	assert.InDelta(t, 0.786432, busbw, 1e-9)
}

// A bandwidth or ratio of 1000 and more keeps the column's width of 6.
func TestFormatBWWidth(t *testing.T) {
	for _, v := range []float64{0, 1.234, 999.99, 999.996, 1000, 1234.56, 9999.96, 12345.6, 99999.4, 123456, 1e9} {
		assert.Len(t, formatBW(v, true), 6, "%v", v)
	}
	assert.Equal(t, "999.99", formatBW(999.99, true))
	assert.Equal(t, "1234.6", formatBW(1234.56, true))
	assert.Equal(t, " 12346", formatBW(12345.6, true))
}

// A rank whose process may run on one CPU (mpirun's binding at -np <= 2)
// is named in the header; ranks with more say nothing.
func TestHeaderWarnsOfSingleCPURanks(t *testing.T) {
	cfg := &config{coll: collAllReduce, transport: "unicast", timing: "avg"}
	header := func(cpus ...int) string {
		rep := &Report{Machine: Machine{Driver: "cuda", DriverVersion: 13000}}
		for r, c := range cpus {
			rep.Machine.GPUs = append(rep.Machine.GPUs, GPU{Rank: r, Name: "GPU", Host: "h", Pid: 100 + r, CPUs: c})
		}
		var b bytes.Buffer
		writeHeader(&b, cfg, rep)
		return b.String()
	}
	assert.Contains(t, header(1, 1), "# Warning: rank(s) 0, 1 may run on 1 CPU only")
	assert.Contains(t, header(32, 1), "# Warning: rank(s) 1 may run on 1 CPU only")
	assert.NotContains(t, header(32, 32), "Warning")
	assert.NotContains(t, header(0, 0), "Warning", "0: not known (a report from before the field)")
}
