// Package simnode makes a simulated NVSwitch node (package cuda/sim) that
// runs nvls's kernels: the driver a program uses where there is no GPU.
//
// A program that wants the simulated node imports this package and passes
// New's node wherever it would pass cuda.Open's driver; nothing else
// changes. Production builds that never import it link neither the
// simulator nor the Go reference kernels (package kernels/simkern).
package simnode

import (
	"maps"

	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels/simkern"
)

// Config is the simulated node's description (sim.Config): the zero value
// is four "Simulated H200" devices of 1 GiB, multicast capable.
type Config = sim.Config

// New returns a simulated node as cfg describes it, whose modules run
// nvls's kernels (kernels/simkern) besides cfg.Kernels (which win where a
// name is in both). The caller closes it.
func New(cfg Config) *sim.Node {
	ks := simkern.Kernels()
	maps.Copy(ks, cfg.Kernels)
	cfg.Kernels = ks
	return sim.New(cfg)
}
