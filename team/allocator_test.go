package team

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllocatorRandom(t *testing.T) {
	const capacity = 1 << 20
	const unit = Alignment
	a := newAllocator(capacity)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	used := make([]bool, capacity/unit) // independent model: which units are taken
	type blk struct{ off, size, id uint64 }
	var live []blk
	for step := 0; step < 20000; step++ {
		if len(live) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(live))
			b := live[i]
			require.NoError(t, a.release(b.off, b.id))
			for u := b.off / unit; u < (b.off+roundUp(b.size, unit))/unit; u++ {
				require.True(t, used[u])
				used[u] = false
			}
			live = append(live[:i], live[i+1:]...)
			// Freeing it again is refused.
			require.ErrorIs(t, a.release(b.off, b.id), ErrBadFree)
			continue
		}
		size := 1 + rng.Uint64N(40000)
		got, err := a.alloc(size)
		off, rounded, id := got.off, got.size, got.id
		// Is there a free run of enough units in the model?
		need := roundUp(size, unit) / unit
		fits, run := false, uint64(0)
		for _, u := range used {
			if u {
				run = 0
			} else if run++; run >= need {
				fits = true
				break
			}
		}
		if err != nil {
			require.ErrorIs(t, err, ErrNoSpace)
			require.False(t, fits, "alloc of %d failed though the model has room", size)
			continue
		}
		assert.Zero(t, off%Alignment)
		assert.Equal(t, roundUp(size, 16), rounded)
		assert.GreaterOrEqual(t, rounded, size)
		require.LessOrEqual(t, off+rounded, uint64(capacity))
		for u := off / unit; u < off/unit+need; u++ {
			require.False(t, used[u], "unit %d handed out twice", u)
			used[u] = true
		}
		live = append(live, blk{off, size, id})
	}
	for _, b := range live {
		require.NoError(t, a.release(b.off, b.id))
	}
	// Everything coalesced back into one span.
	assert.Equal(t, []span{{0, capacity}}, a.free)
	whole, err := a.alloc(capacity)
	off := whole.off
	require.NoError(t, err)
	assert.Zero(t, off)
}

func TestAllocatorEdges(t *testing.T) {
	a := newAllocator(4096)
	_, err := a.alloc(0)
	require.ErrorIs(t, err, ErrZeroSize)
	_, err = a.alloc(4097)
	require.ErrorIs(t, err, ErrNoSpace)
	b1, err := a.alloc(1)
	off1, r1, id1 := b1.off, b1.size, b1.id
	require.NoError(t, err)
	assert.Equal(t, uint64(16), r1)
	b2, err := a.alloc(300)
	off2, id2 := b2.off, b2.id
	require.NoError(t, err)
	assert.Equal(t, off1+Alignment, off2)
	// A stale id (the block was freed and its offset reused) is refused.
	require.NoError(t, a.release(off1, id1))
	b3, err := a.alloc(16)
	off3, id3 := b3.off, b3.id
	require.NoError(t, err)
	assert.Equal(t, off1, off3)
	require.ErrorIs(t, a.release(off1, id1), ErrBadFree)
	require.NoError(t, a.release(off3, id3))
	require.NoError(t, a.release(off2, id2))
	assert.Equal(t, []span{{0, 4096}}, a.free)
}

// TestAllocatorFind: find agrees with a search of every live block, over
// random allocations, frees and ranges (edges, zero lengths and ranges
// that run past a block's end or fall in the padding included).
func TestAllocatorFind(t *testing.T) {
	const capacity = 1 << 16
	a := newAllocator(capacity)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var live []block
	ref := func(off, n uint64) (block, bool) {
		for _, b := range live {
			if off >= b.off && off < b.off+b.size && n <= b.off+b.size-off {
				return b, true
			}
		}
		return block{}, false
	}
	for step := 0; step < 5000; step++ {
		switch {
		case len(live) > 0 && rng.IntN(3) == 0:
			i := rng.IntN(len(live))
			require.NoError(t, a.release(live[i].off, live[i].id))
			live = append(live[:i], live[i+1:]...)
		case rng.IntN(2) == 0:
			if b, err := a.alloc(1 + rng.Uint64N(3000)); err == nil {
				live = append(live, b)
			}
		}
		for q := 0; q < 8; q++ {
			off := rng.Uint64N(capacity + 512)
			var n uint64
			switch rng.IntN(4) {
			case 0:
				n = 0
			case 1:
				n = 1 + rng.Uint64N(64)
			default:
				n = rng.Uint64N(4000)
			}
			if len(live) > 0 && rng.IntN(2) == 0 { // aim at a block's edges
				b := live[rng.IntN(len(live))]
				off = b.off + []uint64{0, b.size - 1, b.size, b.size / 2}[rng.IntN(4)]
				n = []uint64{1, b.size - (off - min(off, b.off)), b.size + 1, 16}[rng.IntN(4)]
			}
			want, wok := ref(off, n)
			got, ok := a.find(off, n)
			require.Equal(t, wok, ok, "find(%d, %d) over %v", off, n, live)
			require.Equal(t, want, got, "find(%d, %d)", off, n)
		}
	}
}
