//go:build gpu

package collectives

import (
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/gputest"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team"
)

// TestGPUArgMismatch is TestArgMismatch on 4 GPUs (one team per rank, as
// under MPI, in one process), unicast only: every rank fails with
// ErrArgMismatch, found by the kernels long before the deadline.
func TestGPUArgMismatch(t *testing.T) {
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	devs, shared := gputest.Devices(t, lib, 4, 4)
	if shared || len(devs) != 4 {
		t.Skip("needs 4 GPUs of their own")
	}
	d := unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { t.Errorf("%s called", op) }}
	for _, tc := range mismatchCases() {
		t.Run(tc.name, func(t *testing.T) {
			boots := team.NewInProcess(len(devs))
			defer func() {
				for _, b := range boots {
					_ = b.Close()
				}
			}()
			errs, took := runRanksOn(t, d, devs, boots, team.Unicast, tc.call)
			t.Logf("%s: every rank failed in %v; rank 0: %v", tc.name, took, errs[0])
			checkMismatch(t, tc, errs, took)
		})
	}
}
