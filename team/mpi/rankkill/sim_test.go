//go:build mpi

package rankkill

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The GPU variant's loop on the simulated node, in one process: the ranks
// are goroutines with one team each (team.NewRank over an in-process
// bootstrap) running package collectives' kernels (their Go twins); the
// victim's goroutine stops taking part after its iterations and closes
// its team at once, as the driver cleans up after a dead process (the
// survivors' mappings keep its memory alive). The survivors must see the same
// as on GPUs: the kernel's barrier timeout, a broken team, a clean Close
// and cuMemGetInfo back where it was.
func TestSimRankKill(t *testing.T) {
	t.Run("eager", func(t *testing.T) { simRankKill(t, false) })
	// The victim dies with a replay of a graph of all-reduces launched.
	t.Run("graph", func(t *testing.T) { simRankKill(t, true) })
}

func simRankKill(t *testing.T, graph bool) {
	const ranks = 4
	node := simnode.New(sim.Config{Devices: ranks})
	defer func() { assert.NoError(t, node.Close()) }()
	require.NoError(t, node.Init())
	fds, err := fdtest.Take()
	require.NoError(t, err)
	boots := team.NewInProcess(ranks)
	defer func() {
		for _, b := range boots {
			assert.NoError(t, b.Close())
		}
	}()
	var fresh [32]byte
	_, err = rand.Read(fresh[:])
	require.NoError(t, err)

	setups := make([]killSetup, ranks)
	results := make([]killResult, ranks)
	planErrs := make([]error, ranks)
	var leftErr error
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			plan, err := Agree(ctx, boots[r], ranks-1, 6, t.TempDir())
			if planErrs[r] = err; err != nil {
				return
			}
			plan.die = func() { planErrs[r] = plan.record(time.Now()) }
			setups[r] = killSetup{d: node, dev: cuda.Device(r), boot: boots[r], plan: plan, seed: fresh,
				kernelTimeout: 300 * time.Millisecond, slack: 3 * time.Second, counts: []uint64{1 << 10, 24 << 10},
				graph: graph, graphLen: 3, warm: 2,
				log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			results[r] = killRun(setups[r])
			if results[r].leftOpen != nil {
				// What the driver does when a process dies: its mappings and
				// its references to memory go, now, while the survivors'
				// kernels still wait for it.
				leftErr = results[r].leftOpen()
			}
		})
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, planErrs[r], "rank %d", r)
	}
	v := results[ranks-1]
	require.NoError(t, v.setupErr)
	require.ErrorIs(t, v.o.Err, ErrVictim)
	assert.Equal(t, 6, v.o.Iterations)
	for r := range ranks - 1 {
		t.Log(results[r].report(setups[r]))
		checkSurvivor(t, setups[r], results[r])
	}
	require.NotNil(t, v.leftOpen)
	assert.NoError(t, leftErr, "the victim's team, closed at its death")
	fds.NoneAdded(t, "after every rank closed")
	assert.NoError(t, node.CheckNoLeaks())
}
