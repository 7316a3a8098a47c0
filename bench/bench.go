package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nvls-go/nvls/cuda"
)

// bench runs the benchmark that cfg describes and returns the exit status.
func bench(cfg *config, stdout, stderr io.Writer) int {
	if cfg.coll == collGrow {
		return benchGrow(cfg, stdout, stderr)
	}
	rep, err := sweep(cfg, stdout, stderr)
	if rep != nil && len(rep.Rows) > 0 {
		if werr := writeOutputs(cfg, rep, stdout); werr != nil {
			fprintf(stderr, "nvls-bench: %v\n", werr)
			if err == nil {
				return exitFail
			}
		}
	}
	if err != nil {
		fprintf(stderr, "nvls-bench: %v\n", err)
		var fe *flagError
		if errors.As(err, &fe) {
			return exitUsage
		}
		return exitFail
	}
	if rep.Summary.Wrong > 0 || rep.Summary.NCCLWrong > 0 {
		fprintf(stderr, "nvls-bench: %d wrong elements (nvls), %d (NCCL)\n", rep.Summary.Wrong, rep.Summary.NCCLWrong)
		return exitFail
	}
	return exitOK
}

// writeOutputs writes -json and -plot.
func writeOutputs(cfg *config, rep *Report, stdout io.Writer) error {
	var errs []error
	if cfg.jsonPath != "" {
		if err := rep.writeJSON(cfg.jsonPath); err != nil {
			errs = append(errs, err)
		} else {
			fprintf(stdout, "# Wrote JSON to %s\n", cfg.jsonPath)
		}
	}
	if cfg.plotPath != "" {
		if err := writePlot(rep, cfg.plotPath); err != nil {
			errs = append(errs, err)
		} else {
			fprintf(stdout, "# Wrote plot to %s\n", cfg.plotPath)
		}
	}
	return errors.Join(errs...)
}

// sweep opens the node, brings up the runners and measures every size.
// The report it returns holds the rows measured so far, also on error.
func sweep(cfg *config, stdout, stderr io.Writer) (rep *Report, err error) {
	n, err := openNode(cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()

	if n.simulated && !cfg.set["e"] && cfg.maxBytes > defSimMaxBytes {
		cfg.maxBytes = max(defSimMaxBytes, cfg.minBytes)
	}
	if cfg.root >= n.ranks() {
		return nil, &flagError{"r", fmt.Sprint(cfg.root), fmt.Sprintf("root out of range (0 to %d: %d GPUs)", n.ranks()-1, n.ranks())}
	}

	elem := uint64(cfg.dtype.Size())
	if cfg.coll == collBarrier {
		elem = 1
	}
	sizes := cfg.sizes(elem)
	if cfg.coll == collBarrier {
		sizes = []uint64{0}
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("-b %d -e %d: no size holds a whole %s element", cfg.minBytes, cfg.maxBytes, cfg.dtype.NCCLName())
	}
	bufBytes := max(sizes[len(sizes)-1], 16)

	rep = &Report{
		Tool:    "nvls-bench",
		Start:   time.Now(),
		Args:    cfg.args,
		Machine: n.machine,
		Config:  reportConfig(cfg, n.ranks()),
	}

	setup, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	ours, err := newOursRunner(setup, n, cfg, bufBytes, stderr)
	// Under mpirun: every rank is set up before any launches, or all stop.
	if err = n.settle(setup, "setting up nvls", err); err != nil && ours != nil {
		_ = ours.Close()
	}
	cancel()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ours.Close()) }()
	rep.Transport = ours.transport()

	var nc *ncclRunner
	if cfg.compare == "nccl" {
		if nc, err = newNCCLRunner(n); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, nc.Close()) }()
		info := nc.info
		rep.NCCL = &info
	}

	writeHeader(stdout, cfg, rep, n)
	tableHeader(stdout, nc != nil)

	t, err := newTimer(n, max(2, cfg.iters+1))
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()

	send, recv := ours.buffers()
	began := time.Now()
	for i, size := range sizes {
		op := opSpec{coll: cfg.coll, size: size, count: size / elem, dtype: cfg.dtype, op: cfg.op, root: cfg.root}
		row, err := measureSize(cfg, n, t, ours, nc, op, send, recv)
		if row != nil {
			rep.Rows = append(rep.Rows, *row)
			tableRow(stdout, row, nc != nil)
		}
		if err != nil {
			return rep, fmt.Errorf("%s %s: %w", cfg.coll, formatSize(size), err)
		}
		if el := time.Since(began); n.leader() && (el > 2*time.Second || len(sizes) > 8) {
			fprintf(stderr, "nvls-bench: [%d/%d] %s done, %.1f s elapsed\n", i+1, len(sizes), formatSize(size), el.Seconds())
		}
	}
	rep.End = time.Now()
	rep.summarize()
	tableFooter(stdout, rep)
	return rep, nil
}

// measureSize times and checks one size: out of place then in place, ours
// then NCCL's.
func measureSize(cfg *config, n *node, t *timer, ours *oursRunner, nc *ncclRunner, op opSpec, send, recv []cuda.DevicePtr) (*Row, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	row := &Row{Coll: string(op.coll), Size: op.size, Count: op.count, Type: op.dtype.NCCLName(), RedOp: op.op.String(), Root: -1}
	switch op.coll {
	case collBroadcast:
		row.RedOp, row.Root = "none", op.root
	case collBarrier:
		row.Type, row.RedOp = "none", "none"
	}
	runs := []runner{ours}
	if nc != nil {
		runs = append(runs, nc)
	}
	for k, rn := range runs {
		for _, inPlace := range []bool{false, true} {
			if op.coll == collBarrier && inPlace {
				continue
			}
			s := send
			if inPlace {
				s = recv
			}
			f, err := measureVariant(ctx, cfg, n, t, rn, op, inPlace, s, recv)
			if err != nil {
				where := "out-of-place"
				if inPlace {
					where = "in-place"
				}
				return row, fmt.Errorf("%s, %s: %w", rn.name(), where, err)
			}
			switch {
			case k == 0 && !inPlace:
				row.OutOfPlace = f
			case k == 0:
				row.InPlace = f
			case !inPlace:
				row.NCCLOutOfPlace = f
			default:
				row.NCCLInPlace = f
			}
		}
	}
	if row.NCCLOutOfPlace != nil && row.OutOfPlace != nil && row.OutOfPlace.TimeUS > 0 {
		row.RatioOutOfPlace = row.NCCLOutOfPlace.TimeUS / row.OutOfPlace.TimeUS
	}
	if row.NCCLInPlace != nil && row.InPlace != nil && row.InPlace.TimeUS > 0 {
		row.RatioInPlace = row.NCCLInPlace.TimeUS / row.InPlace.TimeUS
	}
	return row, nil
}

// measureVariant times op (warm-up excluded) and then, with -c 1, checks
// one run on fresh data, as nccl-tests does.
func measureVariant(ctx context.Context, cfg *config, n *node, t *timer, rn runner, op opSpec, inPlace bool, send, recv []cuda.DevicePtr) (*Figures, error) {
	m, err := timing(ctx, n, t, cfg, rn, op, send, recv)
	if err != nil {
		return nil, err
	}
	f := &Figures{TimeUS: m.timeUS, RankTimesUS: m.rankTimesUS, IterTimesUS: m.iterTimesUS, Wrong: -1}
	f.AlgBW, f.BusBW = bandwidth(string(op.coll), op.size, m.timeUS/1e6, n.ranks())
	if cfg.check && op.coll != collBarrier {
		c, err := verify(ctx, n, rn, op, inPlace, send, recv)
		if err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		f.Wrong, f.WrongPerRank, f.MaxErr = c.wrong(), c.wrongPerRank, c.maxErr
	}
	return f, nil
}

func reportConfig(cfg *config, ranks int) Config {
	c := Config{
		Coll: string(cfg.coll), NGPUs: ranks, MinBytes: cfg.minBytes, MaxBytes: cfg.maxBytes,
		StepFactor: cfg.stepFactor, Iters: cfg.iters, Warmup: cfg.warmup, Check: cfg.check,
		Type: cfg.dtype.NCCLName(), RedOp: cfg.op.String(), Root: cfg.root, Graph: cfg.graph,
		Timing: cfg.timing, Compare: cfg.compare, Transport: cfg.transport,
		TimeoutSec: cfg.timeout.Seconds(), BusFactor: busFactor(string(cfg.coll), ranks),
	}
	if cfg.coll != collAllReduce {
		c.RedOp = "none"
	}
	if cfg.coll == collBarrier {
		c.Type, c.Check = "none", false
	}
	return c
}

// writeHeader writes the lines above the table: the run's settings, the
// machine, the transport and why, NCCL's version and NVLS setting.
func writeHeader(w io.Writer, cfg *config, rep *Report, n *node) {
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	fprintf(w, "# nvls-bench %s: nGpus %d minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %d validation: %d graph: %d timing: %s\n",
		cfg.coll, n.ranks(), cfg.minBytes, cfg.maxBytes, cfg.stepFactor, cfg.warmup, cfg.iters, b2i(cfg.check), b2i(cfg.graph), cfg.timing)
	fprintf(w, "#\n")
	if n.simulated {
		fprintf(w, "# %s\n", simBanner)
		fprintf(w, "# (simulated because: %s)\n", n.why)
	}
	m := rep.Machine
	fprintf(w, "# Driver: %s, version %d (CUDA %d.%d)\n", m.Driver, m.DriverVersion, m.DriverVersion/1000, m.DriverVersion%1000/10)
	fprintf(w, "# Using devices\n")
	for _, g := range m.GPUs {
		pid, host := os.Getpid(), m.Hostname
		if g.Pid != 0 {
			pid, host = g.Pid, g.Host
		}
		fprintf(w, "#  Rank %2d Pid %6d on %10s device %2d [%s] %s\n", g.Rank, pid, host, g.Ordinal, g.BusID, g.Name)
	}
	fprintf(w, "# Transport: %s (requested: %s): %s\n", rep.Transport.Name, cfg.transport, rep.Transport.Reason)
	if rep.NCCL != nil {
		fprintf(w, "# NCCL: version %s (%s), NCCL_NVLS_ENABLE=%s\n", rep.NCCL.VersionText, rep.NCCL.Library, rep.NCCL.NVLSEnable)
		if rep.NCCL.NVLSEnable != "0" && rep.Transport.Name == "unicast" {
			fprintf(w, "# WARNING: nvls runs unicast but NCCL_NVLS_ENABLE is not 0: NCCL may use NVLink SHARP (multicast); the columns do not compare like for like\n")
		}
		fprintf(w, "# NCCL columns: same sizes, same buffers, same streams, same run")
		if cfg.graph {
			fprintf(w, ", captured into CUDA graphs the same way")
		}
		fprintf(w, "; ratio = NCCL time / nvls time: > 1 means nvls is faster\n")
	}
	tm := "average over -n iterations of the slowest rank (CUDA events per rank)"
	if cfg.timing == "median" {
		tm = "median over iterations of the slowest rank's time (CUDA events per rank and iteration)"
	}
	if cfg.graph {
		tm += "; the iterations replayed from one CUDA graph per GPU"
	}
	fprintf(w, "# Time: %s\n", tm)
	fprintf(w, "#\n")
}
