package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/x448/float16"
)

// TestRoundingConversions checks the 16-bit float conversions against
// exact cases: round to nearest, ties to even; NaN stays NaN.
func TestRoundingConversions(t *testing.T) {
	// bf16: 1 + 2^-8 is halfway between 1 and 1+2^-7: ties to even (1).
	assert.Equal(t, uint64(0x3f80), BF16.FromFloat32(1+1.0/256))
	// 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: up.
	assert.Equal(t, uint64(0x3f82), BF16.FromFloat32(1+3.0/256))
	assert.Equal(t, uint64(0x3f81), BF16.FromFloat32(1+1.0/256+1.0/65536))
	assert.Equal(t, -2.5, BF16.Float64(BF16.FromFloat32(-2.5)))
	assert.True(t, math.IsNaN(BF16.Float64(BF16.FromFloat32(float32(math.NaN())))))
	// f16: 1 + 2^-11 ties to even (1); 2049 rounds to 2048, 2051 to 2052.
	assert.Equal(t, uint64(0x3c00), F16.FromFloat32(1+1.0/2048))
	assert.Equal(t, 2048.0, F16.Float64(F16.FromFloat32(2049)))
	assert.Equal(t, 2052.0, F16.Float64(F16.FromFloat32(2051)))
	assert.Equal(t, uint64(0x3f80), BF16.FromFloat32(1))
	assert.Equal(t, uint64(0xc000), BF16.FromFloat32(-2))
	for range 1000 {
		f := rand.Float32()*2 - 1
		g := BF16.Float64(BF16.FromFloat32(f))
		assert.LessOrEqual(t, math.Abs(float64(f)-g), math.Abs(float64(f))*0x1p-8)
	}
	assert.Equal(t, uint64(math.Float32bits(-0.75)), F32.FromFloat32(-0.75))
	assert.Panics(t, func() { S32.FromFloat32(1) })
}

// TestCodec: every type's bits round-trip through Bits/PutBits and the
// bulk forms, and Float64 gives the value an independent decoder gives.
func TestCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
	for _, dt := range DTypes {
		const n = 64
		b := make([]byte, n*dt.Size())
		bits := make([]uint64, n)
		for i := range bits {
			bits[i] = rng.Uint64() & (1<<(8*dt.Size()) - 1)
			dt.PutBits(b, i, bits[i])
		}
		for i := range bits {
			got := dt.Bits(b, i)
			assert.Equal(t, bits[i], got, "%v element %d", dt, i)
			want := independentValue(dt, got)
			if math.IsNaN(want) {
				assert.True(t, math.IsNaN(dt.Float64(got)), "%v %#x", dt, got)
			} else {
				assert.Equal(t, want, dt.Float64(got), "%v %#x", dt, got)
			}
		}
		c := make([]byte, len(b))
		if dt.Kind() == Float {
			f := make([]float32, n)
			dt.Float32s(f, b)
			dt.PutFloat32s(c, f)
			for i := range f {
				if !math.IsNaN(float64(f[i])) {
					assert.Equal(t, dt.Bits(b, i), dt.Bits(c, i), "%v element %d: widening is exact", dt, i)
				}
			}
		} else {
			v := make([]uint64, n)
			dt.Ints(v, b)
			dt.PutInts(c, v)
			assert.Equal(t, b, c, "%v", dt)
			if dt == S32 {
				for i := range v {
					assert.Equal(t, int64(int32(uint32(bits[i]))), int64(v[i]), "s32 sign-extends")
				}
			}
		}
	}
}

func independentValue(dt DType, bits uint64) float64 {
	switch dt {
	case F32:
		return float64(math.Float32frombits(uint32(bits)))
	case F16:
		return float64(float16.Frombits(uint16(bits)).Float32())
	case BF16:
		return float64(math.Float32frombits(uint32(bits) << 16))
	case S32:
		return float64(int32(bits))
	case U32:
		return float64(uint32(bits))
	}
	return float64(bits)
}

func TestFloatSpacing(t *testing.T) {
	assert.Equal(t, 0x1p-24, F32.UnitRoundoff())
	assert.Equal(t, 0x1p-11, F16.UnitRoundoff())
	assert.Equal(t, 0x1p-8, BF16.UnitRoundoff())
	assert.Equal(t, 0x1p-149, F32.Tiny())
	assert.Equal(t, 0x1p-24, F16.Tiny())
	assert.Equal(t, 0x1p-133, BF16.Tiny())
	assert.Zero(t, U32.UnitRoundoff())
	assert.Zero(t, S32.Tiny())
	assert.Equal(t, 0x1p-23, F32.ULP(1))
	assert.Equal(t, 0x1p-22, F32.ULP(-3))
	assert.Equal(t, 0x1p-10, F16.ULP(1.5))
	assert.Equal(t, F16.Tiny(), F16.ULP(0))
	assert.Equal(t, 1.0, U64.ULP(7))
}
