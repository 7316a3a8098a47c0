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
	if rep.Summary.Wrong > 0 || rep.Summary.NCCLWrong > 0 {
		fprintf(o.err, "nvls-bench: %d wrong elements (nvls), %d (NCCL)\n", rep.Summary.Wrong, rep.Summary.NCCLWrong)
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

	if n.simulated() && !cfg.set["e"] && cfg.maxBytes > defSimMaxBytes {
		cfg.maxBytes = max(defSimMaxBytes, cfg.minBytes)
	}
	if cfg.root >= n.ranks() {
		return nil, &flagError{"r", fmt.Sprint(cfg.root), fmt.Sprintf("root out of range (0 to %d: %d GPUs)", n.ranks()-1, n.ranks())}
	}
	sizes, elem, err := sweepSizes(cfg)
	if err != nil {
		return nil, err
	}
	rep = &Report{Tool: "nvls-bench", Start: time.Now(), Args: cfg.args, Machine: n.machine, Config: reportConfig(cfg, n.ranks())}
	ours, nc, err := startRunners(cfg, n, rep, max(sizes[len(sizes)-1], 16))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ours.Close()) }()
	if nc != nil {
		defer func() { err = errors.Join(err, nc.Close()) }()
	}

	writeHeader(o.out, cfg, rep)
	tableHeader(o.out, nc != nil)
	t, err := newTimer(n, max(2, cfg.iters+1))
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	if err := measureSizes(cfg, n, t, ours, nc, sizes, elem, rep, o); err != nil {
		return rep, err
	}
	rep.End = time.Now()
	rep.summarize()
	o.progress.clear()
	tableFooter(o.out, rep)
	return rep, nil
}

// sweepSizes is the sizes of the sweep and the bytes of one element (a
// collective that moves no data has one size, 0).
func sweepSizes(cfg *config) (sizes []uint64, elem uint64, err error) {
	if !cfg.coll.moves {
		return []uint64{0}, 1, nil
	}
	elem = uint64(cfg.dtype.Size())
	if sizes = cfg.sizes(elem); len(sizes) == 0 {
		return nil, 0, fmt.Errorf("-b %d -e %d: no size holds a whole %s element", cfg.minBytes, cfg.maxBytes, cfg.dtype.NCCLName())
	}
	return sizes, elem, nil
}

// startRunners brings up nvls on every rank (every process's, or all
// stop) and, with -compare nccl, NCCL: on the simulated node, where NCCL
// cannot run, the report says so instead.
func startRunners(cfg *config, n *node, rep *Report, bufBytes uint64) (*oursRunner, *ncclRunner, error) {
	setup, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	ours, err := newOursRunner(setup, n, cfg, bufBytes)
	if err = n.settle(setup, "setting up nvls", err); err != nil {
		if ours != nil {
			_ = ours.Close()
		}
		return nil, nil, err
	}
	rep.Transport = ours.transport()
	if cfg.compare != "nccl" {
		return ours, nil, nil
	}
	if n.simulated() {
		rep.NCCLSkipped = noNCCLOnSim
		return ours, nil, nil
	}
	nc, err := newNCCLRunner(n)
	if err != nil {
		_ = ours.Close()
		return nil, nil, err
	}
	info := nc.info
	rep.NCCL = &info
	return ours, nc, nil
}

// measureSizes measures every size, printing each row as it comes (and,
// on a long sweep, the progress on stderr).
func measureSizes(cfg *config, n *node, t *timer, ours *oursRunner, nc *ncclRunner, sizes []uint64, elem uint64, rep *Report, o output) error {
	send, recv := ours.buffers()
	began := time.Now()
	for i, size := range sizes {
		op := opSpec{coll: cfg.coll, size: size, count: size / elem, dtype: cfg.dtype, op: cfg.op, root: cfg.root}
		row, err := measureSize(cfg, n, t, ours, nc, op, send, recv)
		if row != nil {
			rep.Rows = append(rep.Rows, *row)
			o.progress.clear()
			tableRow(o.out, row, nc != nil)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", cfg.coll.name, cli.FormatSize(size), err)
		}
		if el := time.Since(began); n.leader() && (el > 2*time.Second || len(sizes) > 8) {
			o.progress.show(fmt.Sprintf("nvls-bench: [%d/%d] %s done, %.1f s elapsed", i+1, len(sizes), cli.FormatSize(size), el.Seconds()))
		}
	}
	return nil
}

// measureSize times and checks one size: out of place then in place, ours
// then NCCL's.
func measureSize(cfg *config, n *node, t *timer, ours *oursRunner, nc *ncclRunner, op opSpec, send, recv []cuda.DevicePtr) (*Row, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	row := newRow(op)
	runs := []runner{ours}
	if nc != nil {
		runs = append(runs, nc)
	}
	for k, rn := range runs {
		for _, inPlace := range []bool{false, true} {
			if inPlace && !op.coll.moves {
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
			*row.figures(k == 1, inPlace) = f
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
	f.AlgBW, f.BusBW = bandwidth(op.size, m.timeUS/1e6, op.coll.busFactor(n.ranks()))
	for c := 0; c < cfg.checkIters && op.coll.moves; c++ {
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
