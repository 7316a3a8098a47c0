package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/nvls-go/nvls/collectives"
)

// Report is everything a run measured: what -json writes.
type Report struct {
	Tool    string    `json:"tool"`
	Start   time.Time `json:"start_time"`
	End     time.Time `json:"end_time"`
	Args    []string  `json:"args"`
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	// Transport is the one nvls's team chose, and why.
	Transport Transport `json:"transport"`
	// NVLS is what nvls's Comm ran with: its limits and sizes.
	NVLS *collectives.Settings `json:"nvls,omitempty"`
	// NCCL is set with -compare nccl; NCCLSkipped says why NCCL did not
	// run although -compare nccl asked for it (the simulated node).
	NCCL        *NCCLInfo `json:"nccl,omitempty"`
	NCCLSkipped string    `json:"nccl_skipped,omitempty"`
	// NCCLSym is set when NCCL also ran on symmetric memory;
	// NCCLSymSkipped says why it did not with NCCL running.
	NCCLSym        *NCCLSymInfo `json:"nccl_symmetric,omitempty"`
	NCCLSymSkipped string       `json:"nccl_symmetric_skipped,omitempty"`
	// Roofline is the GPUs' copy roofline (-roofline, or ranks that share
	// GPUs).
	Roofline *Roofline `json:"roofline,omitempty"`
	Rows     []Row     `json:"results"`
	Summary  Summary   `json:"summary"`
}

// Machine is the header's description of the node.
type Machine struct {
	Hostname string `json:"hostname"`
	// Driver is "cuda" (the real driver) or "sim".
	Driver string `json:"driver"`
	// Simulated is true on the simulated node: times are not hardware times.
	Simulated     bool   `json:"simulated"`
	SimulatedWhy  string `json:"simulated_why,omitempty"`
	DriverVersion int    `json:"driver_version"`
	GPUs          []GPU  `json:"gpus"`
}

// GPU is one rank's device.
type GPU struct {
	Rank    int    `json:"rank"`
	Ordinal int    `json:"device"`
	Name    string `json:"name"`
	BusID   string `json:"bus_id"`
	Memory  uint64 `json:"memory_bytes"`
	SMs     int    `json:"sms,omitempty"`
	CC      string `json:"compute_capability,omitempty"`
	// Host and Pid are the rank's process under mpirun (one process per
	// GPU); empty when one process drives every GPU (Machine.Hostname).
	Host string `json:"host,omitempty"`
	Pid  int    `json:"pid,omitempty"`
	// CPUs is how many CPUs the rank's process may run on (its affinity):
	// mpirun binds each process to one core at -np <= 2, which leaves the
	// host's side of a run (launches, spinning waits, the check) one core.
	CPUs int `json:"cpus,omitempty"`
}

// Config is the run's settings as used (defaults filled in).
type Config struct {
	Coll string `json:"coll"`
	// NGPUs is nccl-tests' nGpus: the ranks.
	NGPUs int `json:"ngpus"`
	// Devices is the number of GPUs the ranks run on; SharedDevices is
	// true when that is fewer than the ranks (-ranks: several ranks on
	// one GPU, whose times are not a node's).
	Devices       int    `json:"devices"`
	SharedDevices bool   `json:"shared_devices"`
	MinBytes      uint64 `json:"min_bytes"`
	MaxBytes      uint64 `json:"max_bytes"`
	StepFactor    uint64 `json:"step_factor"`
	Iters         int    `json:"iters"`
	Warmup        int    `json:"warmup_iters"`
	AggIters      int    `json:"agg_iters"`
	Check         bool   `json:"check"`
	CheckIters    int    `json:"check_iters"`
	Type          string `json:"type"`
	RedOp         string `json:"redop"`
	Root          int    `json:"root"`
	Graph         bool   `json:"graph"`
	// GraphLaunches is -G: replays of the captured iterations.
	GraphLaunches int    `json:"graph_launches"`
	Timing        string `json:"timing"`
	// Segment is -segment with -timing median: the iterations of each
	// timed segment.
	Segment int `json:"segment,omitempty"`
	// Launch is -launch: how one process launches its GPUs' graphs
	// ("serial": one thread, in turn; "parallel": a thread per GPU;
	// "workers": the team's worker of each GPU).
	Launch string `json:"launch,omitempty"`
	// ColdGraph is -cold-graph: the timed launches include each graph's
	// first (false: one untimed replay came first).
	ColdGraph bool `json:"cold_graph,omitempty"`
	// Average is -a: whose time is reported (rank0, avg, min, max).
	Average    string  `json:"average"`
	Blocking   bool    `json:"blocking"`
	Compare    string  `json:"compare,omitempty"`
	Transport  string  `json:"transport_requested"`
	TimeoutSec float64 `json:"timeout_s"`
	// BusFactor is nccl-tests' bus-bandwidth factor for this collective
	// and rank count.
	BusFactor float64 `json:"bus_factor"`
}

// Transport is the team's choice.
type Transport struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// NCCLInfo describes the NCCL side of a comparison.
type NCCLInfo struct {
	Version     int    `json:"version"`
	VersionText string `json:"version_text"`
	Library     string `json:"library"`
	// NVLSEnable is NCCL_NVLS_ENABLE as NCCL saw it.
	NVLSEnable string `json:"nccl_nvls_enable"`
}

// NCCLSymInfo describes NCCL's run on symmetric memory: its own buffers of
// BufferBytes per rank and direction, allocated and registered as said.
type NCCLSymInfo struct {
	Alloc        string `json:"alloc"`
	Registration string `json:"registration"`
	BufferBytes  uint64 `json:"buffer_bytes"`
}

// Figures are one variant's measurements at one size.
type Figures struct {
	// TimeUS is the reported time per collective in microseconds: the
	// ranks' as -a says (default: the slowest rank's), averaged over the
	// iterations (or their median).
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbs"`
	BusBW  float64 `json:"busbw_gbs"`
	// Wrong is the number of wrong elements over every rank; -1: not checked.
	Wrong        int64   `json:"wrong"`
	WrongPerRank []int64 `json:"wrong_per_rank,omitempty"`
	// RankTimesUS is each rank's own time per collective.
	RankTimesUS []float64 `json:"rank_times_us"`
	// IterTimesUS (-timing median) are the per-iteration times (per
	// segment's collective with -segment), of the ranks as -a says
	// (default: the slowest rank's).
	IterTimesUS []float64 `json:"iter_times_us,omitempty"`
	// MaxErr is the largest |got - reference| seen (floating types).
	MaxErr float64 `json:"max_abs_err,omitempty"`
	// EffBW is the fewest bytes the collective must move (read +
	// written, colls.go) over the time, in GB/s; RooflineFraction is
	// EffBW over the GPUs' copy roofline (with a roofline).
	EffBW            float64 `json:"eff_bw_gbs,omitempty"`
	RooflineFraction float64 `json:"roofline_fraction,omitempty"`
}

// Row is one size.
type Row struct {
	Coll       string   `json:"coll"`
	Size       uint64   `json:"size"`
	Count      uint64   `json:"count"`
	Type       string   `json:"type"`
	RedOp      string   `json:"redop"`
	Root       int      `json:"root"`
	OutOfPlace *Figures `json:"out_of_place"`
	InPlace    *Figures `json:"in_place"`
	// NCCL's figures on the same buffers, and NCCL time / ours (> 1:
	// nvls is faster).
	NCCLOutOfPlace  *Figures `json:"nccl_out_of_place,omitempty"`
	NCCLInPlace     *Figures `json:"nccl_in_place,omitempty"`
	RatioOutOfPlace float64  `json:"ratio_out_of_place,omitempty"`
	RatioInPlace    float64  `json:"ratio_in_place,omitempty"`
	// NCCL's figures on its symmetric memory, and NCCL time / ours.
	NCCLSymOutOfPlace  *Figures `json:"nccl_symmetric_out_of_place,omitempty"`
	NCCLSymInPlace     *Figures `json:"nccl_symmetric_in_place,omitempty"`
	RatioSymOutOfPlace float64  `json:"ratio_symmetric_out_of_place,omitempty"`
	RatioSymInPlace    float64  `json:"ratio_symmetric_in_place,omitempty"`
}

// Summary is the footer.
type Summary struct {
	Checked         bool    `json:"checked"`
	Wrong           int64   `json:"wrong"`
	NCCLWrong       int64   `json:"nccl_wrong"`
	NCCLSymWrong    int64   `json:"nccl_symmetric_wrong"`
	AvgBusBW        float64 `json:"avg_busbw_gbs"`
	NCCLAvgBusBW    float64 `json:"nccl_avg_busbw_gbs,omitempty"`
	NCCLSymAvgBusBW float64 `json:"nccl_symmetric_avg_busbw_gbs,omitempty"`
}

func reportConfig(cfg *config, ranks, gpus int) Config {
	c := Config{
		Coll: cfg.coll.Name, NGPUs: ranks, Devices: gpus, SharedDevices: gpus < ranks, MinBytes: cfg.minBytes, MaxBytes: cfg.maxBytes,
		StepFactor: cfg.stepFactor, Iters: cfg.iters, Warmup: cfg.warmup, AggIters: cfg.aggIters,
		Check: cfg.checkIters > 0, CheckIters: cfg.checkIters, Type: cfg.dtype.NCCLName(), RedOp: cfg.op.String(),
		Root: cfg.root, Graph: cfg.graphLaunches > 0, GraphLaunches: cfg.graphLaunches, Timing: cfg.timing, Segment: segmentOf(cfg), Launch: cfg.launch, ColdGraph: cfg.coldGraph,
		Average: cfg.average.String(), Blocking: cfg.blocking, Compare: cfg.compare, Transport: cfg.transport,
		TimeoutSec: cfg.timeout.Seconds(), BusFactor: cfg.coll.BusFactor(ranks),
	}
	if !cfg.coll.Reduces {
		c.RedOp = "none"
	}
	if !cfg.coll.Moves {
		c.Type, c.Check, c.CheckIters = "none", false, 0
	}
	return c
}

// newRow is op's row, its figures still to come.
func newRow(op opSpec) *Row {
	row := &Row{Coll: op.coll.Name, Size: op.size, Count: op.count, Type: op.dtype.NCCLName(), RedOp: op.op.String(), Root: -1}
	if !op.coll.Reduces {
		row.RedOp = "none"
	}
	if op.coll.Rooted {
		row.Root = op.root
	}
	if !op.coll.Moves {
		row.Type = "none"
	}
	return row
}

// figures is where the figures of one variant of runner kind k go.
func (r *Row) figures(k runnerKind, inPlace bool) **Figures {
	g := r.group(k)
	if inPlace {
		return g.in
	}
	return g.out
}

// group is the figures of runner kind k and their ratios to nvls's (nil
// for nvls).
type group struct {
	out, in           **Figures
	ratioOut, ratioIn *float64
}

func (r *Row) group(k runnerKind) group {
	switch k {
	case kindNCCL:
		return group{&r.NCCLOutOfPlace, &r.NCCLInPlace, &r.RatioOutOfPlace, &r.RatioInPlace}
	case kindNCCLSym:
		return group{&r.NCCLSymOutOfPlace, &r.NCCLSymInPlace, &r.RatioSymOutOfPlace, &r.RatioSymInPlace}
	}
	return group{out: &r.OutOfPlace, in: &r.InPlace}
}

// setRatios sets NCCL time / ours where both were measured.
func (r *Row) setRatios() {
	for _, k := range []runnerKind{kindNCCL, kindNCCLSym} {
		g := r.group(k)
		*g.ratioOut = ratio(*g.out, r.OutOfPlace)
		*g.ratioIn = ratio(*g.in, r.InPlace)
	}
}

// ratio is their time / ours (0 where either is missing).
func ratio(theirs, ours *Figures) float64 {
	if theirs == nil || ours == nil || ours.TimeUS <= 0 {
		return 0
	}
	return theirs.TimeUS / ours.TimeUS
}

func roundTo(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// summarize fills rep.Summary from the rows (nccl-tests averages busbw
// over every size, out-of-place and in-place).
func (rep *Report) summarize() {
	s := Summary{Checked: rep.Config.Check}
	s.AvgBusBW, s.Wrong = rep.groupSummary(kindNVLS)
	s.NCCLAvgBusBW, s.NCCLWrong = rep.groupSummary(kindNCCL)
	s.NCCLSymAvgBusBW, s.NCCLSymWrong = rep.groupSummary(kindNCCLSym)
	rep.Summary = s
}

// groupSummary is the average busbw and the wrong elements of runner
// kind k's figures.
func (rep *Report) groupSummary(k runnerKind) (avgBusBW float64, wrong int64) {
	var sum float64
	var n int
	for i := range rep.Rows {
		g := rep.Rows[i].group(k)
		for _, f := range []*Figures{*g.out, *g.in} {
			if f == nil {
				continue
			}
			sum += f.BusBW
			n++
			if f.Wrong > 0 {
				wrong += f.Wrong
			}
		}
	}
	if n > 0 {
		avgBusBW = sum / float64(n)
	}
	return avgBusBW, wrong
}

// writeJSON writes the report to path.
func (rep *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	return nil
}

// segmentOf is -segment where it applies (-timing median), else 0.
func segmentOf(cfg *config) int {
	if cfg.timing != "median" {
		return 0
	}
	return cfg.segment
}
