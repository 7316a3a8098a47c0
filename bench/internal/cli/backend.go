package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/simnode"
)

// Backend is the driver a command runs on: the machine's CUDA driver, or
// the simulated NVSwitch node (cuda/sim), whose times are not hardware
// times.
type Backend struct {
	Driver cuda.Driver
	// Simulated is set on the simulated node; Why says why it runs.
	Simulated bool
	Why       string
	node      *sim.Node // made by Open: Close closes it
}

// SimConfig sizes the simulated node that Open makes.
type SimConfig struct {
	// Devices is its number of GPUs; Memory each one's bytes (backing
	// store is allocated lazily: a large value costs nothing unused).
	Devices int
	Memory  uint64
	// Kernels are kernels the node runs beside nvls's (a test's doubles).
	Kernels map[string]sim.KernelFunc
}

// Open loads the CUDA driver; with force, or on a machine without one
// (errors.Is(err, cuda.ErrNoDriver)), it makes the simulated node instead.
// Any other failure to load the driver is an error.
func Open(force bool, sc SimConfig) (*Backend, error) {
	why := "asked for with -sim"
	if !force {
		lib, err := cuda.Load()
		if err == nil {
			return &Backend{Driver: lib}, nil
		}
		if !errors.Is(err, cuda.ErrNoDriver) {
			return nil, fmt.Errorf("loading the CUDA driver: %w", err)
		}
		why = NoDriver(err)
	}
	n := simnode.New(sim.Config{Devices: sc.Devices, MemoryPerDevice: sc.Memory, Kernels: sc.Kernels})
	return &Backend{Driver: n, Simulated: true, Why: why, node: n}, nil
}

// NoDriver says why err (which wraps cuda.ErrNoDriver) means there is no
// driver to run on, naming the cause once: "no CUDA driver: dlopen ...".
func NoDriver(err error) string {
	detail := strings.TrimPrefix(err.Error(), cuda.ErrNoDriver.Error())
	detail = strings.TrimPrefix(detail, ": ")
	if detail == "" {
		return "no CUDA driver (libcuda.so.1 could not be loaded)"
	}
	return "no CUDA driver: " + detail
}

// SimNotice is the header's sentence on the simulated node, given why it
// runs (Backend.Why).
func SimNotice(why string) string {
	return fmt.Sprintf("Simulated NVSwitch node (%s): times are NOT hardware times", why)
}

// Close closes the simulated node Open made; the real driver stays
// loaded (it is the process's).
func (b *Backend) Close() error {
	if b == nil || b.node == nil {
		return nil
	}
	err := b.node.Close()
	b.node = nil
	return err
}
