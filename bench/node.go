package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/cuda/unicastonly"
	"github.com/nvls-go/nvls/team"
)

// simBanner is what the header says on the simulated node.
const simBanner = "no CUDA driver: running on the simulated NVSwitch node; times are NOT hardware times"

// node is the GPUs the benchmark drives: one rank per device, each with its
// primary context and one stream.
type node struct {
	drv       cuda.Driver
	simulated bool
	why       string // why the simulated node runs
	simNode   *sim.Node

	devs    []cuda.Device
	ctxs    []cuda.Context
	streams []cuda.Stream
	machine Machine

	// boot is set when this process drives one rank of a job whose ranks
	// are processes (mpirun; see launch.go): the node then holds that one
	// rank's device, and the ranks meet through boot. nil: this process
	// drives every rank.
	boot team.Bootstrap
	// timeout bounds the per-rank setup steps (-timeout).
	timeout time.Duration
}

// guard wraps the real driver with -transport unicast so that no
// cuMulticast* call can reach it, whatever the team decides: on machines
// whose NVSwitch fabric is shared a multicast object can take the host's
// GPUs out of service, and unicast must mean unicast.
func guard(lib cuda.Driver, cfg *config) cuda.Driver {
	if cfg.transport == "unicast" {
		return unicastonly.Driver{Driver: lib}
	}
	return lib
}

// openNode opens the real driver, or the simulated node with -sim or when
// there is no driver (errors.Is(err, cuda.ErrNoDriver)).
func openNode(cfg *config) (*node, error) {
	if cfg.rank != nil {
		return openRankNode(cfg)
	}
	n := &node{}
	if cfg.sim {
		n.simulated, n.why = true, "-sim"
	} else {
		lib, err := cuda.Load()
		switch {
		case err == nil:
			n.drv = guard(lib, cfg)
		case errors.Is(err, cuda.ErrNoDriver):
			n.simulated, n.why = true, fmt.Sprintf("no CUDA driver (%v)", err)
		default:
			return nil, fmt.Errorf("loading the CUDA driver: %w", err)
		}
	}
	if n.simulated {
		devices := cfg.gpus
		if devices == 0 {
			devices = defSimGPUs
		}
		mem := 4*cfg.maxBytes + 1<<30 // backing store is lazy: this costs nothing unused
		n.simNode = sim.New(sim.Config{Devices: devices, MemoryPerDevice: mem})
		n.drv = n.simNode
	}
	if err := n.setup(cfg); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

func (n *node) setup(cfg *config) error {
	d := n.drv
	if err := d.Init(); err != nil {
		return fmt.Errorf("cuInit: %w", err)
	}
	count, err := d.DeviceCount()
	if err != nil {
		return fmt.Errorf("device count: %w", err)
	}
	want := cfg.gpus
	if want == 0 {
		want = count
	}
	if want > count {
		return fmt.Errorf("-g %d: only %d GPUs on this machine", want, count)
	}
	if want == 0 {
		return errors.New("no GPU on this machine")
	}
	ver, err := d.DriverVersion()
	if err != nil {
		return fmt.Errorf("driver version: %w", err)
	}
	host, _ := os.Hostname()
	n.machine = Machine{Hostname: host, Driver: d.Name(), Simulated: n.simulated, DriverVersion: ver}
	if n.simulated {
		n.machine.SimulatedWhy = n.why
	}
	for r := range want {
		dev, err := d.DeviceGet(r)
		if err != nil {
			return fmt.Errorf("device %d: %w", r, err)
		}
		g, err := describeGPU(d, dev, r, r)
		if err != nil {
			return err
		}
		ctx, err := d.PrimaryCtxRetain(dev)
		if err != nil {
			return fmt.Errorf("device %d: retaining its primary context: %w", r, err)
		}
		n.devs = append(n.devs, dev)
		n.ctxs = append(n.ctxs, ctx)
		n.machine.GPUs = append(n.machine.GPUs, g)
	}
	return n.each(func(r int) error {
		s, err := d.StreamCreate(cuda.StreamNonBlocking)
		if err != nil {
			return fmt.Errorf("rank %d: creating a stream: %w", r, err)
		}
		n.streams = append(n.streams, s)
		return nil
	})
}

// describeGPU is what the header and the JSON say of rank's device
// (ordinal dev).
func describeGPU(d cuda.Driver, dev cuda.Device, rank, ordinal int) (GPU, error) {
	g := GPU{Rank: rank, Ordinal: ordinal}
	var err error
	if g.Name, err = d.DeviceName(dev); err != nil {
		return g, fmt.Errorf("device %d name: %w", ordinal, err)
	}
	if g.BusID, err = d.DevicePCIBusID(dev); err != nil {
		return g, fmt.Errorf("device %d bus id: %w", ordinal, err)
	}
	if g.Memory, err = d.DeviceTotalMem(dev); err != nil {
		return g, fmt.Errorf("device %d memory: %w", ordinal, err)
	}
	g.SMs, _ = d.DeviceAttribute(cuda.AttrMultiprocessorCount, dev)
	maj, e1 := d.DeviceAttribute(cuda.AttrComputeCapabilityMajor, dev)
	minor, e2 := d.DeviceAttribute(cuda.AttrComputeCapabilityMinor, dev)
	if e1 == nil && e2 == nil {
		g.CC = fmt.Sprintf("%d.%d", maj, minor)
	}
	return g, nil
}

// size is the number of ranks this process drives (its local ranks:
// every rank, or one under mpirun); ranks() is the job's.
func (n *node) size() int { return len(n.devs) }

// on runs fn on a locked OS thread with rank r's context current.
func (n *node) on(r int, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := n.drv.CtxSetCurrent(n.ctxs[r]); err != nil {
		return fmt.Errorf("rank %d: setting its context current: %w", r, err)
	}
	return fn()
}

// each runs fn for every rank in order on one locked OS thread, each with
// its context current; it stops at the first error.
func (n *node) each(fn func(r int) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for r := range n.ctxs {
		if err := n.drv.CtxSetCurrent(n.ctxs[r]); err != nil {
			return fmt.Errorf("rank %d: setting its context current: %w", r, err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs fn for every rank at once, each on its own locked thread
// with its context current, and returns the first error.
func (n *node) parallel(fn func(r int) error) error {
	errs := make([]error, n.size())
	done := make(chan struct{})
	for r := range n.ctxs {
		go func() {
			defer func() { done <- struct{}{} }()
			errs[r] = n.on(r, func() error { return fn(r) })
		}()
	}
	for range n.ctxs {
		<-done
	}
	return errors.Join(errs...)
}

// drain waits until every rank's stream is idle, or ctx ends. It polls
// (StreamQuery) rather than blocking in the driver, so that a collective
// that never finishes gives an error naming the ranks instead of a hang.
// Under mpirun it then waits for the other processes' ranks too (a
// barrier), so that, as in one process, no rank goes on while another's
// collective may still touch its memory.
func (n *node) drain(ctx context.Context, what string) error {
	pending := make([]bool, n.size())
	for r := range pending {
		pending[r] = true
	}
	sleep := 20 * time.Microsecond
	for {
		left := 0
		err := n.each(func(r int) error {
			if !pending[r] {
				return nil
			}
			err := n.drv.StreamQuery(n.streams[r])
			switch {
			case err == nil:
				pending[r] = false
			case errors.Is(err, cuda.ErrNotReady):
				left++
			default:
				return fmt.Errorf("%s: rank %d (device %d): %w", what, r, n.devs[r], err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if left == 0 {
			return n.sync(ctx, what)
		}
		select {
		case <-ctx.Done():
			var ranks []int
			for r, p := range pending {
				if p {
					ranks = append(ranks, r)
				}
			}
			return fmt.Errorf("%s: ranks %v still busy: %w", what, ranks, ctx.Err())
		case <-time.After(sleep):
		}
		if sleep < 2*time.Millisecond {
			sleep *= 2
		}
	}
}

// Close destroys the streams and releases the contexts (and the simulated
// node).
func (n *node) Close() error {
	var errs []error
	if len(n.streams) > 0 {
		errs = append(errs, n.each(func(r int) error {
			if r < len(n.streams) {
				return n.drv.StreamDestroy(n.streams[r])
			}
			return nil
		}))
		n.streams = nil
	}
	for r, dev := range n.devs {
		if err := n.drv.PrimaryCtxRelease(dev); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: releasing its context: %w", r, err))
		}
	}
	n.devs, n.ctxs = nil, nil
	if n.simNode != nil {
		errs = append(errs, n.simNode.Close())
		n.simNode = nil
	}
	return errors.Join(errs...)
}
