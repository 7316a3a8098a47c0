package grow

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Bytes formats a byte count with a binary unit.
func Bytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// WriteTable writes one line per series: steps, final size, total time,
// mean and largest step time, peak memory and the peak over the final
// size.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "method\tmode\tsteps\tfinal\ttotal ms\tmean ms/step\tmax ms/step\tpeak mem\tpeak/final\tchecks\tmoves\t\n")
	for _, s := range r.Series {
		var longest time.Duration
		for _, st := range s.Steps {
			longest = max(longest, st.Time)
		}
		mean := time.Duration(0)
		if len(s.Steps) > 0 {
			mean = s.Total / time.Duration(len(s.Steps))
		}
		ratio := 0.0
		if f := s.Final(); f > 0 {
			ratio = float64(s.Peak) / float64(f)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.2f\t%d\t%d\t\n",
			s.Method, s.Mode, len(s.Steps), Bytes(s.Final()), ms(s.Total), ms(mean), ms(longest), Bytes(s.Peak), ratio, s.Checked, s.Moves)
	}
	return tw.Flush()
}

// WriteSteps writes, for each mode, one line per size with each method's
// step time (ms) and memory in use.
func (r Result) WriteSteps(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, mode := range r.Config.Modes {
		var series []Series
		for _, s := range r.Series {
			if s.Mode == mode {
				series = append(series, s)
			}
		}
		if len(series) == 0 {
			continue
		}
		fmt.Fprintf(tw, "mode %s\t", mode)
		for _, s := range series {
			fmt.Fprintf(tw, "%s ms\t%s mem\t", s.Method, s.Method)
		}
		fmt.Fprintln(tw)
		for i := range series[0].Steps {
			fmt.Fprintf(tw, "%s\t", Bytes(series[0].Steps[i].Size))
			for _, s := range series {
				if i < len(s.Steps) {
					fmt.Fprintf(tw, "%s\t%s\t", ms(s.Steps[i].Time), Bytes(s.Steps[i].Used))
				} else {
					fmt.Fprintf(tw, "\t\t")
				}
			}
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// minPlotTime keeps zero step times off a log axis.
const minPlotTime = 1e-4 // ms

// Plot draws the time per step (ms, log scale) against the size reached
// (MiB, log scale), one line per method and mode, and saves it to path in
// the format its extension names (.svg, .png, .pdf, ...).
func (r Result) Plot(path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".svg", ".png", ".pdf", ".eps", ".jpg", ".jpeg", ".tif", ".tiff":
	default:
		return fmt.Errorf("grow: plot: unknown image format %q (use .svg or .png)", ext)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Growing a buffer on %s (device %d, %s)", r.DeviceName, r.Device, r.Driver)
	p.X.Label.Text = "size after the step (MiB)"
	p.Y.Label.Text = "time per step (ms)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	for i, s := range r.Series {
		xys := make(plotter.XYs, len(s.Steps))
		for k, st := range s.Steps {
			xys[k].X = float64(st.Size) / (1 << 20)
			xys[k].Y = math.Max(float64(st.Time)/float64(time.Millisecond), minPlotTime)
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("grow: plot %s/%s: %w", s.Method, s.Mode, err)
		}
		c := plotutil.Color(methodIndex(s.Method, i))
		l.Color, pts.Color = c, c
		pts.Shape = plotutil.Shape(methodIndex(s.Method, i))
		if s.Mode == Doubling {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(fmt.Sprintf("%s (%s)", s.Method, s.Mode), l, pts)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("grow: save plot: %w", err)
	}
	return nil
}

func methodIndex(m Method, fallback int) int {
	switch m {
	case Growable:
		return 0
	case Realloc:
		return 1
	case Managed:
		return 2
	}
	return 3 + fallback
}
