package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// series is one line of the plot: one implementation, one variant.
type series struct {
	label string
	get   func(r *Row) *Figures
	color color.Color
	dash  []vg.Length
}

func plotSeries(rep *Report) []series {
	ours := "nvls " + rep.Transport.Name
	var nccl string
	if rep.NCCL != nil {
		nccl = "NCCL " + rep.NCCL.VersionText
	}
	if rep.Config.Graph {
		ours += " (graph)"
		if nccl != "" {
			nccl += " (graph)"
		}
	}
	blue := color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange := color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	dashed := []vg.Length{vg.Points(4), vg.Points(3)}
	s := []series{
		{label: ours + " out-of-place", get: func(r *Row) *Figures { return r.OutOfPlace }, color: blue},
		{label: ours + " in-place", get: func(r *Row) *Figures { return r.InPlace }, color: blue, dash: dashed},
	}
	if nccl != "" {
		s = append(s,
			series{label: nccl + " out-of-place", get: func(r *Row) *Figures { return r.NCCLOutOfPlace }, color: orange},
			series{label: nccl + " in-place", get: func(r *Row) *Figures { return r.NCCLInPlace }, color: orange, dash: dashed})
	}
	return s
}

// sizeTicks labels a log-scaled byte axis with powers of two (8, 1K, 1M, 1G).
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= 0 {
		return nil
	}
	k0, k1 := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
	step := max(1, (k1-k0+11)/12)
	var ticks []plot.Tick
	for k := k0; k <= k1; k++ {
		v := math.Ldexp(1, k)
		if v < lo || v > hi {
			continue
		}
		t := plot.Tick{Value: v}
		if (k-k0)%step == 0 {
			t.Label = shortSize(uint64(v))
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func shortSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%gG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%gM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%gK", float64(n)/(1<<10))
	}
	return fmt.Sprint(n)
}

// writePlot draws busbw (GB/s) and time (us) against size, both axes log
// scaled, one line per implementation and variant, and saves it as SVG or
// PNG by path's extension.
func writePlot(rep *Report, path string) error {
	if len(rep.Rows) == 0 {
		return fmt.Errorf("plot: no results to plot")
	}
	title := fmt.Sprintf("%s %s %s, %d GPUs", rep.Config.Coll, rep.Config.Type, rep.Config.RedOp, rep.Config.NGPUs)
	if rep.Config.Coll == string(collBarrier) {
		title = fmt.Sprintf("barrier, %d GPUs", rep.Config.NGPUs)
	}
	if len(rep.Machine.GPUs) > 0 {
		title += ", " + rep.Machine.GPUs[0].Name
	}
	if rep.Machine.Simulated {
		title += " (SIMULATED: not hardware times)"
	}
	var panels []*plot.Plot
	for _, metric := range []struct {
		name, unit string
		get        func(*Figures) float64
	}{
		{"bus bandwidth", "busbw (GB/s)", func(f *Figures) float64 { return f.BusBW }},
		{"time", "time per collective (us)", func(f *Figures) float64 { return f.TimeUS }},
	} {
		p := plot.New()
		p.Title.Text = title + ": " + metric.name
		p.X.Label.Text = "size (bytes)"
		p.Y.Label.Text = metric.unit
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker = sizeTicks{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		lines := 0
		for _, s := range plotSeries(rep) {
			var xys plotter.XYs
			for i := range rep.Rows {
				r := &rep.Rows[i]
				f := s.get(r)
				if f == nil || r.Size == 0 {
					continue
				}
				if v := metric.get(f); v > 0 && !math.IsInf(v, 0) {
					xys = append(xys, plotter.XY{X: float64(r.Size), Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			l.Color, l.Dashes, l.Width = s.color, s.dash, vg.Points(1.5)
			pts.Color, pts.Shape = s.color, draw.CircleGlyph{}
			p.Add(l, pts)
			p.Legend.Add(s.label, l, pts)
			lines++
		}
		if lines > 0 {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return fmt.Errorf("plot: nothing positive to plot on log axes (barrier has no size axis)")
	}
	w, h := 9*vg.Inch, vg.Length(len(panels))*4.5*vg.Inch
	var canvas vg.CanvasWriterTo
	var dc draw.Canvas
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		c := vgsvg.New(w, h)
		canvas, dc = c, draw.New(c)
	case ".png":
		c := vgimg.New(w, h)
		canvas, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	default:
		return fmt.Errorf("plot: %s: unknown format (allowed: .svg, .png)", path)
	}
	grid := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		grid[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(6), PadY: vg.Points(12), PadLeft: vg.Points(6), PadRight: vg.Points(12)}
	cs := plot.Align(grid, tiles, dc)
	for i, p := range panels {
		p.Draw(cs[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := canvas.WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("plot: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
