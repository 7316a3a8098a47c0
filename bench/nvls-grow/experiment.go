package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/nvls-go/nvls/bench/grow"
	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda"
)

// report is what -json writes.
type report struct {
	Tool    string      `json:"tool"`
	Start   time.Time   `json:"start_time"`
	End     time.Time   `json:"end_time"`
	Args    []string    `json:"args"`
	Machine machine     `json:"machine"`
	Config  grow.Config `json:"config"`
	Grow    grow.Result `json:"grow"`
}

// machine is the header's description of the driver and the GPU.
type machine struct {
	Hostname      string `json:"hostname"`
	Driver        string `json:"driver"`
	Simulated     bool   `json:"simulated"`
	SimulatedWhy  string `json:"simulated_why,omitempty"`
	DriverVersion int    `json:"driver_version"`
	Device        int    `json:"device"`
	Name          string `json:"name"`
	BusID         string `json:"bus_id"`
	Memory        uint64 `json:"memory_bytes"`
}

// experiment opens the GPU, prints the header and runs the experiment.
func experiment(cfg *config, stdout io.Writer) (*report, error) {
	b, err := cli.Open(cfg.sim, cli.SimConfig{Devices: cfg.device + 1, Memory: 4*cfg.grow.Target + 1<<30})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if b.Simulated && !cfg.targetSet {
		cfg.grow.Target = max(defSimTarget, cfg.grow.Start)
	}
	rep := &report{Tool: "nvls-grow", Start: time.Now(), Args: cfg.args, Config: cfg.grow}
	dev, err := openDevice(b, cfg.device, &rep.Machine)
	if err != nil {
		return nil, err
	}
	writeHeader(stdout, cfg, rep.Machine)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	rep.Grow, err = onDevice(b.Driver, dev, func() (grow.Result, error) { return grow.Run(ctx, b.Driver, dev, cfg.grow) })
	if err != nil {
		return nil, fmt.Errorf("grow: %w", err)
	}
	rep.End = time.Now()
	if err := errors.Join(rep.Grow.WriteTable(stdout), rep.Grow.WriteSteps(stdout)); err != nil {
		return nil, err
	}
	return rep, nil
}

// openDevice initializes the driver and describes device ordinal.
func openDevice(b *cli.Backend, ordinal int, m *machine) (cuda.Device, error) {
	d := b.Driver
	if err := d.Init(); err != nil {
		return 0, err // the driver's error names cuInit
	}
	count, err := d.DeviceCount()
	if err != nil {
		return 0, err
	}
	if ordinal >= count {
		return 0, fmt.Errorf("-device %d: only %d GPUs on this machine", ordinal, count)
	}
	dev, err := d.DeviceGet(ordinal)
	if err != nil {
		return 0, fmt.Errorf("device %d: %w", ordinal, err)
	}
	host, _ := os.Hostname()
	*m = machine{Hostname: host, Driver: d.Name(), Simulated: b.Simulated, SimulatedWhy: b.Why, Device: ordinal}
	if m.DriverVersion, err = d.DriverVersion(); err == nil {
		if m.Name, err = d.DeviceName(dev); err == nil {
			if m.BusID, err = d.DevicePCIBusID(dev); err == nil {
				m.Memory, err = d.DeviceTotalMem(dev)
			}
		}
	}
	if err != nil {
		return 0, fmt.Errorf("device %d: %w", ordinal, err)
	}
	return dev, nil
}

// onDevice runs fn on a locked OS thread with dev's primary context
// current (grow.Run acts in the current context).
func onDevice(d cuda.Driver, dev cuda.Device, fn func() (grow.Result, error)) (res grow.Result, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		return res, fmt.Errorf("retaining the primary context: %w", err)
	}
	defer func() {
		if rerr := d.PrimaryCtxRelease(dev); rerr != nil {
			err = errors.Join(err, fmt.Errorf("releasing the primary context: %w", rerr))
		}
	}()
	if err := d.CtxSetCurrent(ctx); err != nil {
		return res, err
	}
	return fn()
}

func writeHeader(w io.Writer, cfg *config, m machine) {
	step := "default (" + grow.Bytes(grow.DefaultStep) + ")"
	if cfg.grow.Step > 0 {
		step = grow.Bytes(cfg.grow.Step)
	}
	fmt.Fprintf(w, "# nvls-grow: start %s target %s step %s\n", grow.Bytes(cfg.grow.Start), grow.Bytes(cfg.grow.Target), step)
	if m.Simulated {
		fmt.Fprintf(w, "# %s\n", cli.SimNotice(m.SimulatedWhy))
	}
	fmt.Fprintf(w, "# Driver: %s, version %d\n", m.Driver, m.DriverVersion)
	fmt.Fprintf(w, "# Device %d [%s] %s, %s\n#\n", m.Device, m.BusID, m.Name, grow.Bytes(m.Memory))
}

// writeOutputs writes -json and -plot.
func writeOutputs(cfg *config, rep *report, stdout io.Writer) error {
	if cfg.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(cfg.jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			return fmt.Errorf("json: %w", err)
		}
		fmt.Fprintf(stdout, "# Wrote JSON to %s\n", cfg.jsonPath)
	}
	if cfg.plotPath != "" {
		if err := rep.Grow.Plot(cfg.plotPath); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(stdout, "# Wrote plot to %s\n", cfg.plotPath)
	}
	return nil
}
