package team

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// A team of New speaks for all its ranks: every entry is the process's
// bytes; calls follow each other; Close and Fail stop it.
func TestAllGatherInProcessTeam(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 3})
	tm, err := New(testCtx(t), node, devices(3), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	for i := range 3 {
		mine := []byte(fmt.Sprintf("round %d", i))
		all, err := tm.AllGather(context.Background(), mine)
		require.NoError(t, err)
		assert.Equal(t, [][]byte{mine, mine, mine}, all)
	}
	tm.markFailed(errors.New("boom"))
	_, err = tm.AllGather(context.Background(), nil)
	require.ErrorIs(t, err, ErrBroken)
	require.NoError(t, tm.Close())
	_, err = tm.AllGather(context.Background(), nil)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, node.CheckNoLeaks())
}

// rankTeams brings up n teams of one rank each (NewRank) over in-process
// bootstraps that stay open until the test ends (AllGather needs them
// after the bring-up).
func rankTeams(t *testing.T, node *sim.Node, n int, opts ...Option) []*Team {
	t.Helper()
	boots := NewInProcess(n)
	teams := make([]*Team, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { teams[r], errs[r] = NewRank(testCtx(t), node, cuda.Device(r), boots[r], opts...) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for r, tm := range teams {
			if tm != nil {
				assert.NoError(t, tm.Close(), "rank %d", r)
			}
		}
		for _, b := range boots {
			_ = b.Close()
		}
		assert.NoError(t, node.CheckNoLeaks())
	})
	require.NoError(t, errors.Join(errs...))
	return teams
}

// allGather runs AllGather on the given ranks' teams at once.
func allGather(ctx context.Context, teams []*Team, ranks []int, mine func(r int) []byte) ([][][]byte, []error) {
	outs := make([][][]byte, len(teams))
	errs := make([]error, len(teams))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { outs[r], errs[r] = teams[r].AllGather(ctx, mine(r)) })
	}
	wg.Wait()
	return outs, errs
}

// Teams of one rank each (as under MPI): every rank's own bytes, by
// rank, on every rank, over the bootstrap the bring-up used.
func TestAllGatherRankTeams(t *testing.T) {
	const n = 3
	node := newNode(t, sim.Config{Devices: n})
	teams := rankTeams(t, node, n, WithWorkspaceSize(smallData), WithTransport(Unicast), quiet())
	all := []int{0, 1, 2}
	for round := range 2 {
		mine := func(r int) []byte { return []byte(fmt.Sprintf("rank %d round %d", r, round)) }
		outs, errs := allGather(context.Background(), teams, all, mine)
		require.NoError(t, errors.Join(errs...))
		for r := range n {
			assert.Equal(t, [][]byte{mine(0), mine(1), mine(2)}, outs[r], "rank %d", r)
		}
	}
}

// A rank that does not call AllGather is named by the others within the
// team's setup timeout (WithSetupTimeout given to NewRank), and the
// bootstrap stays broken for everyone after that.
func TestAllGatherMissingRankSetupTimeout(t *testing.T) {
	const n = 3
	node := newNode(t, sim.Config{Devices: n})
	const timeout = 300 * time.Millisecond
	teams := rankTeams(t, node, n, WithWorkspaceSize(smallData), WithTransport(Unicast), WithSetupTimeout(timeout), quiet())
	start := time.Now()
	_, errs := allGather(context.Background(), teams, []int{0, 1}, func(int) []byte { return []byte("x") })
	took := time.Since(start)
	assert.Less(t, took, timeout+5*time.Second)
	for _, r := range []int{0, 1} {
		err := errs[r]
		require.Error(t, err, "rank %d", r)
		var mr *MissingRanksError
		require.ErrorAs(t, err, &mr, "rank %d", r)
		assert.Equal(t, []int{2}, mr.Missing, "rank %d: %v", r, err)
		assert.ErrorIs(t, err, ErrPeerMissing)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
	// Late: the bootstrap is broken, and says who was missing.
	_, err := teams[2].AllGather(context.Background(), []byte("late"))
	var mr *MissingRanksError
	require.ErrorAs(t, err, &mr)
	assert.Equal(t, []int{2}, mr.Missing)
}

// Without a setup timeout (NewRank leaves it to ctx and the bootstrap),
// ctx's deadline bounds AllGather.
func TestAllGatherMissingRankContext(t *testing.T) {
	const n = 2
	node := newNode(t, sim.Config{Devices: n})
	teams := rankTeams(t, node, n, WithWorkspaceSize(smallData), WithTransport(Unicast), quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := teams[1].AllGather(ctx, []byte("x"))
	var mr *MissingRanksError
	require.ErrorAs(t, err, &mr)
	assert.Equal(t, []int{0}, mr.Missing)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
