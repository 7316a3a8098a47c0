package simkern

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

func slotOff(base uint64, phase, block int) uint64 {
	return base + uint64(phase*kabi.MaxBlocks+block)*4
}

// arriveOff is the offset of rank's start-barrier arrival word for
// sequence seq of block.
func arriveOff(seq uint32, block, rank int) uint64 {
	return arriveSlots(seq, uint64(block)) + 8*uint64(rank)
}

// seqAfter is the start-barrier sequence after n barriers from start.
func seqAfter(start uint32, n int) uint32 {
	for range n {
		start = nextSeq(start)
	}
	return start
}

// TestBarrierEpochWrap starts every counter and epoch 3 below 2^32 and runs
// ten barriers and then all-reduces through the wrap: the start barrier's
// sequence skips 0 (a zeroed arrival slot's) and the end barrier's counter
// compare is wrap-safe.
func TestBarrierEpochWrap(t *testing.T) {
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		t.Run(f.String(), func(t *testing.T) {
			const ranks = 4
			w := newWorkspace(t, ranks, f)
			start := uint32(1<<32 - 3)
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], start)
			for r := range ranks {
				for ph := range kabi.Phases {
					for blk := range 4 {
						w.write(t, r, slotOff(kabi.CounterOffset, ph, blk), b[:])
						w.write(t, r, slotOff(kabi.EpochOffset, ph, blk), b[:])
					}
				}
			}
			for i := range 10 {
				errs := w.launch(t, kernels.BarrierName, 1, 32, nil, func(r int) kabi.Params {
					p := w.params(r)
					p.Opcode = kernels.OpBarrier
					return p
				})
				for r, err := range errs {
					require.NoError(t, err, "barrier %d rank %d", i, r)
				}
			}
			for r := range ranks {
				assert.Equal(t, start, w.u32(t, r, slotOff(kabi.CounterOffset, 0, 0)), "rank %d: the start barrier counts nothing", r)
				assert.Equal(t, seqAfter(start, 10), w.u32(t, r, slotOff(kabi.EpochOffset, 0, 0)), "rank %d sequence", r)
				assert.Equal(t, uint32(9), w.u32(t, r, slotOff(kabi.EpochOffset, 0, 0)), "rank %d: the sequence skips 0", r)
				assert.Equal(t, "ok", w.status(t, r).String())
			}
			// Multi-block all-reduces across the wrap of slots [*][0..3].
			rng, _ := kref.NewRNG()
			for range 3 {
				runAllReduce(t, w, rng, kernels.TwoShot, kernels.F32, kernels.Sum, kref.SizeCase{Name: "wrap", Count: func(per, _ int) int { return 4*kabi.BlockThreads*per + 3 }, Grid: 4})
			}
			for r := range ranks {
				assert.Equal(t, start+3*ranks, w.u32(t, r, slotOff(kabi.EpochOffset, 1, 3)), "rank %d epoch [1][3]", r)
				assert.Equal(t, seqAfter(start, 3), w.u32(t, r, slotOff(kabi.EpochOffset, 0, 3)), "rank %d sequence [0][3]", r)
			}
		})
	}
}

// TestBarrierWaitsForLateRank: no rank leaves the barrier before the last
// one has arrived, also after many barriers (no stale count releases it).
func TestBarrierWaitsForLateRank(t *testing.T) {
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		t.Run(f.String(), func(t *testing.T) {
			const ranks = 3
			w := newWorkspace(t, ranks, f)
			bar := func(r int) kabi.Params { p := w.params(r); p.Opcode = kernels.OpBarrier; return p }
			for range 5 {
				for _, err := range w.launch(t, kernels.BarrierName, 1, 32, nil, bar) {
					require.NoError(t, err)
				}
			}
			const delay = 50 * time.Millisecond
			var mu sync.Mutex
			var late time.Time
			done := make([]time.Time, ranks)
			var wg sync.WaitGroup
			for r := range ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r == ranks-1 {
						time.Sleep(delay)
						mu.Lock()
						late = time.Now()
						mu.Unlock()
					}
					assert.NoError(t, w.launch(t, kernels.BarrierName, 1, 32, []int{r}, bar)[r])
					done[r] = time.Now()
				}()
			}
			wg.Wait()
			for r := range ranks {
				assert.False(t, done[r].Before(late), "rank %d left the barrier before the late rank arrived", r)
			}
		})
	}
}

// TestTimeout: one rank never launches; the others return within the
// deadline, with the status word naming the operation, the phase and the
// block, and no kernel fault.
func TestTimeout(t *testing.T) {
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		t.Run(f.String(), func(t *testing.T) {
			const ranks = 4
			const timeout = 100 * time.Millisecond
			cases := []struct {
				name   string
				opcode uint32
				grid   uint32
				p      func(p *kabi.Params)
			}{
				{kernels.AllReduceName(kernels.F32, kernels.Sum, kernels.OneShot), kernels.OpAllReduce, 3, func(p *kabi.Params) {
					p.Send, p.Recv, p.Count, p.ElemBytes = sendOff, sendOff+1<<16, 1000, 4
				}},
				{kernels.BroadcastName, kernels.OpBroadcast, 2, func(p *kabi.Params) {
					p.Send, p.Recv, p.Count, p.ElemBytes, p.Root = sendOff, sendOff+1<<16, 100, 1, 2
				}},
				{kernels.BarrierName, kernels.OpBarrier, 1, func(*kabi.Params) {}},
			}
			for _, c := range cases {
				// A timed-out team's counters no longer agree (the ranks
				// that arrived counted themselves): a fresh one per case.
				w := newWorkspace(t, ranks, f)
				block := uint32(kabi.BlockThreads)
				t0 := time.Now()
				errs := w.launch(t, c.name, c.grid, block, []int{0, 1, 2}, func(r int) kabi.Params {
					p := w.params(r)
					p.TimeoutNs, p.Opcode = uint64(timeout), c.opcode
					c.p(&p)
					return p
				})
				el := time.Since(t0)
				assert.GreaterOrEqual(t, el, timeout, c.name)
				assert.Less(t, el, timeout+2*time.Second, "%s: returned long after the deadline", c.name)
				// The first rank to time out marks the team failed; the
				// others time out too, or give up on seeing that.
				timedOut := 0
				for r := range 3 {
					require.NoError(t, errs[r], "%s rank %d: a timeout is not a kernel fault", c.name, r)
					s := w.status(t, r)
					if s.TimedOut() {
						timedOut++
						assert.Equal(t, kabi.TimeoutStatus(c.opcode, 0, 0), s.Word, "%s rank %d: %v", c.name, r, s)
						continue
					}
					assert.True(t, s.Aborted(), "%s rank %d: %v", c.name, r, s)
					assert.Equal(t, c.opcode, s.Opcode(), "%s rank %d: %v", c.name, r, s)
					assert.Equal(t, uint32(0), s.Phase(), "%s rank %d: %v", c.name, r, s)
				}
				assert.NotZero(t, timedOut, c.name)
				assert.Equal(t, "ok", w.status(t, 3).String(), "the rank that never ran")
			}
		})
	}
}

// TestTimeoutEndPhase: the peer arrives at the start barrier and then
// never at the end one (its kernel died in between): the status names
// phase 1.
func TestTimeoutEndPhase(t *testing.T) {
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		w := newWorkspace(t, 2, f)
		mk := func(r int) kabi.Params {
			p := w.params(r)
			p.Opcode, p.TimeoutNs = kernels.OpBroadcast, uint64(20*time.Millisecond)
			p.Send, p.Recv, p.Count, p.ElemBytes = sendOff, sendOff+4096, 64, 1
			p.Check = kabi.CheckArgs(kernels.OpBroadcast, kernels.F32, 0, 0)
			return p
		}
		// Rank 1's arrival at the start barrier (sequence 1, block 0) of
		// rank 0, with the same arguments.
		var word [8]byte
		p1 := mk(1)
		binary.LittleEndian.PutUint64(word[:], 1<<56|kabi.CallWord(p1.Check, p1.Count))
		w.write(t, 0, arriveOff(1, 0, 1), word[:])
		errs := w.launch(t, kernels.BroadcastName, 1, kabi.BlockThreads, []int{0}, mk)
		require.NoError(t, errs[0])
		s := w.status(t, 0)
		assert.Equal(t, kabi.TimeoutStatus(kernels.OpBroadcast, 1, 0), s.Word, "%v: %v", f, s)
		assert.Equal(t, uint32(1), w.u32(t, 0, slotOff(kabi.EpochOffset, 0, 0)), "%v: the start barrier completed", f)
		assert.Equal(t, uint32(0), w.u32(t, 0, slotOff(kabi.EpochOffset, 1, 0)), "%v: a timed-out wait leaves its epoch", f)
	}
}

// TestBroadcast: count elements of elem_bytes bytes each (1 to 8) land
// in every rank's recv, nothing past them; in the unicast flavor also
// sliced (kabi.FlagSliced), where the ranks other than the root pass
// their own recv as send and learn the root's from its kernel.
func TestBroadcast(t *testing.T) {
	rng, _ := kref.NewRNG()
	for _, ranks := range []int{2, 3, 4, 8} {
		for _, v := range []struct {
			f      kernels.Flavor
			sliced bool
		}{{kernels.Unicast, false}, {kernels.Unicast, true}, {kernels.Multicast, false}} {
			f := v.f
			w := newWorkspace(t, ranks, f)
			for _, c := range []struct {
				count, esize int
				grid         uint32
				inPlace      bool
			}{{1, 1, 1, false}, {15, 1, 2, false}, {16, 1, 1, false}, {16*3*kabi.BlockThreads + 16*5 + 7, 1, 3, false}, {1000, 1, 2, true}, {33, 1, 4, true},
				{7, 2, 1, false}, {3*kabi.BlockThreads + 5, 4, 3, false}, {501, 8, 2, true}} {
				root := rng.IntN(ranks)
				n := c.count * c.esize
				send := uint64(sendOff)
				recv := send + uint64(n+guard+15)/16*16
				if c.inPlace {
					recv = send
				}
				data := randBytes(t, n)
				guards := make([][]byte, ranks)
				for r := range ranks {
					if r == root {
						w.write(t, r, send, data)
					} else {
						w.write(t, r, send, randBytes(t, n))
						w.write(t, r, recv, randBytes(t, n))
					}
					guards[r] = randBytes(t, guard)
					w.write(t, r, recv+uint64(n), guards[r])
				}
				errs := w.launch(t, kernels.BroadcastName, c.grid, kabi.BlockThreads, nil, func(r int) kabi.Params {
					p := w.params(r)
					p.Send, p.Recv, p.Count, p.ElemBytes, p.Root, p.Opcode = send, recv, uint64(c.count), uint32(c.esize), uint32(root), kernels.OpBroadcast
					if v.sliced {
						p.Flags = kabi.FlagSliced
						if r != root {
							p.Send = recv
						}
					}
					return p
				})
				for r := range ranks {
					require.NoError(t, errs[r])
					assert.Equal(t, data, w.read(t, r, recv, n), "%d ranks %v sliced %v count %d x %d bytes root %d: rank %d", ranks, f, v.sliced, c.count, c.esize, root, r)
					assert.Equal(t, guards[r], w.read(t, r, recv+uint64(n), guard), "rank %d guard", r)
					assert.Equal(t, "ok", w.status(t, r).String())
				}
			}
		}
	}
}

func TestContractViolations(t *testing.T) {
	w := newWorkspace(t, 2, kernels.Multicast)
	ar := kernels.AllReduceName(kernels.F32, kernels.Sum, kernels.OneShot)
	base := func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.Count, p.ElemBytes, p.Opcode = sendOff, sendOff+4096, 100, 4, kernels.OpAllReduce
		return p
	}
	cases := []struct {
		what  string
		name  string
		grid  uint32
		block uint32
		mod   func(p *kabi.Params)
	}{
		{"f32 max has no multicast kernel", kernels.AllReduceName(kernels.F32, kernels.Max, kernels.TwoShot), 1, kabi.BlockThreads, func(*kabi.Params) {}},
		{"in place one-shot without stage", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Recv = p.Send }},
		{"misaligned recv", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Recv += 4 }},
		{"recv in the signal area", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Recv = kabi.CounterOffset }},
		{"overlapping send and recv", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Recv = p.Send + 16 }},
		{"rank out of range", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Rank = 2 }},
		{"nranks 0", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.NRanks = 0 }},
		{"missing uc", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.UC[1] = 0 }},
		{"flags", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Flags = 1 }},
		{"grid too large", ar, kabi.MaxBlocks + 1, kabi.BlockThreads, func(*kabi.Params) {}},
		{"wrong block size", ar, 1, 256, func(*kabi.Params) {}},
		{"broadcast root out of range", kernels.BroadcastName, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Root = 5 }},
		{"broadcast without an element size", kernels.BroadcastName, 1, kabi.BlockThreads, func(p *kabi.Params) { p.ElemBytes = 0 }},
		{"elem_bytes not the type's", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.ElemBytes = 2 }},
		{"an LL area for a one-shot", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.LLArea, p.LLLines = 1<<20, 4096 }},
		{"a root for an all-reduce", ar, 1, kabi.BlockThreads, func(p *kabi.Params) { p.Root = 1 }},
		{"a stage for a two-shot", kernels.AllReduceName(kernels.F32, kernels.Sum, kernels.TwoShot), 1, kabi.BlockThreads, func(p *kabi.Params) { p.Stage = sendOff + 8192 }},
		{"barrier grid 2", kernels.BarrierName, 2, 32, func(*kabi.Params) {}},
		{"barrier block smaller than the team", kernels.BarrierName, 1, 1, func(*kabi.Params) {}},
	}
	for _, c := range cases {
		errs := w.launch(t, c.name, c.grid, c.block, []int{0}, func(r int) kabi.Params {
			p := base(r)
			c.mod(&p)
			return p
		})
		assert.True(t, errors.Is(errs[0], ErrContract), "%s: %v", c.what, errs[0])
	}
	// A unicast-flavor launch (mc = 0) of an address the device cannot
	// reach is the simulator's illegal address, not a contract error.
	errs := w.launch(t, ar, 1, kabi.BlockThreads, []int{0, 1}, func(r int) kabi.Params {
		p := base(r)
		p.MC = 0
		p.Send = w.size // past the allocation
		p.Recv = w.size + 1<<16
		return p
	})
	assert.True(t, errors.Is(errs[0], cuda.ErrIllegalAddress), "%v", errs[0])
}
