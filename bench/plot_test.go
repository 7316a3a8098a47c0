package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
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
		alg, bus := bandwidth("allreduce", s, us/1e6, 4)
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
