package kabi

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLayout: on random data sizes and granularities, the regions tile
// the allocation (signal, data, padding, in that order, without gaps),
// the size is the least multiple of the granularity that holds signal and
// data, and Where agrees with the bounds, computed here from the
// constants by counting.
func TestLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 2))
	grans := []uint64{0, 1, 4096, 2 << 20, 3 << 20, 6 << 20}
	for range 1000 {
		l := Layout{Data: r.Uint64N(64 << 20), Gran: grans[r.IntN(len(grans))]}
		end := SignalBytes + l.Data
		size := end
		if g := l.Gran; g > 1 {
			size = (end + g - 1) / g * g
		}
		assert.Equal(t, size, l.Size(), "%+v", l)
		if l.Gran > 1 {
			assert.Zero(t, l.Size()%l.Gran, "%+v", l)
			assert.Less(t, l.Padding(), l.Gran, "%+v", l)
		}
		assert.Equal(t, uint64(SignalBytes), l.Signal())
		assert.Equal(t, l.Signal(), l.DataStart())
		assert.Equal(t, l.Size(), l.Signal()+l.Data+l.Padding(), "%+v: the regions tile the allocation", l)
		off := r.Uint64N(l.Data + 1)
		assert.Equal(t, SignalBytes+off, l.At(off))
		for _, tc := range []struct {
			off  uint64
			want Region
		}{
			{0, InSignal}, {SignalBytes - 1, InSignal}, {r.Uint64N(SignalBytes), InSignal},
			{size, Outside}, {size + r.Uint64N(1<<30), Outside},
		} {
			assert.Equal(t, tc.want, l.Where(tc.off), "%+v: offset %d", l, tc.off)
		}
		if l.Data > 0 {
			assert.Equal(t, InData, l.Where(SignalBytes), "%+v", l)
			assert.Equal(t, InData, l.Where(end-1), "%+v", l)
			assert.Equal(t, InData, l.Where(SignalBytes+r.Uint64N(l.Data)), "%+v", l)
		}
		if size > end {
			assert.Equal(t, InPadding, l.Where(end), "%+v", l)
			assert.Equal(t, InPadding, l.Where(size-1), "%+v", l)
		} else {
			assert.Equal(t, Outside, l.Where(end), "%+v", l)
		}
	}
	assert.Equal(t, "padding", InPadding.String())
}
