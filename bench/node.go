package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda"
)

// node is the GPUs this process drives (every GPU of the run, or its one
// rank under mpirun), each with its primary context and one stream, and
// what it learned of every rank's.
type node struct {
	w       world
	backend *cli.Backend
	drv     cuda.Driver

	devs    []cuda.Device // by local rank
	ctxs    []cuda.Context
	streams []cuda.Stream
	// machine describes every rank's GPU, in rank order; first is the
	// rank of this process's local rank 0.
	machine Machine
	first   int
	// timeout bounds the setup steps outside the sweep's contexts.
	timeout time.Duration
	// workers, while nvls's team is up, runs fn for every local rank on
	// that rank's team worker (team.Run; -launch workers).
	workers func(fn func(r int) error) error
}

// openNode opens this process's GPUs in world w and learns every
// process's (when any process fails, every one returns an error naming
// the ranks that did). It is the one place GPUs are opened.
func openNode(cfg *config, w world) (*node, error) {
	n := &node{w: w, timeout: cfg.timeout}
	ctx, cancel := context.WithTimeout(context.Background(), n.setupTimeout())
	defer cancel()
	mine, err := n.open(cfg)
	all, err := n.agree(ctx, "opening the GPUs", mine, err)
	if err == nil {
		err = n.learnGPUs(all)
	}
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

// open opens the driver and this process's devices, their contexts and
// streams, and returns their description (JSON, for learnGPUs).
func (n *node) open(cfg *config) ([]byte, error) {
	b, err := n.w.open(cfg)
	if err != nil {
		return nil, err
	}
	n.backend, n.drv = b, b.Driver
	d := n.drv
	if err := d.Init(); err != nil {
		return nil, err // the driver's error names cuInit
	}
	count, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	ords, err := n.w.devices(cfg, count)
	if err != nil {
		return nil, err
	}
	ver, err := d.DriverVersion()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	n.machine = Machine{Hostname: host, Driver: d.Name(), Simulated: b.Simulated, SimulatedWhy: b.Why, DriverVersion: ver}
	var gpus []GPU
	for _, o := range ords {
		g, err := n.openDevice(o)
		if err != nil {
			return nil, err
		}
		g.Host, g.Pid, g.CPUs = host, os.Getpid(), runtime.NumCPU()
		gpus = append(gpus, g)
	}
	err = n.each(func(r int) error {
		s, err := d.StreamCreate(cuda.StreamNonBlocking)
		if err != nil {
			return fmt.Errorf("device %d: creating a stream: %w", n.devs[r], err)
		}
		n.streams = append(n.streams, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(gpus)
}

// openDevice retains the primary context of device ordinal and describes
// the device.
func (n *node) openDevice(ordinal int) (GPU, error) {
	d := n.drv
	dev, err := d.DeviceGet(ordinal)
	if err != nil {
		return GPU{}, fmt.Errorf("device %d: %w", ordinal, err)
	}
	g, err := describeGPU(d, dev, ordinal)
	if err != nil {
		return GPU{}, err
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		return GPU{}, fmt.Errorf("device %d: retaining its primary context: %w", ordinal, err)
	}
	n.devs = append(n.devs, dev)
	n.ctxs = append(n.ctxs, ctx)
	return g, nil
}

// learnGPUs makes machine.GPUs every rank's, from every process's
// description in process order: ranks are numbered in that order. Host
// and Pid are kept only where several processes share the run.
func (n *node) learnGPUs(all [][]byte) error {
	var gpus []GPU
	for p, msg := range all {
		var theirs []GPU
		if err := json.Unmarshal(msg, &theirs); err != nil {
			return fmt.Errorf("rank %d's GPU: %w", p, err)
		}
		if p == n.w.proc() {
			n.first = len(gpus)
		}
		for _, g := range theirs {
			g.Rank = len(gpus)
			if len(all) == 1 {
				g.Host, g.Pid = "", 0
			}
			gpus = append(gpus, g)
		}
	}
	n.machine.GPUs = gpus
	return nil
}

// describeGPU is what the header and the JSON say of device dev (ordinal).
func describeGPU(d cuda.Driver, dev cuda.Device, ordinal int) (GPU, error) {
	g := GPU{Ordinal: ordinal}
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

// size is the number of ranks this process drives (its local ranks);
// ranks is the run's.
func (n *node) size() int  { return len(n.devs) }
func (n *node) ranks() int { return len(n.machine.GPUs) }

// gpus is the number of distinct GPUs of the run's ranks.
func (n *node) gpus() int { return len(n.gpuRanks()) }

// shared reports whether ranks share GPUs (-ranks above the GPUs).
func (n *node) shared() bool { return n.gpus() < n.ranks() }

// gpuRanks is, for every distinct GPU of the run in order of first use,
// its ranks.
func (n *node) gpuRanks() [][]int {
	var out [][]int
	at := map[string]int{}
	for _, g := range n.machine.GPUs {
		k := fmt.Sprintf("%s/%d", g.Host, g.Ordinal)
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], g.Rank)
	}
	return out
}

// rank is the run's rank of local rank r.
func (n *node) rank(r int) int { return n.first + r }

// leader reports whether this process prints the report.
func (n *node) leader() bool { return n.w.proc() == 0 }

// simulated reports whether the node is the simulated one.
func (n *node) simulated() bool { return n.backend != nil && n.backend.Simulated }

// setupTimeout bounds the setup steps outside the sweep's own contexts.
func (n *node) setupTimeout() time.Duration {
	if n.timeout > 0 {
		return n.timeout
	}
	return defTimeout
}

// on runs fn on a locked OS thread with rank r's context current.
func (n *node) on(r int, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := n.drv.CtxSetCurrent(n.ctxs[r]); err != nil {
		return fmt.Errorf("rank %d: setting its context current: %w", n.rank(r), err)
	}
	return fn()
}

// each runs fn for every local rank in order on one locked OS thread,
// each with its context current; it stops at the first error.
func (n *node) each(fn func(r int) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for r := range n.ctxs {
		if err := n.drv.CtxSetCurrent(n.ctxs[r]); err != nil {
			return fmt.Errorf("rank %d: setting its context current: %w", n.rank(r), err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs fn for every local rank at once, each on its own locked
// thread with its context current, and returns the first error.
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

// drain waits until every local rank's stream is idle, or ctx ends, then
// for every process (a barrier, so that, as in one process, no rank goes
// on while another's collective may still touch its memory). It polls
// (StreamQuery) rather than blocking in the driver, so that a collective
// that never finishes gives an error naming the ranks instead of a hang.
func (n *node) drain(ctx context.Context, what string) error {
	pending := make([]bool, n.size())
	for r := range pending {
		pending[r] = true
	}
	sleep := 20 * time.Microsecond
	for {
		left, err := n.poll(pending, what)
		if err != nil {
			return err
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return n.busyError(pending, what, ctx.Err())
		case <-time.After(sleep):
		}
		sleep = min(2*sleep, 2*time.Millisecond)
	}
	if err := n.w.barrier(ctx); err != nil {
		return fmt.Errorf("%s: waiting for the other ranks: %w", what, err)
	}
	return nil
}

// busyError names the ranks still pending when a wait ended with err.
func (n *node) busyError(pending []bool, what string, err error) error {
	var ranks []int
	for r, p := range pending {
		if p {
			ranks = append(ranks, n.rank(r))
		}
	}
	return fmt.Errorf("%s: ranks %v still busy: %w", what, ranks, err)
}

// poll queries the pending streams once, clears those that are idle, and
// returns how many are still busy.
func (n *node) poll(pending []bool, what string) (left int, err error) {
	err = n.each(func(r int) error {
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
			return fmt.Errorf("%s: rank %d (device %d): %w", what, n.rank(r), n.devs[r], err)
		}
		return nil
	})
	return left, err
}

// Close destroys the streams, releases the contexts and closes the
// backend (the simulated node it made).
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
			errs = append(errs, fmt.Errorf("rank %d: releasing its context: %w", n.rank(r), err))
		}
	}
	n.devs, n.ctxs = nil, nil
	errs = append(errs, n.backend.Close())
	n.backend = nil
	return errors.Join(errs...)
}
