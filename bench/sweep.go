package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda"
)

// bench runs the benchmark that cfg describes in world w and returns the
// exit status.
func bench(cfg *config, w world, o output) int {
	rep, err := sweep(cfg, w, o)
	if rep != nil && len(rep.Rows) > 0 {
		if werr := writeOutputs(cfg, rep, o); werr != nil {
			fprintf(o.err, "nvls-bench: %v\n", werr)
			if err == nil {
				return exitFail
			}
		}
	}
	if err != nil {
		fprintf(o.err, "nvls-bench: %v\n", err)
		var fe *flagError
		if errors.As(err, &fe) {
			return exitUsage
		}
		return exitFail
	}
	if s := rep.Summary; s.Wrong > 0 || s.NCCLWrong > 0 || s.NCCLSymWrong > 0 {
		fprintf(o.err, "nvls-bench: %d wrong elements (nvls), %d (NCCL), %d (NCCL symmetric)\n", s.Wrong, s.NCCLWrong, s.NCCLSymWrong)
		return exitFail
	}
	return exitOK
}

// writeOutputs writes -json and -plot.
func writeOutputs(cfg *config, rep *Report, o output) error {
	var errs []error
	if cfg.jsonPath != "" {
		if err := rep.writeJSON(cfg.jsonPath); err != nil {
			errs = append(errs, err)
		} else {
			fprintf(o.out, "# Wrote JSON to %s\n", cfg.jsonPath)
		}
	}
	if cfg.plotPath != "" {
		if err := writePlot(rep, cfg.plotPath); err != nil {
			errs = append(errs, err)
		} else {
			fprintf(o.out, "# Wrote plot to %s\n", cfg.plotPath)
		}
	}
	return errors.Join(errs...)
}

// sweep opens the node, brings up the runners and measures every size.
// The report it returns holds the rows measured so far, also on error.
func sweep(cfg *config, w world, o output) (rep *Report, err error) {
	defer o.progress.clear()
	n, err := openNode(cfg, w)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	if err := checkNode(cfg, n); err != nil {
		return nil, err
	}
	sizes, elem, err := sweepSizes(cfg)
	if err != nil {
		return nil, err
	}
	rep = &Report{Tool: "nvls-bench", Start: time.Now(), Args: cfg.args, Machine: n.machine, Config: reportConfig(cfg, n.ranks(), n.gpus())}
	if wantRoofline(cfg, n) {
		if rep.Roofline, err = measureRoofline(n, cfg.timeout); err != nil {
			return nil, err
		}
	}
	runs, err := startRunners(cfg, n, rep, max(sizes[len(sizes)-1], 16))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, runs.Close()) }()

	writeHeader(o.out, cfg, rep)
	cols := columnsOf(rep)
	tableHeader(o.out, cols)
	t, err := newTimer(n, max(2, cfg.iters+1))
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	if err := measureSizes(cfg, n, t, runs.all(), sizes, elem, rep, o); err != nil {
		return rep, err
	}
	rep.End = time.Now()
	rep.summarize()
	o.progress.clear()
	tableFooter(o.out, rep)
	return rep, nil
}

// checkNode checks the flags against the node opened: the simulated
// node's default largest size, the root, and what ranks that share GPUs
// cannot do.
func checkNode(cfg *config, n *node) error {
	if n.simulated() && !cfg.set["e"] && cfg.maxBytes > defSimMaxBytes {
		cfg.maxBytes = max(defSimMaxBytes, cfg.minBytes)
	}
	if cfg.root >= n.ranks() {
		return &flagError{"r", fmt.Sprint(cfg.root), fmt.Sprintf("root out of range (0 to %d: %d ranks)", n.ranks()-1, n.ranks())}
	}
	if !n.shared() {
		return nil
	}
	shared := fmt.Sprintf("-ranks %d on %d GPU(s): ranks share GPUs", n.ranks(), n.gpus())
	if cfg.compare == "nccl" {
		return &flagError{"compare", cfg.compare, shared + ", and " + noNCCLShared}
	}
	return nil
}

// sweepSizes is the sizes of the sweep and the bytes of one element (a
// collective that moves no data has one size, 0).
func sweepSizes(cfg *config) (sizes []uint64, elem uint64, err error) {
	if !cfg.coll.Moves {
		return []uint64{0}, 1, nil
	}
	elem = uint64(cfg.dtype.Size())
	if sizes = cfg.sizes(elem); len(sizes) == 0 {
		return nil, 0, fmt.Errorf("-b %d -e %d: no size holds a whole %s element", cfg.minBytes, cfg.maxBytes, cfg.dtype.NCCLName())
	}
	return sizes, elem, nil
}

// runners are what a run measures: nvls, and with -compare nccl NCCL's.
type runners struct {
	ours *oursRunner
	nccl *ncclSetup
}

// all is every runner, nvls first.
func (rs *runners) all() []runner {
	out := []runner{rs.ours}
	if rs.nccl != nil {
		out = append(out, rs.nccl.runners...)
	}
	return out
}

// Close closes NCCL's runners, then nvls's.
func (rs *runners) Close() error {
	var errs []error
	if rs.nccl != nil {
		errs = append(errs, rs.nccl.Close())
	}
	return errors.Join(append(errs, rs.ours.Close())...)
}

// startRunners brings up nvls on every rank (every process's, or all
// stop) and, with -compare nccl, NCCL's runners: where NCCL cannot run
// (the simulated node) the report says why instead.
func startRunners(cfg *config, n *node, rep *Report, bufBytes uint64) (*runners, error) {
	setup, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	ours, err := newOursRunner(setup, n, cfg, bufBytes)
	if err = n.settle(setup, "setting up nvls", err); err != nil {
		if ours != nil {
			_ = ours.Close()
		}
		return nil, err
	}
	rep.Transport = ours.transport()
	rep.NVLS = ours.settings()
	rs := &runners{ours: ours}
	if cfg.compare != "nccl" {
		return rs, nil
	}
	if rs.nccl, err = newNCCL(cfg, n, ours, bufBytes); err != nil {
		_ = ours.Close()
		return nil, fmt.Errorf("-compare nccl: %w", err)
	}
	nc := rs.nccl
	rep.NCCL, rep.NCCLSkipped, rep.NCCLSym, rep.NCCLSymSkipped = nc.info, nc.skipped, nc.sym, nc.symSkipped
	return rs, nil
}

// measureSizes measures every size, printing each row as it comes (and,
// on a long sweep, the progress on stderr).
func measureSizes(cfg *config, n *node, t *timer, runs []runner, sizes []uint64, elem uint64, rep *Report, o output) error {
	cols := columnsOf(rep)
	began := time.Now()
	for i, size := range sizes {
		count, shown := cfg.coll.shape(size, elem, n.ranks())
		if count == 0 && cfg.coll.Moves {
			continue // no whole slice per rank (nccl-tests skips it too)
		}
		op := opSpec{coll: cfg.coll, size: shown, count: count, dtype: cfg.dtype, op: cfg.op, root: cfg.root}
		row, err := measureSize(cfg, n, t, runs, op)
		if row != nil {
			row.setEfficiency(op, n.ranks(), rep.Roofline)
			rep.Rows = append(rep.Rows, *row)
			o.progress.clear()
			tableRow(o.out, row, cols)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", cfg.coll.Name, cli.FormatSize(size), err)
		}
		if el := time.Since(began); n.leader() && (el > 2*time.Second || len(sizes) > 8) {
			o.progress.show(fmt.Sprintf("nvls-bench: [%d/%d] %s done, %.1f s elapsed", i+1, len(sizes), cli.FormatSize(size), el.Seconds()))
		}
	}
	return nil
}

// measureSize times and checks one size: out of place then in place, each
// runner in turn (nvls first) on its own buffers.
func measureSize(cfg *config, n *node, t *timer, runs []runner, op opSpec) (*Row, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	row := newRow(op)
	for _, rn := range runs {
		send, recv := rn.buffers()
		for _, inPlace := range []bool{false, true} {
			if inPlace && !op.coll.Moves {
				continue
			}
			s, r := send, recv
			if inPlace {
				s, r = op.coll.inPlace(op, n, recv)
			}
			f, err := measureVariant(ctx, cfg, n, t, rn, op, inPlace, s, r)
			if err != nil {
				where := "out-of-place"
				if inPlace {
					where = "in-place"
				}
				return row, fmt.Errorf("%s, %s: %w", rn.name(), where, err)
			}
			*row.figures(rn.kind(), inPlace) = f
		}
	}
	row.setRatios()
	return row, nil
}

// measureVariant times op (warm-up excluded) and then checks -c runs on
// fresh data, stopping at the first wrong one, as nccl-tests does.
func measureVariant(ctx context.Context, cfg *config, n *node, t *timer, rn runner, op opSpec, inPlace bool, send, recv []cuda.DevicePtr) (*Figures, error) {
	m, err := timing(ctx, n, t, cfg, rn, op, send, recv)
	if err != nil {
		return nil, err
	}
	f := &Figures{TimeUS: m.timeUS, RankTimesUS: m.rankTimesUS, IterTimesUS: m.iterTimesUS, Wrong: -1}
	f.AlgBW, f.BusBW = bandwidth(op.size, m.timeUS/1e6, op.coll.BusFactor(n.ranks()))
	for c := 0; c < cfg.checkIters && op.coll.Moves; c++ {
		res, err := verify(ctx, n, rn, op, inPlace, send, recv)
		if err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		f.Wrong, f.WrongPerRank, f.MaxErr = res.wrong(), res.wrongPerRank, math.Max(f.MaxErr, res.maxErr)
		if f.Wrong > 0 {
			break
		}
	}
	return f, nil
}
