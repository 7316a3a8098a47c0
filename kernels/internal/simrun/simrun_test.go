package simrun_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
	"github.com/nvls-go/nvls/kernels/internal/simrun"
)

// Every algorithm, on fresh special-value inputs: every rank's output is
// the exact oracle's.
func TestAllReduce(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, algo := range kernels.Algos {
		for _, dt := range []kernels.DType{kernels.BF16, kernels.S32} {
			for _, op := range kernels.RedOps {
				const ranks, count = 3, 3*kabi.BlockThreads*8 + 5
				ins := kref.Special(rng, dt, ranks, count)
				outs, err := simrun.AllReduce(algo, dt, op, ins, 2)
				require.NoError(t, err, "%v %v %v", algo, dt, op)
				require.Len(t, outs, ranks)
				for r, out := range outs {
					bad, n := kref.CheckExact(dt, op, ins, out, count, 3)
					assert.Zero(t, n, "%v %v %v rank %d: %v", algo, dt, op, r, bad)
				}
			}
		}
	}
	_, err := simrun.AllReduce(kernels.OneShot, kernels.F32, kernels.Sum, [][]byte{make([]byte, 6)}, 1)
	assert.ErrorContains(t, err, "not a whole number")
}
