package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/nvls-go/nvls/bench/grow"
)

// Defaults of -coll grow on the simulated node, whose memory is the host's.
const defSimGrowTarget = 256 << 20

// benchGrow runs the growth experiment of package bench/grow on the first
// GPU: -b is the start size, -e the target, -grow-step the fixed step.
func benchGrow(cfg *config, stdout, stderr io.Writer) int {
	gc := grow.Config{Start: grow.DefaultStart, Target: grow.DefaultTarget, Step: cfg.growStep}
	if cfg.set["b"] {
		gc.Start = cfg.minBytes
	}
	if cfg.set["e"] {
		gc.Target = cfg.maxBytes
	}
	if !cfg.set["g"] {
		cfg.gpus = 1
	}
	// The simulated node's memory is sized from -e.
	cfg.maxBytes = gc.Target
	n, err := openNode(cfg)
	if err != nil {
		fprintf(stderr, "nvls-bench: %v\n", err)
		return exitFail
	}
	if n.simulated && !cfg.set["e"] {
		gc.Target = defSimGrowTarget
	}
	if gc.Step > gc.Target {
		gc.Step = 0
	}
	rep := &Report{Tool: "nvls-bench", Start: time.Now(), Args: cfg.args, Machine: n.machine}
	rep.Config = reportConfig(cfg, 1)
	rep.Config.MinBytes, rep.Config.MaxBytes = gc.Start, gc.Target
	m := n.machine
	step := "default (" + grow.Bytes(grow.DefaultStep) + ")"
	if gc.Step > 0 {
		step = grow.Bytes(gc.Step)
	}
	fprintf(stdout, "# nvls-bench grow: start %s target %s step %s\n", grow.Bytes(gc.Start), grow.Bytes(gc.Target), step)
	if n.simulated {
		fprintf(stdout, "# %s\n# (simulated because: %s)\n", simBanner, n.why)
	}
	fprintf(stdout, "# Driver: %s, version %d\n", m.Driver, m.DriverVersion)
	g := m.GPUs[0]
	fprintf(stdout, "# Device %d [%s] %s, %s\n#\n", g.Ordinal, g.BusID, g.Name, grow.Bytes(g.Memory))

	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	var res grow.Result
	err = n.on(0, func() (err error) {
		res, err = grow.Run(ctx, n.drv, n.devs[0], gc)
		return err
	})
	cancel()
	if cerr := n.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		fprintf(stderr, "nvls-bench: grow: %v\n", err)
		return exitFail
	}
	rep.End = time.Now()
	rep.Grow = res
	if err := errors.Join(res.WriteTable(stdout), res.WriteSteps(stdout)); err != nil {
		fprintf(stderr, "nvls-bench: grow: %v\n", err)
		return exitFail
	}
	if cfg.jsonPath != "" {
		if err := rep.writeJSON(cfg.jsonPath); err != nil {
			fprintf(stderr, "nvls-bench: %v\n", err)
			return exitFail
		}
		fprintf(stdout, "# Wrote JSON to %s\n", cfg.jsonPath)
	}
	if cfg.plotPath != "" {
		if err := res.Plot(cfg.plotPath); err != nil {
			fprintf(stderr, "nvls-bench: grow plot: %v\n", err)
			return exitFail
		}
		fprintf(stdout, "# Wrote plot to %s\n", cfg.plotPath)
	}
	return exitOK
}
