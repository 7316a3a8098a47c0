package collectives

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team"
)

// TestPerRankTeams: one Team and one Comm per rank (team.NewRank, as under
// MPI, here with in-process bootstraps): each rank decides alone, from its
// own pointers, and the collectives still agree, for both transports.
func TestPerRankTeams(t *testing.T) {
	const ranks = 3
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			node, boots := newPerRankNode(t, ranks, ranks)
			rng := newRNG(t)
			const count = 3000 // f32 sum, two-shot with the limit below
			ins := make([][]byte, ranks)
			for r := range ranks {
				ins[r] = input(rng, F32, count)
			}
			bcast := input(rng, U64, 999)
			outs, bouts := make([][]byte, ranks), make([][]byte, ranks)
			errs := make([]error, ranks)
			// The ranks close their teams in any order: rank 0, which
			// created the multicast object, may go first (each rank
			// brought up by NewRank holds its own reference).
			var wg sync.WaitGroup
			for r := range ranks {
				wg.Go(func() {
					outs[r], bouts[r], errs[r] = runRank(node, boots[r], r, tr, ins[r], count, bcast)
				})
			}
			wg.Wait()
			for r := range ranks {
				require.NoError(t, errs[r], "rank %d", r)
			}
			msg, bad := checkAllReduce(F32, Sum, ins, outs, count)
			assert.Zero(t, bad, msg)
			for r := range ranks {
				assert.Equal(t, bcast, bouts[r], "rank %d broadcast", r)
			}
		})
	}
}

// runRank is one rank's process: its team, its Comm, an all-reduce in
// place on a team buffer and a broadcast from rank 2 into another.
func runRank(node *sim.Node, boot team.Bootstrap, r int, tr team.Transport, in []byte, count int, bcast []byte) (out, bout []byte, err error) {
	topts := []team.Option{team.WithTransport(tr), team.WithWorkspaceSize(2 << 20)}
	copts := []Option{WithOneShotMax(4096), WithStageBytes(64 << 10)}
	err = withRankComm(node, cuda.Device(r), boot, topts, copts, func(tm *team.Team, c *Comm, streams []cuda.Stream) error {
		ctx := context.Background()
		a, err := tm.Alloc(uint64(len(in)))
		if err != nil {
			return err
		}
		b, err := tm.Alloc(uint64(len(bcast)))
		if err != nil {
			return err
		}
		if err := node.WriteDevice(a.Ptr(0), in); err != nil {
			return err
		}
		if r == 2 {
			if err := node.WriteDevice(b.Ptr(0), bcast); err != nil {
				return err
			}
		}
		p := []cuda.DevicePtr{a.Ptr(0)}
		if err := c.AllReduce(ctx, p, p, uint64(count), F32, Sum, streams); err != nil {
			return err
		}
		q := []cuda.DevicePtr{b.Ptr(0)}
		if err := c.Broadcast(ctx, q, q, uint64(len(bcast)/8), U64, 2, streams); err != nil {
			return err
		}
		if err := c.Sync(ctx, streams); err != nil {
			return err
		}
		if out, err = node.ReadDevice(a.Ptr(0), len(in)); err != nil {
			return err
		}
		bout, err = node.ReadDevice(b.Ptr(0), len(bcast))
		return err
	})
	return out, bout, err
}
