package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func plotReport() *Report {
	rep := &Report{Config: Config{Coll: "allreduce", Type: "float", RedOp: "sum", NGPUs: 4},
		Transport: Transport{Name: "unicast"}, NCCL: &NCCLInfo{VersionText: "2.28.3"},
		Machine: Machine{GPUs: []GPU{{Name: "NVIDIA H200"}}}}
	for i, s := 0, uint64(8); s <= 1<<30; s, i = s*4, i+1 {
		us := 8 + float64(s)/300e3
		alg, bus := bandwidth(s, us/1e6, collAllReduce.BusFactor(4))
		f := &Figures{TimeUS: us, AlgBW: alg, BusBW: bus}
		g := &Figures{TimeUS: us * 1.5, AlgBW: alg / 1.5, BusBW: bus / 1.5}
		rep.Rows = append(rep.Rows, Row{Coll: "allreduce", Size: s, OutOfPlace: f, InPlace: f, NCCLOutOfPlace: g, NCCLInPlace: g})
	}
	return rep
}

func TestPlotSVGAndPNG(t *testing.T) {
	dir := t.TempDir()
	rep := plotReport()
	svg := filepath.Join(dir, "p.svg")
	require.NoError(t, writePlot(rep, svg))
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(b), "<svg")
	assert.Contains(t, string(b), "NCCL 2.28.3 out-of-place")
	assert.Contains(t, string(b), "nvls unicast in-place")
	assert.Contains(t, string(b), "busbw (GB/s)")

	pngPath := filepath.Join(dir, "p.png")
	require.NoError(t, writePlot(rep, pngPath))
	b, err = os.ReadFile(pngPath)
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 500)
	assert.Greater(t, img.Bounds().Dy(), 500)
}

func TestPlotRefusesWhatItCannotDraw(t *testing.T) {
	dir := t.TempDir()
	assert.ErrorContains(t, writePlot(&Report{}, filepath.Join(dir, "a.svg")), "no results")
	rep := plotReport()
	assert.ErrorContains(t, writePlot(rep, filepath.Join(dir, "a.pdf")), "unknown format")
	// A barrier row has no size: nothing goes on log axes.
	bar := &Report{Config: Config{Coll: "barrier"}, Rows: []Row{{Coll: "barrier", OutOfPlace: &Figures{TimeUS: 3}}}}
	assert.ErrorContains(t, writePlot(bar, filepath.Join(dir, "b.svg")), "nothing positive")
}

func TestSizeTicks(t *testing.T) {
	ticks := sizeTicks{}.Ticks(8, 1<<30)
	var labels []string
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	assert.Contains(t, labels, "8")
	assert.Contains(t, labels, "1G")
	assert.LessOrEqual(t, len(labels), 14)
	assert.Nil(t, sizeTicks{}.Ticks(0, 10))
}

// The time and bandwidth axes: readable labels over one or two decades
// (issue 15, item 11: 100-3000 us had one label).
func TestLogTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (logTicks{}).Ticks(lo, hi) {
			assert.True(t, tk.Value >= lo && tk.Value <= hi, "tick %v outside [%v, %v]", tk.Value, lo, hi)
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	assert.Equal(t, []string{"100", "200", "500", "1000", "2000"}, labels(100, 3000))
	assert.Equal(t, []string{"200", "500", "1000", "2000"}, labels(120, 3000))
	assert.Equal(t, []string{"0.5", "1", "2", "5", "10", "20", "50", "100", "200"}, labels(0.5, 400))
	assert.Equal(t, []string{"10", "100", "1000", "10000"}, labels(8, 40000))
	assert.Equal(t, []string{"0.001", "0.1", "10", "1000", "100000"}, labels(1e-3, 1e6))
	assert.Equal(t, []string{"1e-06", "0.0001", "0.01", "1", "100", "10000", "1e+06"}, labels(1e-6, 1e6))
	assert.GreaterOrEqual(t, len(labels(120, 180)), 2, "a narrow range still gets labels")
	assert.Nil(t, (logTicks{}).Ticks(0, 10))
}

// The drawn time axis carries those labels.
func TestPlotTimeAxisLabels(t *testing.T) {
	rep := &Report{Config: Config{Coll: "allreduce", Type: "float", RedOp: "sum", NGPUs: 2}, Transport: Transport{Name: "unicast"}}
	for i, s := range []uint64{1 << 20, 4 << 20, 16 << 20, 64 << 20} {
		us := 100 + float64(i)*950 // 100 .. 2950 us
		alg, bus := bandwidth(s, us/1e6, collAllReduce.BusFactor(2))
		f := &Figures{TimeUS: us, AlgBW: alg, BusBW: bus}
		rep.Rows = append(rep.Rows, Row{Coll: "allreduce", Size: s, OutOfPlace: f, InPlace: f})
	}
	svg := filepath.Join(t.TempDir(), "t.svg")
	require.NoError(t, writePlot(rep, svg))
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	for _, l := range []string{">200<", ">500<", ">1000<", ">2000<"} {
		assert.True(t, strings.Contains(string(b), l), "no tick label %s on the time axis", l)
	}
}

// NCCL on symmetric memory is a series of its own; shared GPUs are in the
// title.
func TestPlotSymmetricAndShared(t *testing.T) {
	rep := plotReport()
	rep.Config.Graph = true
	rep.NCCLSym = &NCCLSymInfo{}
	for i := range rep.Rows {
		rep.Rows[i].NCCLSymOutOfPlace = rep.Rows[i].OutOfPlace
	}
	var labels []string
	for _, s := range plotSeries(rep) {
		labels = append(labels, s.label)
	}
	assert.Equal(t, []string{"nvls unicast (graph) out-of-place", "nvls unicast (graph) in-place",
		"NCCL 2.28.3 (graph) out-of-place", "NCCL 2.28.3 (graph) in-place",
		"NCCL 2.28.3 symmetric (graph) out-of-place", "NCCL 2.28.3 symmetric (graph) in-place"}, labels)
	svg := filepath.Join(t.TempDir(), "s.svg")
	require.NoError(t, writePlot(rep, svg))
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(b), "NCCL 2.28.3 symmetric (graph) out-of-place")

	assert.Equal(t, "allreduce float sum, 4 GPUs, NVIDIA H200", plotTitle(rep))
	rep.Config.Devices, rep.Config.SharedDevices = 1, true
	assert.Equal(t, "allreduce float sum, 4 ranks on 1 GPU(s), NVIDIA H200", plotTitle(rep))
}
