package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	if nccl != "" && rep.NCCLSym != nil {
		green := color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
		sym := strings.Replace(nccl, rep.NCCL.VersionText, rep.NCCL.VersionText+" symmetric", 1)
		s = append(s,
			series{label: sym + " out-of-place", get: func(r *Row) *Figures { return r.NCCLSymOutOfPlace }, color: green},
			series{label: sym + " in-place", get: func(r *Row) *Figures { return r.NCCLSymInPlace }, color: green, dash: dashed})
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

// logTicks labels a log-scaled axis readably however many decades it
// spans (gonum's LogTicks labels powers of ten only: over 100-3000 us,
// one label): 1, 2 and 5 of each decade over up to three decades (100,
// 200, 500, 1000, 2000), every power of ten over more, every other one
// past eight; unlabelled ticks at 1..9 x 10^k between. A range too narrow
// for two labels gets gonum's linear ticks.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi < lo {
		return nil
	}
	decades := math.Log10(hi / lo)
	mantissas, every := []int{1, 2, 5}, 1
	switch {
	case decades > 8:
		mantissas, every = []int{1}, 2
	case decades > 3:
		mantissas = []int{1}
	}
	k0, k1 := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	var ticks []plot.Tick
	labels := 0
	for k := k0; k <= k1; k++ {
		for m := 1; m <= 9; m++ {
			v, _ := strconv.ParseFloat(fmt.Sprintf("%de%d", m, k), 64) // exact: 3e-1, not 3*0.1
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if slices.Contains(mantissas, m) && (k-k0)%every == 0 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
				labels++
			}
			ticks = append(ticks, t)
		}
	}
	if labels < 2 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
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

// metric is one panel of the plot: one figure against size.
type metric struct {
	name, unit string
	get        func(*Figures) float64
}

var metrics = []metric{
	{"bus bandwidth", "busbw (GB/s)", func(f *Figures) float64 { return f.BusBW }},
	{"time", "time per collective (us)", func(f *Figures) float64 { return f.TimeUS }},
}

// writePlot draws busbw (GB/s) and time (us) against size, both axes log
// scaled, one line per implementation and variant, and saves it as SVG or
// PNG by path's extension.
func writePlot(rep *Report, path string) error {
	if len(rep.Rows) == 0 {
		return fmt.Errorf("plot: no results to plot")
	}
	var panels []*plot.Plot
	for _, m := range metrics {
		p, err := drawPanel(rep, m)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		if p != nil {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return fmt.Errorf("plot: nothing positive to plot on log axes (barrier has no size axis)")
	}
	return savePanels(panels, path)
}

// plotTitle names the collective, the run and the GPU.
func plotTitle(rep *Report) string {
	gpus := fmt.Sprintf("%d GPUs", rep.Config.NGPUs)
	if rep.Config.SharedDevices {
		gpus = fmt.Sprintf("%d ranks on %d GPU(s)", rep.Config.NGPUs, rep.Config.Devices)
	}
	title := fmt.Sprintf("%s %s %s, %s", rep.Config.Coll, rep.Config.Type, rep.Config.RedOp, gpus)
	if !movesData(rep.Config.Coll) {
		title = fmt.Sprintf("%s, %s", rep.Config.Coll, gpus)
	}
	if len(rep.Machine.GPUs) > 0 {
		title += ", " + rep.Machine.GPUs[0].Name
	}
	if rep.Machine.Simulated {
		title += " (SIMULATED: not hardware times)"
	}
	return title
}

// drawPanel is m against size, a line per series; nil when no point is
// positive (nothing goes on log axes).
func drawPanel(rep *Report, m metric) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = plotTitle(rep) + ": " + m.name
	p.X.Label.Text = "size (bytes)"
	p.Y.Label.Text = m.unit
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.Y.Tick.Marker = logTicks{}
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
			if v := m.get(f); v > 0 && !math.IsInf(v, 0) {
				xys = append(xys, plotter.XY{X: float64(r.Size), Y: v})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color, l.Dashes, l.Width = s.color, s.dash, vg.Points(1.5)
		pts.Color, pts.Shape = s.color, draw.CircleGlyph{}
		p.Add(l, pts)
		p.Legend.Add(s.label, l, pts)
		lines++
	}
	if lines == 0 {
		return nil, nil
	}
	return p, nil
}

// savePanels stacks the panels and writes them to path (SVG or PNG).
func savePanels(panels []*plot.Plot, path string) error {
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
