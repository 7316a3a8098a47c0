package kernels

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// halfValue decodes f16 bits from the format's definition (1 sign, 5
// exponent, 10 mantissa bits, bias 15), independently of the float16
// package.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, mant := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(mant, -24)
	case 31:
		if mant != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+mant, exp-25)
}

// TestHostHalves: every bit pattern of Float16 and BFloat16 reads as the
// format says, and every value that is not a NaN converts back to the
// same bits (so Float16Of and BFloat16Of round exactly representable
// values to themselves).
func TestHostHalves(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		want := halfValue(h)
		got := Float16(h).Float32()
		bf := BFloat16(h).Float32()
		bfWant := math.Float32frombits(uint32(h) << 16)
		if math.IsNaN(want) {
			assert.True(t, math.IsNaN(float64(got)), "f16 %#04x", h)
		} else {
			assert.Equal(t, want, float64(got), "f16 %#04x", h)
			assert.Equal(t, Float16(h), Float16Of(got), "f16 %#04x round trip", h)
		}
		if bfWant != bfWant {
			assert.True(t, bf != bf, "bf16 %#04x", h)
			assert.True(t, BFloat16Of(bf).Float32() != BFloat16Of(bf).Float32(), "bf16 %#04x: NaN stays NaN", h)
			continue
		}
		assert.Equal(t, bfWant, bf, "bf16 %#04x", h)
		assert.Equal(t, BFloat16(h), BFloat16Of(bf), "bf16 %#04x round trip", h)
	}
	// Rounding: ties to even, as the device's cvt.rn.
	assert.Equal(t, Float16(0x3c00), Float16Of(1+1.0/2048))
	assert.Equal(t, BFloat16(0x3f82), BFloat16Of(1+3.0/256))
}

func TestDTypeOf(t *testing.T) {
	assert.Equal(t, F32, DTypeOf[float32]())
	assert.Equal(t, F16, DTypeOf[Float16]())
	assert.Equal(t, BF16, DTypeOf[BFloat16]())
	assert.Equal(t, S32, DTypeOf[int32]())
	assert.Equal(t, U32, DTypeOf[uint32]())
	assert.Equal(t, U64, DTypeOf[uint64]())
	// Every element type has its Go type, of its size.
	sizes := map[DType]int{DTypeOf[float32](): 4, DTypeOf[Float16](): 2, DTypeOf[BFloat16](): 2,
		DTypeOf[int32](): 4, DTypeOf[uint32](): 4, DTypeOf[uint64](): 8}
	require.Len(t, sizes, len(DTypes))
	for dt, n := range sizes {
		assert.Equal(t, dt.Size(), n, "%v", dt)
	}
}
