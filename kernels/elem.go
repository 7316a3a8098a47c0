package kernels

import (
	"encoding/binary"
	"math"

	"github.com/x448/float16"
)

// The element codec: how the bytes of an element type read and write, as
// the kernels do it (little-endian; 16-bit floats widened to f32 exactly
// and rounded back to nearest even). The simulator's reference kernels,
// the test oracle and nvls-bench's check all use it. The methods panic on
// an invalid type, as an index out of range does.

var le = binary.LittleEndian

// Bits reads element i of b and returns its bit pattern, zero-extended.
func (t DType) Bits(b []byte, i int) uint64 {
	switch t.Size() {
	case 2:
		return uint64(le.Uint16(b[2*i:]))
	case 4:
		return uint64(le.Uint32(b[4*i:]))
	case 8:
		return le.Uint64(b[8*i:])
	}
	panic("kernels: Bits of an invalid " + t.String())
}

// PutBits writes the low Size() bytes of bits as element i of b.
func (t DType) PutBits(b []byte, i int, bits uint64) {
	switch t.Size() {
	case 2:
		le.PutUint16(b[2*i:], uint16(bits))
	case 4:
		le.PutUint32(b[4*i:], uint32(bits))
	case 8:
		le.PutUint64(b[8*i:], bits)
	default:
		panic("kernels: PutBits of an invalid " + t.String())
	}
}

// Float64 is the value of the bit pattern bits of t: exact for every type
// but u64 above 2^53 (rounded); s32 sign-extended.
func (t DType) Float64(bits uint64) float64 {
	switch t {
	case F32:
		return float64(math.Float32frombits(uint32(bits)))
	case F16:
		return float64(float16.Frombits(uint16(bits)).Float32())
	case BF16:
		return float64(bf16ToF32(uint16(bits)))
	case S32:
		return float64(int32(uint32(bits)))
	case U32:
		return float64(uint32(bits))
	case U64:
		return float64(bits)
	}
	panic("kernels: Float64 of an invalid " + t.String())
}

// FromFloat32 is the bit pattern of the value of the float type t nearest
// to f (ties to even; a NaN stays a NaN), as cvt.rn does.
func (t DType) FromFloat32(f float32) uint64 {
	switch t {
	case F32:
		return uint64(math.Float32bits(f))
	case F16:
		return uint64(float16.Fromfloat32(f).Bits())
	case BF16:
		return uint64(f32ToBF16(f))
	}
	panic("kernels: FromFloat32 to the non-float " + t.String())
}

// UnitRoundoff is half the spacing of t's values at 1 (2^-24 for f32,
// 2^-11 for f16, 2^-8 for bf16): the relative error of one rounding. 0
// for an integer type.
func (t DType) UnitRoundoff() float64 {
	if t.Kind() != Float {
		return 0
	}
	return math.Ldexp(1, -dtypeTable[t].mant-1)
}

// Tiny is the spacing of t's subnormal values (2^-149 for f32, 2^-24 for
// f16, 2^-133 for bf16): the absolute error of one rounding near 0. 0 for
// an integer type.
func (t DType) Tiny() float64 {
	if t.Kind() != Float {
		return 0
	}
	return math.Ldexp(1, dtypeTable[t].minExp-dtypeTable[t].mant)
}

// ULP is the spacing of t's values at |x| (float types; 1 for integers).
func (t DType) ULP(x float64) float64 {
	if t.Kind() != Float {
		return 1
	}
	d := dtypeTable[t]
	if x == 0 {
		return t.Tiny()
	}
	_, e := math.Frexp(math.Abs(x))
	return math.Ldexp(1, max(e-1, d.minExp)-d.mant)
}

// Float32s widens the len(dst) elements of the float type t in b to f32
// (exactly), as the kernels' reductions do.
func (t DType) Float32s(dst []float32, b []byte) {
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = float16.Frombits(le.Uint16(b[2*i:])).Float32()
		}
	case BF16:
		for i := range dst {
			dst[i] = bf16ToF32(le.Uint16(b[2*i:]))
		}
	default:
		panic("kernels: Float32s of the non-float " + t.String())
	}
}

// PutFloat32s rounds src to the float type t (nearest even) into b.
func (t DType) PutFloat32s(b []byte, src []float32) {
	switch t {
	case F32:
		for i, v := range src {
			le.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			le.PutUint16(b[2*i:], float16.Fromfloat32(v).Bits())
		}
	case BF16:
		for i, v := range src {
			le.PutUint16(b[2*i:], f32ToBF16(v))
		}
	default:
		panic("kernels: PutFloat32s to the non-float " + t.String())
	}
}

// Ints widens the len(dst) elements of the integer type t in b to 64
// bits: s32 sign-extended (so that signed values compare as int64),
// unsigned types zero-extended.
func (t DType) Ints(dst []uint64, b []byte) {
	switch t {
	case S32:
		for i := range dst {
			dst[i] = uint64(int64(int32(le.Uint32(b[4*i:]))))
		}
	case U32:
		for i := range dst {
			dst[i] = uint64(le.Uint32(b[4*i:]))
		}
	case U64:
		for i := range dst {
			dst[i] = le.Uint64(b[8*i:])
		}
	default:
		panic("kernels: Ints of the non-integer " + t.String())
	}
}

// PutInts writes src truncated to the width of the integer type t into b
// (so that sums wrap as the device's do).
func (t DType) PutInts(b []byte, src []uint64) {
	switch t {
	case S32, U32:
		for i, v := range src {
			le.PutUint32(b[4*i:], uint32(v))
		}
	case U64:
		for i, v := range src {
			le.PutUint64(b[8*i:], v)
		}
	default:
		panic("kernels: PutInts to the non-integer " + t.String())
	}
}

// bf16ToF32 widens a bfloat16 (exact).
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds to nearest even, as cvt.rn.bf16.f32 does; a NaN stays
// a (quiet) NaN.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
