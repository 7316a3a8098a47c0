package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
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
	// NCCL is set with -compare nccl; NCCLSkipped says why NCCL did not
	// run although -compare nccl asked for it (the simulated node).
	NCCL        *NCCLInfo `json:"nccl,omitempty"`
	NCCLSkipped string    `json:"nccl_skipped,omitempty"`
	Rows        []Row     `json:"results"`
	Summary     Summary   `json:"summary"`
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
}

// Config is the run's settings as used (defaults filled in).
type Config struct {
	Coll       string `json:"coll"`
	NGPUs      int    `json:"ngpus"`
	MinBytes   uint64 `json:"min_bytes"`
	MaxBytes   uint64 `json:"max_bytes"`
	StepFactor uint64 `json:"step_factor"`
	Iters      int    `json:"iters"`
	Warmup     int    `json:"warmup_iters"`
	AggIters   int    `json:"agg_iters"`
	Check      bool   `json:"check"`
	CheckIters int    `json:"check_iters"`
	Type       string `json:"type"`
	RedOp      string `json:"redop"`
	Root       int    `json:"root"`
	Graph      bool   `json:"graph"`
	// GraphLaunches is -G: replays of the captured iterations.
	GraphLaunches int    `json:"graph_launches"`
	Timing        string `json:"timing"`
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
	// IterTimesUS (-timing median) are the per-iteration times, of the
	// ranks as -a says (default: the slowest rank's).
	IterTimesUS []float64 `json:"iter_times_us,omitempty"`
	// MaxErr is the largest |got - reference| seen (floating types).
	MaxErr float64 `json:"max_abs_err,omitempty"`
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
}

// Summary is the footer.
type Summary struct {
	Checked      bool    `json:"checked"`
	Wrong        int64   `json:"wrong"`
	NCCLWrong    int64   `json:"nccl_wrong"`
	AvgBusBW     float64 `json:"avg_busbw_gbs"`
	NCCLAvgBusBW float64 `json:"nccl_avg_busbw_gbs,omitempty"`
}

func reportConfig(cfg *config, ranks int) Config {
	c := Config{
		Coll: cfg.coll.name, NGPUs: ranks, MinBytes: cfg.minBytes, MaxBytes: cfg.maxBytes,
		StepFactor: cfg.stepFactor, Iters: cfg.iters, Warmup: cfg.warmup, AggIters: cfg.aggIters,
		Check: cfg.checkIters > 0, CheckIters: cfg.checkIters, Type: cfg.dtype.NCCLName(), RedOp: cfg.op.String(),
		Root: cfg.root, Graph: cfg.graphLaunches > 0, GraphLaunches: cfg.graphLaunches, Timing: cfg.timing,
		Average: cfg.average.String(), Blocking: cfg.blocking, Compare: cfg.compare, Transport: cfg.transport,
		TimeoutSec: cfg.timeout.Seconds(), BusFactor: cfg.coll.busFactor(ranks),
	}
	if !cfg.coll.reduces {
		c.RedOp = "none"
	}
	if !cfg.coll.moves {
		c.Type, c.Check, c.CheckIters = "none", false, 0
	}
	return c
}

// newRow is op's row, its figures still to come.
func newRow(op opSpec) *Row {
	row := &Row{Coll: op.coll.name, Size: op.size, Count: op.count, Type: op.dtype.NCCLName(), RedOp: op.op.String(), Root: -1}
	if !op.coll.reduces {
		row.RedOp = "none"
	}
	if op.coll.rooted {
		row.Root = op.root
	}
	if !op.coll.moves {
		row.Type = "none"
	}
	return row
}

// figures is where the figures of one variant go.
func (r *Row) figures(nccl, inPlace bool) **Figures {
	switch {
	case !nccl && !inPlace:
		return &r.OutOfPlace
	case !nccl:
		return &r.InPlace
	case !inPlace:
		return &r.NCCLOutOfPlace
	}
	return &r.NCCLInPlace
}

// setRatios sets NCCL time / ours where both were measured.
func (r *Row) setRatios() {
	if r.NCCLOutOfPlace != nil && r.OutOfPlace != nil && r.OutOfPlace.TimeUS > 0 {
		r.RatioOutOfPlace = r.NCCLOutOfPlace.TimeUS / r.OutOfPlace.TimeUS
	}
	if r.NCCLInPlace != nil && r.InPlace != nil && r.InPlace.TimeUS > 0 {
		r.RatioInPlace = r.NCCLInPlace.TimeUS / r.InPlace.TimeUS
	}
}

func roundTo(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// summarize fills rep.Summary from the rows (nccl-tests averages busbw
// over every size, out-of-place and in-place).
func (rep *Report) summarize() {
	s := Summary{Checked: rep.Config.Check}
	var sum, nsum float64
	var k, nk int
	for _, r := range rep.Rows {
		for _, f := range []*Figures{r.OutOfPlace, r.InPlace} {
			if f == nil {
				continue
			}
			sum += f.BusBW
			k++
			if f.Wrong > 0 {
				s.Wrong += f.Wrong
			}
		}
		for _, f := range []*Figures{r.NCCLOutOfPlace, r.NCCLInPlace} {
			if f == nil {
				continue
			}
			nsum += f.BusBW
			nk++
			if f.Wrong > 0 {
				s.NCCLWrong += f.Wrong
			}
		}
	}
	if k > 0 {
		s.AvgBusBW = sum / float64(k)
	}
	if nk > 0 {
		s.NCCLAvgBusBW = nsum / float64(nk)
	}
	rep.Summary = s
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
