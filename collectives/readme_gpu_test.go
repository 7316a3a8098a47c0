//go:build gpu

package collectives_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// TestGPUReadme runs the README's program (allReduce, and the lines of its
// "Using it" section that open the driver) on this machine's GPUs, one
// rank per GPU (2 or more), on fresh random integers whose f32 sums are
// exact, against sums computed here. Unicast only: it sets
// NCCL_NVLS_ENABLE=0, the off switch, so that the team's auto choice is
// unicast and the binding refuses cuMulticastCreate.
//
//	go test -c -tags gpu -o .devbin/collectives.test ./collectives
//	NCCL_NVLS_ENABLE=0 ./.devbin/collectives.test -test.v -test.run GPUReadme
func TestGPUReadme(t *testing.T) {
	t.Setenv(cuda.EnvNVLSEnable, "0")
	off, err := cuda.MulticastDisabledByEnv()
	require.NoError(t, err)
	require.True(t, off)
	probe, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	require.NoError(t, probe.Init())
	gpus, err := probe.DeviceCount()
	require.NoError(t, err)
	if gpus < 2 {
		// Still the README's program end to end on a GPU (typed copies,
		// the all-reduce, Sync), over one rank.
		t.Logf("%d GPU: the README's program runs one rank per GPU, so here one rank", gpus)
	}
	gpus = min(gpus, 8)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for _, n := range []int{3, 4099, 1<<20 + 5} {
		data := make([][]float32, gpus)
		want := make([]float32, n)
		for i := range data {
			data[i] = make([]float32, n)
			for j := range data[i] {
				v := rng.IntN(1<<16) - 1<<15
				data[i][j] = float32(v)
				want[j] += float32(v) // exact: |sum| < 2^24
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sums, err := onGPUs(ctx, data)
		cancel()
		require.NoError(t, err, "%d elements", n)
		require.Len(t, sums, gpus)
		for i := range sums {
			assert.Equal(t, want, sums[i], "%d elements: GPU %d", n, i)
		}
	}
}

// onGPUs is the README's (section "Using it").
func onGPUs(ctx context.Context, data [][]float32) ([][]float32, error) {
	lib, err := cuda.Open() // libcuda.so.1, loaded at run time: no CUDA toolkit, no cgo
	if err != nil {
		return nil, err // errors.Is(err, cuda.ErrNoDriver) where there is none
	}
	defer lib.Close()
	return allReduce(ctx, lib, data) // one rank per GPU: GPUs 0 to len(data)-1
}
