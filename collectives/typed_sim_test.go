//go:build !gpu

package collectives_test

import (
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// typedNode is a simulated node of ranks GPUs, closed at cleanup.
func typedNode(tb testing.TB, ranks int) (d cuda.Driver, devs []cuda.Device, opts []team.Option, onGPU bool) {
	node := simnode.New(simnode.Config{Devices: ranks})
	tb.Cleanup(func() { _ = node.Close() })
	devs = make([]cuda.Device, ranks)
	for i := range devs {
		devs[i] = cuda.Device(i)
	}
	return node, devs, nil, false
}

// simOnly: the test runs here (it is skipped with the gpu tag).
func simOnly(testing.TB) {}
