package simkern

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// TestLocalReduceScatter: the one-shot reduce-scatter with FlagLocal
// reduces from the rank's own memory alone (source q at stage + q x
// slice, the own at send + rank x slice) into slot rank of the stage
// area, the copy-engine all-reduce's layout, in one launch or in two
// chunks of half a slice (call_count giving the slice). Each rank is
// launched by itself: with no barrier it must not wait for the others.
// Against kref's reduction in rank order; the other slots and past the
// area unchanged.
func TestLocalReduceScatter(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, ranks := range []int{2, 3, 5} {
		w := newWorkspace(t, ranks, kernels.Unicast)
		for _, k := range []kernels.Kernel{{DType: kernels.F32, Op: kernels.Sum}, {DType: kernels.BF16, Op: kernels.Max}} {
			k.Coll, k.Algo = kernels.CollReduceScatter, kernels.OneShot
			e := k.DType.Size()
			per := kabi.VecBytes / e
			for _, count := range []int{per, 4 * per, 5 * per, (2*kabi.BlockThreads + 37) * per, (2*kabi.BlockThreads + 38) * per} {
				chunks := 1 + (count/per+1)%2 // two where half a slice is whole vectors
				t.Run(fmt.Sprintf("%d-ranks/%s/%d/chunks-%d", ranks, k.Name(), count, chunks), func(t *testing.T) {
					slice := count * e
					stage := uint64(sendOff + (ranks*slice+guard+kabi.VecBytes-1)/kabi.VecBytes*kabi.VecBytes)
					sends, stages := make([][]byte, ranks), make([][]byte, ranks)
					for r := range ranks {
						sends[r] = kref.Input(rng, k.DType, ranks*count)
						stages[r] = append(kref.Input(rng, k.DType, ranks*count), kref.Bytes(rng, guard)...)
						w.write(t, r, sendOff, sends[r])
						w.write(t, r, stage, stages[r])
					}
					m := count / chunks
					for r := range ranks {
						for c := range chunks {
							at := uint64(c * m * e)
							errs := w.launch(t, k.Name(), uint32(1+r%3), kabi.BlockThreads, []int{r}, func(r int) kabi.Params {
								p := w.params(r)
								p.Count, p.CallCount, p.ElemBytes, p.Opcode = uint64(m), uint64(ranks*count), uint32(e), k.Coll.Opcode()
								p.Send, p.Recv, p.Stage, p.Flags = sendOff+uint64(r*slice)+at, stage+uint64(r*slice)+at, stage+at, kabi.FlagLocal
								return p
							})
							require.NoError(t, errs[r], "rank %d chunk %d", r, c)
							assert.Equal(t, "ok", w.status(t, r).String())
						}
					}
					for r := range ranks {
						srcs := make([][]byte, ranks)
						for q := range srcs {
							srcs[q] = stages[r][q*slice : (q+1)*slice]
						}
						srcs[r] = sends[r][r*slice : (r+1)*slice]
						got := w.read(t, r, stage, len(stages[r]))
						checkAllReduce(t, k.DType, k.Op, srcs, got[r*slice:(r+1)*slice], count)
						assert.Equal(t, stages[r][:r*slice], got[:r*slice], "rank %d: the slots before its own changed", r)
						assert.Equal(t, stages[r][(r+1)*slice:], got[(r+1)*slice:], "rank %d: the slots after its own, or the guard, changed", r)
					}
				})
			}
		}
	}
}

// TestLocalContract: FlagLocal needs a stage area clear of send and whole
// 16-byte vectors a slice.
func TestLocalContract(t *testing.T) {
	w := newWorkspace(t, 2, kernels.Unicast)
	name := kernels.Kernel{Coll: kernels.CollReduceScatter, Algo: kernels.OneShot, DType: kernels.F32, Op: kernels.Sum}.Name()
	for _, tc := range []struct {
		what  string
		count uint64
		stage uint64
	}{
		{"no stage", 64, 0},
		{"stage over send", 64, sendOff + 128},
		{"a slice not whole vectors", 63, sendOff + 1<<17},
	} {
		t.Run(tc.what, func(t *testing.T) {
			errs := w.launch(t, name, 1, kabi.BlockThreads, []int{0}, func(r int) kabi.Params {
				p := w.params(r)
				p.Count, p.CallCount, p.ElemBytes, p.Opcode = tc.count, 2*tc.count, 4, kernels.CollReduceScatter.Opcode()
				p.Send, p.Recv, p.Stage, p.Flags = sendOff, sendOff+1<<16, tc.stage, kabi.FlagLocal
				return p
			})
			require.Error(t, errs[0])
			assert.ErrorIs(t, errs[0], ErrContract)
		})
	}
}
