package main

// The copy roofline: what a GPU's memory moves when it does nothing but
// copy, measured in the same run as the collectives, so that a row's
// bandwidth reads as a fraction of what the GPUs could do at all.
//
// It is measured once, at one large size, not at every size of the sweep:
// a roofline is the ceiling, and at small sizes a copy's time is its
// launch latency, which says nothing of bandwidth (the table's time
// column says that). 256 MiB is far beyond the L2 cache (50 MiB on an
// H100), the size issue 13's goal is stated at, and small enough to fit
// beside a sweep's buffers. Every GPU of the process copies at once
// (cuMemcpyDtoDAsync on its first rank's stream; GPUs do not share
// memory bandwidth), rooflineCopies times after one untimed copy, timed
// with CUDA events; bytes read + written count, 2 x size per copy.
//
// A row's fraction (Figures.RooflineFraction) is the fewest bytes its
// collective must move (colls.go: traffic) over its time, over the sum of
// the rooflines of the run's GPUs: with ranks that share a GPU, that one
// GPU's memory carries every rank's traffic.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda"
)

// The roofline's copy size (hardware, and the simulated node, whose
// copies are Go's and whose times are not hardware times) and count.
const (
	rooflineBytes    = 256 << 20
	simRooflineBytes = 1 << 20
	rooflineCopies   = 20
)

// Roofline is the run's copy roofline.
type Roofline struct {
	// Method says what was measured.
	Method string `json:"method"`
	Bytes  uint64 `json:"bytes"`
	Copies int    `json:"copies"`
	// GPUs are the run's GPUs' figures; TotalGBs their sum, what a row's
	// fraction is of.
	GPUs     []GPUCopy `json:"gpus"`
	TotalGBs float64   `json:"total_gbs"`
}

// GPUCopy is one GPU's copy roofline: bytes read + written per second
// (10^9) by cuMemcpyDtoD.
type GPUCopy struct {
	// Ranks are the ranks that run on it.
	Ranks  []int   `json:"ranks"`
	Device int     `json:"device"`
	Host   string  `json:"host,omitempty"`
	GBs    float64 `json:"gbs"`
}

// rooflineMethod is Roofline.Method.
const rooflineMethod = "cuMemcpyDtoDAsync on every GPU at once, bytes read + written"

// wantRoofline reports whether the run measures the roofline: -roofline
// as given, else with ranks that share GPUs (for a collective that moves
// data).
func wantRoofline(cfg *config, n *node) bool {
	if cfg.set["roofline"] {
		return cfg.roofline
	}
	return n.shared() && cfg.coll.Moves
}

// measureRoofline measures the copy roofline of every GPU of the run
// (each process its own; every process learns every GPU's).
func measureRoofline(n *node, timeout time.Duration) (*Roofline, error) {
	bytes := uint64(rooflineBytes)
	if n.simulated() {
		bytes = simRooflineBytes
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	mine, err := copyRates(ctx, n, bytes)
	var msg []byte
	if err == nil {
		msg, err = json.Marshal(mine)
	}
	all, err := n.agree(ctx, "measuring the copy roofline", msg, err)
	if err != nil {
		return nil, fmt.Errorf("copy roofline: %w", err)
	}
	rates := map[int]float64{} // by the first rank of a GPU
	for p, m := range all {
		var theirs map[int]float64
		if err := json.Unmarshal(m, &theirs); err != nil {
			return nil, fmt.Errorf("copy roofline of process %d: %w", p, err)
		}
		for k, v := range theirs {
			rates[k] = v
		}
	}
	rl := &Roofline{Method: rooflineMethod, Bytes: bytes, Copies: rooflineCopies}
	for _, ranks := range n.gpuRanks() {
		g := n.machine.GPUs[ranks[0]]
		rl.GPUs = append(rl.GPUs, GPUCopy{Ranks: ranks, Device: g.Ordinal, Host: g.Host, GBs: rates[ranks[0]]})
		rl.TotalGBs += rates[ranks[0]]
	}
	return rl, nil
}

// copyRun is one GPU's measurement in flight.
type copyRun struct {
	r          int // the local rank whose stream and context it uses
	src, dst   cuda.DevicePtr
	start, end cuda.Event
}

// copyRates starts the copies on every GPU of this process at once,
// waits for them, and returns each GPU's rate in GB/s by the run's rank
// of its first local rank.
func copyRates(ctx context.Context, n *node, bytes uint64) (map[int]float64, error) {
	var runs []*copyRun
	defer func() {
		for _, c := range runs {
			_ = n.on(c.r, c.free(n))
		}
	}()
	seen := map[cuda.Device]bool{}
	for r, dev := range n.devs {
		if seen[dev] {
			continue
		}
		seen[dev] = true
		c := &copyRun{r: r}
		runs = append(runs, c)
		if err := n.on(r, func() error { return c.issue(n, bytes) }); err != nil {
			return nil, fmt.Errorf("rank %d: %w", n.rank(r), err)
		}
	}
	if err := n.drain(ctx, "copy roofline"); err != nil {
		return nil, err
	}
	rates := map[int]float64{}
	for _, c := range runs {
		var ms float32
		err := n.on(c.r, func() (err error) {
			ms, err = n.drv.EventElapsedTime(c.start, c.end)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", n.rank(c.r), err)
		}
		if ms <= 0 {
			return nil, fmt.Errorf("rank %d: %d copies of %s took %g ms", n.rank(c.r), rooflineCopies, cli.FormatSize(bytes), ms)
		}
		rates[n.rank(c.r)] = float64(2*bytes*rooflineCopies) / (float64(ms) / 1e3) / 1e9
	}
	return rates, nil
}

// issue allocates the buffers and events and enqueues one untimed copy,
// then the timed ones between the two events, on the rank's stream (its
// context current).
func (c *copyRun) issue(n *node, bytes uint64) error {
	d, s := n.drv, n.streams[c.r]
	var err error
	if c.src, err = d.MemAlloc(bytes); err != nil {
		return fmt.Errorf("copy roofline: %w", err)
	}
	if c.dst, err = d.MemAlloc(bytes); err != nil {
		return fmt.Errorf("copy roofline: %w", err)
	}
	if c.start, err = d.EventCreate(cuda.EventDefault); err != nil {
		return err
	}
	if c.end, err = d.EventCreate(cuda.EventDefault); err != nil {
		return err
	}
	if err := d.MemsetD8Async(c.src, 0x5a, bytes, s); err != nil {
		return err
	}
	if err := d.MemcpyDtoDAsync(c.dst, c.src, bytes, s); err != nil {
		return err
	}
	if err := d.EventRecord(c.start, s); err != nil {
		return err
	}
	for range rooflineCopies {
		if err := d.MemcpyDtoDAsync(c.dst, c.src, bytes, s); err != nil {
			return err
		}
	}
	return d.EventRecord(c.end, s)
}

// free releases what issue made, once the copies issued are done (to run
// with the rank's context current).
func (c *copyRun) free(n *node) func() error {
	return func() error {
		d := n.drv
		errs := []error{d.StreamSynchronize(n.streams[c.r])}
		for _, e := range []cuda.Event{c.start, c.end} {
			if e != 0 {
				errs = append(errs, d.EventDestroy(e))
			}
		}
		for _, p := range []cuda.DevicePtr{c.src, c.dst} {
			if p != 0 {
				errs = append(errs, d.MemFree(p))
			}
		}
		return errors.Join(errs...)
	}
}

// setEfficiency sets every measured variant's effective bandwidth and,
// with a roofline, its fraction of it, for a collective on ranks ranks.
func (r *Row) setEfficiency(op opSpec, ranks int, rl *Roofline) {
	if op.coll.traffic == nil {
		return
	}
	rd, wr := op.coll.traffic(ranks, op.size)
	for _, k := range []runnerKind{kindNVLS, kindNCCL, kindNCCLSym} {
		g := r.group(k)
		for _, f := range []*Figures{*g.out, *g.in} {
			if f == nil || f.TimeUS <= 0 {
				continue
			}
			f.EffBW = float64(rd+wr) / 1e9 / (f.TimeUS / 1e6)
			if rl != nil && rl.TotalGBs > 0 {
				f.RooflineFraction = f.EffBW / rl.TotalGBs
			}
		}
	}
}
