package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The table is nccl-tests' (all_reduce_perf's) layout, column for column:
// "%12li  %12li  %8s  %6s  %6i" for size, count, type, redop and root, then
// for out-of-place and in-place "  %7s  %6.2f  %6.2f  %5s" for time (us),
// algbw, busbw (GB/s) and #wrong. With a copy roofline, nvls's groups end
// with one more column: its bandwidth as a percentage of the roofline
// (roofline.go). With NCCL alongside, two more groups of the same width
// follow: NCCL's time, busbw, #wrong and the ratio NCCL time / ours; and
// two more with NCCL on symmetric memory, where it ran.

const (
	preambleWidth = 52
	groupWidth    = 32
	roofWidth     = 7
)

// columns is what the table shows beside nccl-tests' columns.
type columns struct {
	roofline      bool // nvls's "roof" column
	nccl, ncclSym bool // NCCL's groups, NCCL symmetric's
}

// columnsOf is the table of rep.
func columnsOf(rep *Report) columns {
	return columns{roofline: rep.Roofline != nil, nccl: rep.NCCL != nil, ncclSym: rep.NCCLSym != nil}
}

// ours is the width of each of nvls's groups.
func (c columns) ours() int {
	if c.roofline {
		return groupWidth + roofWidth
	}
	return groupWidth
}

// theirs is NCCL's groups that the table shows, with their titles.
func (c columns) theirs() (kinds []runnerKind, titles []string) {
	if c.nccl {
		kinds, titles = append(kinds, kindNCCL), append(titles, "NCCL")
	}
	if c.ncclSym {
		kinds, titles = append(kinds, kindNCCLSym), append(titles, "NCCL symmetric")
	}
	return kinds, titles
}

// formatTime is nccl-tests' time column: 2 decimals below 100 us, 1 below
// 10 ms, none above, in 7 characters.
func formatTime(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 100:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}

// formatWrong is nccl-tests' #wrong column (%5g), N/A when unchecked.
func formatWrong(w int64) string {
	if w < 0 {
		return fmt.Sprintf("%5s", "N/A")
	}
	return fmt.Sprintf("%5s", strconv.FormatFloat(float64(w), 'g', -1, 64))
}

func formatBW(bw float64, ok bool) string {
	if !ok {
		return fmt.Sprintf("%6s", "N/A")
	}
	// Two decimals as nccl-tests prints them, fewer from 1000 on (B200's
	// bus bandwidth, a large ratio) so that the column keeps its width.
	switch {
	case bw >= 99999.5:
		return fmt.Sprintf("%6.0e", bw)
	case bw >= 9999.95:
		return fmt.Sprintf("%6.0f", bw)
	case bw >= 999.995:
		return fmt.Sprintf("%6.1f", bw)
	}
	return fmt.Sprintf("%6.2f", bw)
}

// center puts s in the middle of a field of width w.
func center(s string, w int) string {
	if len(s) >= w {
		return s
	}
	l := (w - len(s)) / 2
	return strings.Repeat(" ", l) + s + strings.Repeat(" ", w-len(s)-l)
}

func ralign(s string, w int) string {
	if len(s) >= w {
		return s
	}
	return strings.Repeat(" ", w-len(s)) + s
}

// tableHeader writes the three header lines.
func tableHeader(w io.Writer, c columns) {
	// nccl-tests' first header line, to the character.
	l1 := "#" + strings.Repeat(" ", 62) + "out-of-place" + strings.Repeat(" ", 23) + "in-place" + strings.Repeat(" ", 10)
	if c.roofline {
		l1 = "#" + strings.Repeat(" ", preambleWidth-1) + center("out-of-place", c.ours()) + center("in-place", c.ours())
	}
	l2 := "#       size         count      type   redop    root"
	l3 := "#        (B)    (elements)                          "
	for range 2 {
		l2 += ralign("time", 9) + ralign("algbw", 8) + ralign("busbw", 8) + ralign("#wrong", 7)
		l3 += ralign("(us)", 9) + ralign("(GB/s)", 8) + ralign("(GB/s)", 8) + strings.Repeat(" ", 7)
		if c.roofline {
			l2 += ralign("roof", roofWidth)
			l3 += ralign("(%)", roofWidth)
		}
	}
	_, titles := c.theirs()
	for _, t := range titles {
		l1 += center(t+" out-of-place", groupWidth) + center(t+" in-place", groupWidth)
		for range 2 {
			l2 += ralign("time", 9) + ralign("busbw", 8) + ralign("#wrong", 7) + ralign("ratio", 8)
			l3 += ralign("(us)", 9) + ralign("(GB/s)", 8) + strings.Repeat(" ", 7) + ralign("", 8)
		}
	}
	fmt.Fprintln(w, l1)
	fmt.Fprintln(w, l2)
	fmt.Fprintln(w, l3)
}

// tableRow writes one size's line.
func tableRow(w io.Writer, r *Row, c columns) {
	var b strings.Builder
	fmt.Fprintf(&b, "%12d  %12d  %8s  %6s  %6d", r.Size, r.Count, r.Type, r.RedOp, r.Root)
	hasBW := movesData(r.Coll)
	for _, f := range []*Figures{r.OutOfPlace, r.InPlace} {
		if f == nil {
			b.WriteString(strings.Repeat(" ", c.ours()))
			continue
		}
		fmt.Fprintf(&b, "  %s  %s  %s  %s", formatTime(f.TimeUS), formatBW(f.AlgBW, hasBW), formatBW(f.BusBW, hasBW), formatWrong(f.Wrong))
		if c.roofline {
			b.WriteString(formatRoof(f.RooflineFraction, hasBW))
		}
	}
	kinds, _ := c.theirs()
	for _, k := range kinds {
		g := r.group(k)
		for i, f := range []*Figures{*g.out, *g.in} {
			if f == nil {
				b.WriteString(strings.Repeat(" ", groupWidth))
				continue
			}
			ratio := *g.ratioOut
			if i == 1 {
				ratio = *g.ratioIn
			}
			fmt.Fprintf(&b, "  %s  %s  %s  %s", formatTime(f.TimeUS), formatBW(f.BusBW, hasBW), formatWrong(f.Wrong), formatBW(ratio, ratio > 0))
		}
	}
	fmt.Fprintln(w, b.String())
}

// formatRoof is the roof column: the fraction as a percentage.
func formatRoof(frac float64, ok bool) string {
	if !ok || frac <= 0 {
		return ralign("N/A", roofWidth)
	}
	return fmt.Sprintf("%*.1f", roofWidth, 100*frac)
}

// tableFooter is nccl-tests' closing lines: wrong values in total and the
// average bus bandwidth over every size and both variants.
func tableFooter(w io.Writer, rep *Report) {
	s := rep.Summary
	ok := "OK"
	if s.Wrong > 0 {
		ok = "FAILED"
	}
	if !movesData(rep.Config.Coll) {
		fmt.Fprintf(w, "# Out of bounds values : N/A (a %s moves no data)\n", rep.Config.Coll)
	} else if s.Checked {
		fmt.Fprintf(w, "# Out of bounds values : %d %s\n", s.Wrong, ok)
	} else {
		fmt.Fprintf(w, "# Out of bounds values : N/A (-c 0)\n")
	}
	if movesData(rep.Config.Coll) {
		fmt.Fprintf(w, "# Avg bus bandwidth    : %g \n", roundTo(s.AvgBusBW, 3))
		if s.NCCLAvgBusBW > 0 {
			fmt.Fprintf(w, "# NCCL avg bus bandwidth: %g \n", roundTo(s.NCCLAvgBusBW, 3))
		}
		if s.NCCLSymAvgBusBW > 0 {
			fmt.Fprintf(w, "# NCCL symmetric avg bus bandwidth: %g \n", roundTo(s.NCCLSymAvgBusBW, 3))
		}
	}
	fmt.Fprintln(w, "#")
}
