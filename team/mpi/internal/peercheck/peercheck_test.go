package peercheck

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// processes makes the in-process bootstrap look like separate processes,
// so that the team takes the POSIX-FD path, as under mpirun.
type processes struct{ team.Bootstrap }

func (processes) InProcess() bool { return false }

// flipDtoH corrupts every device-to-host copy of one rank.
type flipDtoH struct{ cuda.Driver }

func (f flipDtoH) MemcpyDtoH(dst unsafe.Pointer, src cuda.DevicePtr, n uint64) error {
	err := f.Driver.MemcpyDtoH(dst, src, n)
	if err == nil && n > 0 {
		*(*byte)(dst) ^= 0x40
	}
	return err
}

// runSim brings up an n-rank unicast team of NewRank teams on the
// simulated node and runs the check on every rank; drv(r) is rank r's
// driver.
func runSim(t *testing.T, n int, wrap func(r int, d cuda.Driver) cuda.Driver) []error {
	node := sim.New(sim.Config{Devices: n})
	t.Cleanup(func() { assert.NoError(t, node.CheckNoLeaks()); node.Close() })
	require.NoError(t, node.Init())
	var fresh [32]byte
	_, err := rand.Read(fresh[:])
	require.NoError(t, err)
	boots := team.NewInProcess(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var d cuda.Driver = unicastonly.Driver{Driver: node, OnRefuse: func(op string) { t.Errorf("%s called", op) }}
			if wrap != nil {
				d = wrap(r, d)
			}
			boot := processes{boots[r]}
			tm, err := team.NewRank(ctx, d, cuda.Device(r), boot, team.WithTransport(team.Unicast), team.WithWorkspaceSize(4<<20))
			if err != nil {
				errs[r] = err
				return
			}
			seed, err := Seed(ctx, boot, fresh)
			if err == nil {
				err = Run(ctx, tm, boot, seed, 1<<20+48)
			}
			errs[r] = err
			assert.NoError(t, tm.Close())
			assert.NoError(t, boots[r].Close())
		})
	}
	wg.Wait()
	return errs
}

func TestRunOnSim(t *testing.T) {
	for r, err := range runSim(t, 4, nil) {
		assert.NoError(t, err, "rank %d", r)
	}
}

// The check fails, on every rank, when one rank reads wrong data.
func TestRunDetectsCorruption(t *testing.T) {
	errs := runSim(t, 3, func(r int, d cuda.Driver) cuda.Driver {
		if r == 1 {
			return flipDtoH{d}
		}
		return d
	})
	require.Error(t, errs[1])
	assert.Contains(t, errs[1].Error(), "rank 1 (device 1) reads a wrong copy of rank 0's buffer (first difference at byte 0)")
	for _, r := range []int{0, 2} {
		require.Error(t, errs[r])
		assert.Contains(t, errs[r].Error(), "rank 1 failed")
	}
}

func TestPatternsDiffer(t *testing.T) {
	var seed [32]byte
	_, err := rand.Read(seed[:])
	require.NoError(t, err)
	assert.Equal(t, Pattern(seed, 1, 100), Pattern(seed, 1, 100))
	assert.NotEqual(t, Pattern(seed, 1, 100), Pattern(seed, 2, 100))
	assert.NotEqual(t, Stamp(seed, 0, 1), Stamp(seed, 1, 0))
	assert.Len(t, Stamp(seed, 0, 1), StampBytes)
}
