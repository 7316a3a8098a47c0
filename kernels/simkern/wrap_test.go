package simkern

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// seqStart is where setSlots puts the start barrier's sequence: its next
// value wraps (to 2, skipping a zeroed slot's 0).
const seqStart = 1<<32 - 1

// setSlots writes v into the end barrier's counter and epoch of blocks [0,
// blocks) on every rank, seqStart into their start-barrier sequence, and
// clears their arrival words (a sequence set back must not find the words
// it left before).
func setSlots(t *testing.T, w *workspace, blocks int, v uint32) {
	t.Helper()
	var b, s [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	binary.LittleEndian.PutUint32(s[:], seqStart)
	zero := make([]byte, 8*kabi.MaxRanks)
	for r := range w.ranks {
		for blk := range blocks {
			w.write(t, r, slotOff(kabi.CounterOffset, 1, blk), b[:])
			w.write(t, r, slotOff(kabi.EpochOffset, 1, blk), b[:])
			w.write(t, r, slotOff(kabi.EpochOffset, 0, blk), s[:])
			for parity := range uint32(2) {
				w.write(t, r, arriveOff(parity, blk, 0), zero)
			}
		}
	}
}

// launchLate launches name on every rank but the last at once and on the
// last after delay, calling before(last) just before that launch; it
// returns every rank's error, when each returned, and when the last one
// was launched.
func launchLate(t *testing.T, w *workspace, name string, grid, block uint32, delay time.Duration, before func(r int), mk func(r int) kabi.Params) (errs []error, done []time.Time, late time.Time) {
	last := w.ranks - 1
	errs = make([]error, w.ranks)
	done = make([]time.Time, w.ranks)
	var wg sync.WaitGroup
	for r := range w.ranks {
		wg.Go(func() {
			if r == last {
				time.Sleep(delay)
				before(r)
				late = time.Now()
			}
			errs[r] = w.launch(t, name, grid, block, []int{r}, mk)[r]
			done[r] = time.Now()
		})
	}
	wg.Wait()
	return errs, done, late
}

// TestBarrierWrapLateRank: every end-barrier counter and epoch starts at
// 2^32 - nranks (the start barrier's sequence at 2^32 - 1, next 2), so that
// a barrier's target (epoch + nranks) wraps to 0 while the
// counter, after the arrivals of every rank but the last, is still at most
// 2^32 - 1: a compare that is not wrap-safe (got >= target) lets the early
// ranks through before the last rank arrives. The last rank launches late.
// The barrier kernel: no early rank returns before the late one launched.
// A one-shot and a two-shot all-reduce whose late rank's input is written
// just before it launches (its send buffer holds other bytes until then):
// every rank's result is the reduction of the inputs, so no rank read the
// late rank's buffer before it arrived.
func TestBarrierWrapLateRank(t *testing.T) {
	const delay = 50 * time.Millisecond
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		for _, ranks := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%v/%d-ranks", f, ranks), func(t *testing.T) {
				w := newWorkspace(t, ranks, f)
				start := uint32(1<<32 - ranks)

				setSlots(t, w, 1, start)
				errs, done, late := launchLate(t, w, kernels.BarrierName, 1, 32, delay, func(int) {}, func(r int) kabi.Params {
					p := w.params(r)
					p.Opcode = kernels.OpBarrier
					return p
				})
				for r := range ranks {
					require.NoError(t, errs[r], "rank %d", r)
					assert.False(t, done[r].Before(late), "rank %d left the barrier at the wrap before the late rank arrived", r)
					assert.Equal(t, seqAfter(seqStart, 1), w.u32(t, r, slotOff(kabi.EpochOffset, 0, 0)), "rank %d sequence", r)
				}

				rng, seed := kref.NewRNG()
				t.Logf("seed %d", seed)
				for _, algo := range []kernels.Algo{kernels.OneShot, kernels.TwoShot} {
					const grid = 3
					count := (grid*kabi.BlockThreads*ranks+5)*4 + 3 // f32: every block and rank has work, and a tail
					setSlots(t, w, grid, start)
					send, recv := uint64(sendOff), uint64(sendOff+1<<19)
					ins := make([][]byte, ranks)
					for r := range ranks {
						ins[r] = kref.Input(rng, kernels.F32, count)
						if r < ranks-1 {
							w.write(t, r, send, ins[r])
						} else {
							w.write(t, r, send, randBytes(t, 4*count)) // not yet its input
						}
						w.write(t, r, recv, randBytes(t, 4*count))
					}
					name := kernels.AllReduceName(kernels.F32, kernels.Sum, algo)
					errs, _, _ := launchLate(t, w, name, grid, kabi.BlockThreads, delay, func(r int) { w.write(t, r, send, ins[r]) }, func(r int) kabi.Params {
						p := w.params(r)
						p.Send, p.Recv, p.Count, p.ElemBytes, p.Opcode = send, recv, uint64(count), 4, kernels.OpAllReduce
						return p
					})
					for r := range ranks {
						require.NoError(t, errs[r], "%v rank %d", algo, r)
						assert.Equal(t, "ok", w.status(t, r).String(), "%v rank %d", algo, r)
						bad, n := kref.CheckAllReduce(kernels.F32, kernels.Sum, ins, w.read(t, r, recv, 4*count), count, 3)
						assert.Zero(t, n, "%v rank %d: %d wrong elements (read the late rank's buffer before it arrived?): %v", algo, r, n, bad)
						assert.Equal(t, uint32(0), w.u32(t, r, slotOff(kabi.EpochOffset, 1, grid-1)), "%v rank %d epoch [1][%d]", algo, r, grid-1)
						assert.Equal(t, seqAfter(seqStart, 1), w.u32(t, r, slotOff(kabi.EpochOffset, 0, grid-1)), "%v rank %d sequence [0][%d]", algo, r, grid-1)
					}
				}
			})
		}
	}
}
