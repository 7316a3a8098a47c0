package simkern

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// TestReducePush: the push reduce, a ring (kabi.FlagPush on the two-shot
// reduce, unicast, 2 ranks or more, 4- and 8-byte types) gives the root
// the reduction of every rank's send, with tails,
// ragged last pieces and several rounds of several blocks (more rounds
// than the FIFO's depth, so that the credits turn), from every root, in
// place and not; its FIFO stays within kabi.PushReduceBytes of the stage
// (a guard past it is untouched).
func TestReducePush(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	const stage = 8 * mib
	piece := kabi.BlockThreads * kabi.RingVecs // vectors: a chunk
	for _, tc := range []struct {
		ranks int
		dt    kernels.DType
		op    kernels.RedOp
	}{{2, kernels.U32, kernels.Sum}, {3, kernels.F32, kernels.Sum}, {4, kernels.F32, kernels.Sum}, {5, kernels.S32, kernels.Max}, {8, kernels.U64, kernels.Sum}} {
		w := newWorkspaceSized(t, tc.ranks, kernels.Unicast, 16*mib)
		per := kabi.VecBytes / tc.dt.Size()
		slices := tc.ranks - 1
		counts := []int{1, per*slices - 1, per*slices + 3, (piece*3 + 5) * slices * per, (piece*5+17)*slices*per + per/2 + 1}
		for j, count := range counts {
			for _, grid := range []uint32{1, 2, 3} {
				root := (j + int(grid)) % tc.ranks
				for _, inPlace := range []bool{false, true} {
					k := kernels.Kernel{Coll: kernels.CollReduce, Algo: kernels.TwoShot, DType: tc.dt, Op: tc.op}
					fifo := kabi.PushReduceBytes(uint64(grid), kabi.BlockThreads)
					g := kref.Bytes(rng, guard)
					for r := range tc.ranks {
						w.write(t, r, stage+fifo, g)
					}
					c := collCase{k: k, count: count, grid: grid, inPlace: inPlace, root: root, flags: kabi.FlagPush, stage: stage}
					t.Run(fmt.Sprintf("%d-ranks/%v/%d/grid-%d/root-%d/in-place=%v", tc.ranks, tc.dt, count, grid, root, inPlace), func(t *testing.T) {
						runColl(t, w, rng, c)
						for r := range tc.ranks {
							assert.Equal(t, g, w.read(t, r, stage+fifo, guard), "rank %d: bytes past the FIFO were written", r)
						}
					})
				}
			}
		}
	}
}

// TestReducePushTimeout: a rank that does not push (launched without
// kabi.FlagPush, here the two-shot kernel): its successor waits for its
// partial sums and its predecessor for its credits until their deadline,
// in kabi.PhasePush, or find the team failed; nobody hangs.
func TestReducePushTimeout(t *testing.T) {
	const ranks, count = 4, 512 << 10 // 8 rounds a block: rank 2's predecessor waits for credits
	w := newWorkspaceSized(t, ranks, kernels.Unicast, 16*mib)
	k := kernels.Kernel{Coll: kernels.CollReduce, Algo: kernels.TwoShot, DType: kernels.F32, Op: kernels.Sum}
	errs := w.launch(t, k.Name(), 2, kabi.BlockThreads, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Opcode, p.TimeoutNs = kernels.OpReduce, uint64(20*time.Millisecond)
		p.Send, p.Recv, p.Count, p.ElemBytes, p.Root = sendOff, sendOff+4*count, count, 4, 0
		p.Check = kabi.CheckArgs(kernels.OpReduce, kernels.F32, kernels.Sum, 0)
		if r != 2 {
			p.Flags, p.Stage = kabi.FlagPush, 8*mib
		}
		return p
	})
	for r := range ranks {
		require.NoError(t, errs[r])
	}
	timedOut := 0
	for _, r := range []int{1, 3} { // rank 2's predecessor (its credits) and successor (its sums)
		s := w.status(t, r)
		assert.True(t, s.TimedOut() || s.Aborted(), "rank %d: %v", r, s)
		if s.TimedOut() {
			timedOut++
			assert.Equal(t, uint32(kabi.PhasePush), s.Phase(), "rank %d: %v", r, s)
		}
	}
	assert.Positive(t, timedOut, "a rank that waited for rank 2 timed out")
}
