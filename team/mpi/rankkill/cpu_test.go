//go:build mpi

package rankkill

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bootDeadline is each bootstrap collective's deadline in the CPU variant.
const bootDeadline = 2 * time.Second

// The CPU variant: the last rank dies in the middle of a loop of
// AllGathers (each checked against every rank's data); each survivor
// returns, within the deadline of the collective it was in, an error
// naming the dead rank, and its Bootstrap stays broken.
func TestBootstrapRankKill(t *testing.T) {
	w := needWorld(t, 3)
	// A Bootstrap of its own, so that the world's stays usable for the
	// plan and the record.
	b, err := mpi.New(ctxFor(t, 30*time.Second), mpi.KeepMPI(), mpi.WithTimeout(bootDeadline))
	require.NoError(t, err)
	victim := b.Size() - 1
	plan, err := Agree(ctxFor(t, 30*time.Second), w, victim, 25, "")
	require.NoError(t, err)
	defer func() { assert.NoError(t, plan.Finish(b.Rank(), b.Size(), 20*time.Second)) }()
	var seed [32]byte
	_, err = rand.Read(seed[:])
	require.NoError(t, err)
	seeds, err := w.AllGather(ctxFor(t, 30*time.Second), seed[:])
	require.NoError(t, err)
	o := plan.Run(context.Background(), b.Rank(), func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, bootDeadline)
		defer cancel()
		all, err := b.AllGather(ctx, data(seeds[b.Rank()], i))
		if err != nil {
			return err
		}
		for r, got := range all {
			if want := data(seeds[r], i); !bytes.Equal(got, want) {
				return fmt.Errorf("iteration %d: rank %d's data differs (%d bytes, want %d)", i, r, len(got), len(want))
			}
		}
		return nil
	})
	t.Logf("%v", o)
	fmt.Printf("rankkill: %v\n", o)
	require.NoError(t, o.KillErr)
	assert.Equal(t, plan.After, o.Iterations, "every iteration before the kill completes, none after")
	var me *team.MissingRanksError
	require.ErrorAs(t, o.Err, &me)
	assert.Equal(t, []int{victim}, me.Missing, "the error names the dead rank")
	assert.Equal(t, b.Rank(), me.Rank)
	assert.ErrorIs(t, o.Err, context.DeadlineExceeded)
	assert.Positive(t, o.SinceKill())
	// Within the deadline of the collective, plus time for a loaded
	// machine to schedule the processes.
	assert.Less(t, o.SinceKill(), bootDeadline+time.Second)

	// Broken from then on, with the first error.
	_, err = b.AllGather(ctxFor(t, time.Second), nil)
	assert.ErrorIs(t, err, mpi.ErrBroken)
	assert.ErrorAs(t, err, &me)
	require.NoError(t, b.Close())
}

// data is rank r's contribution in iteration i: a length and bytes that
// vary with both, from the rank's random seed.
func data(seed []byte, i int) []byte {
	var out []byte
	h := sha256.Sum256(append(append([]byte{}, seed...), byte(i), byte(i>>8)))
	for k := 0; k < 1+int(h[0])%8; k++ {
		h = sha256.Sum256(h[:])
		out = append(out, h[:]...)
	}
	return out
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
