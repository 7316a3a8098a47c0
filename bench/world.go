package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team"
)

// world is how the ranks of a run meet: solo (this process drives every
// GPU) or perRank (one process per GPU under mpirun; perrank.go). The
// sweep is written once against it: what one process would see of every
// rank, it learns through allGather, which in the solo world is this
// process's own message.
type world interface {
	// open gives the driver this process runs on.
	open(cfg *config) (*cli.Backend, error)
	// devices are the ordinals of the GPUs this process drives, of count
	// visible.
	devices(cfg *config, count int) ([]int, error)
	// newTeam brings up this process's ranks of the team.
	newTeam(ctx context.Context, drv cuda.Driver, devs []cuda.Device, opts ...team.Option) (*team.Team, error)
	// ncclComms makes one NCCL communicator per local rank of n.
	ncclComms(n *node, lib *nccl.Lib) ([]nccl.Comm, error)
	// allGather returns every process's msg, in process order.
	allGather(ctx context.Context, msg []byte) ([][]byte, error)
	// barrier returns once every process has called it.
	barrier(ctx context.Context) error
	// proc is this process's index; process 0 prints the report.
	proc() int
}

// solo is the world of one process driving every GPU.
type solo struct{}

// simKernels are kernels the simulated node runs beside nvls's: the
// tests' reference collective (refcoll_test.go).
var simKernels map[string]sim.KernelFunc

// open loads the driver, or makes the simulated node with -sim or where
// there is none.
func (solo) open(cfg *config) (*cli.Backend, error) {
	gpus := cmp.Or(cfg.gpus, defSimGPUs)
	perGPU := uint64((max(cfg.ranks, gpus) + gpus - 1) / gpus) // ranks on one simulated GPU
	b, err := cli.Open(cfg.sim, cli.SimConfig{Devices: gpus, Memory: perGPU*4*cfg.maxBytes + 1<<30, Kernels: simKernels})
	if err != nil {
		return nil, err
	}
	if !b.Simulated {
		b.Driver = guard(b.Driver, cfg)
	}
	return b, nil
}

// devices are the ordinals of the ranks' GPUs: one rank on each of the
// first -g GPUs (all of them without -g), or with -ranks N, N ranks on
// the first -g GPUs (without -g: all of them, up to N), rank r on GPU r
// mod -g, so that ranks share GPUs when there are fewer than N.
func (solo) devices(cfg *config, count int) ([]int, error) {
	want := cmp.Or(cfg.gpus, count)
	if cfg.ranks > 0 && cfg.gpus == 0 {
		want = min(count, cfg.ranks)
	}
	if want > count {
		return nil, fmt.Errorf("-g %d: only %d GPUs on this machine", want, count)
	}
	if want == 0 {
		return nil, errors.New("no GPU on this machine")
	}
	ords := make([]int, cmp.Or(cfg.ranks, want))
	for r := range ords {
		ords[r] = r % want
	}
	return ords, nil
}

func (solo) newTeam(ctx context.Context, drv cuda.Driver, devs []cuda.Device, opts ...team.Option) (*team.Team, error) {
	return team.New(ctx, drv, devs, opts...)
}

// ncclComms makes every GPU's communicator at once (ncclCommInitAll).
func (solo) ncclComms(n *node, lib *nccl.Lib) ([]nccl.Comm, error) {
	devs := make([]int, n.size())
	for r, d := range n.devs {
		devs[r] = int(d)
	}
	var comms []nccl.Comm
	err := n.on(0, func() (err error) {
		comms, err = lib.CommInitAll(devs)
		return err
	})
	return comms, err
}

func (solo) allGather(_ context.Context, msg []byte) ([][]byte, error) { return [][]byte{msg}, nil }
func (solo) barrier(context.Context) error                             { return nil }
func (solo) proc() int                                                 { return 0 }

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
