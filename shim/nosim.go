//go:build cgo && !nvlssim

package main

import (
	"errors"

	"github.com/nvls-go/nvls/cuda"
)

// openSim: this build has no simulator (build with -tags nvlssim).
func openSim() (cuda.Driver, error) {
	return nil, errors.New(EnvSim + " is set, but this libnccl-nvls was built without the simulated node (go build -tags nvlssim)")
}
