//go:build gpu

package collectives_test

import (
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/gputest"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team"
)

// typedNode is this machine's driver, behind unicastonly (no multicast
// call reaches the lent GPUs), with ranks GPUs, or ranks virtual ranks on
// GPU 0 (NVLS_GPU_VRANKS), so that the typed API's tests (TestTyped*,
// TestRanks, TestCaptureReplay, TestWrapBuffer, TestElementAlignedViews)
// run on GPUs:
//
//	go test -c -tags gpu -o .devbin/collectives.test ./collectives
//	NCCL_NVLS_ENABLE=0 NVLS_GPU_VRANKS=3 ./.devbin/collectives.test -test.v -test.run 'Typed|Ranks|Capture|WrapBuffer|ElementAligned|ClosedTeamSays'
func typedNode(tb testing.TB, ranks int) (d cuda.Driver, devs []cuda.Device, opts []team.Option, onGPU bool) {
	lib, err := cuda.Load()
	if err != nil {
		tb.Skipf("no usable CUDA driver: %v", err)
	}
	if err := lib.Init(); err != nil {
		tb.Fatal(err)
	}
	d = unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { tb.Errorf("%s called", op) }}
	devs, shared := gputest.Devices(tb, d, ranks, ranks)
	if shared {
		opts = append(opts, team.WithSharedDevices())
	}
	return d, devs, opts, true
}

// simOnly skips a test that needs the simulated node.
func simOnly(tb testing.TB) { tb.Skip("needs the simulated node (multicast, or nodes of its own)") }
