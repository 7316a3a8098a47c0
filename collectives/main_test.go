//go:build !gpu

package collectives

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/ptxtest"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/ptx"
)

// TestMain: the simulated node resolves a PTX image's .entry names against
// the Go reference kernels. When the committed PTX predates the LL kernels
// or this build's Params (until it is regenerated from the current sources
// on a GPU machine), the tests run on images that declare every entry
// point of kernels.Entries instead; with current PTX, or with
// NVLS_PTX_DIR set, they use that.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if _, set := env.OS.String(ptx.EnvDir); !set && !committedCurrent() {
		dir, err := os.MkdirTemp("", "collectives-ptx")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := ptxtest.WriteEntryImages(dir, kernels.Sources, kernels.Entries, kabi.ParamsSize); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Setenv(ptx.EnvDir, dir)
	}
	return m.Run()
}

// committedCurrent: the committed PTX has the LL kernels, takes this
// build's Params (kabi.Load refuses another size) and waits at entry
// (kernel_entry).
func committedCurrent() bool {
	img, err := ptx.Image("allreduce", kernels.Unicast)
	if err != nil {
		return false
	}
	for _, e := range ptx.Entries(img) {
		if len(e.Params) != 1 || e.Params[0] != kabi.ParamsSize || !e.GridDepWait {
			return false
		}
	}
	return slices.Contains(sim.PTXEntries(img), kernels.AllReduceName(kernels.F32, kernels.Sum, kernels.LL))
}
