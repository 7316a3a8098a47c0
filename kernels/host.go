package kernels

import "github.com/x448/float16"

// The element types as Go holds them on the host, for typed copies
// (team.CopyIn, team.CopyOut): float32 is f32, int32 s32, uint32 u32 and
// uint64 u64; the 16-bit floats are their bits, little-endian like every
// element, in a uint16-based type: Float16 (f16) and BFloat16 (bf16).
// float16.Float16 of github.com/x448/float16 is an f16 too, and plain
// uint16 either's bits.

// Elem is the constraint of the typed copies: a Go type whose values are
// elements of one of the element types, byte for byte.
type Elem interface {
	~float32 | ~int32 | ~uint32 | ~uint64 | ~uint16
}

// Float16 is an f16 (IEEE 754 binary16) as its bits.
type Float16 uint16

// Float16Of is the f16 nearest to f (ties to even; a NaN stays a NaN), as
// F16.FromFloat32 and cvt.rn.f16.f32.
func Float16Of(f float32) Float16 { return Float16(float16.Fromfloat32(f).Bits()) }

// Float32 is h's value (exact).
func (h Float16) Float32() float32 { return float16.Frombits(uint16(h)).Float32() }

// BFloat16 is a bf16 (bfloat16: f32's sign and exponent, 7 bits of
// mantissa) as its bits.
type BFloat16 uint16

// BFloat16Of is the bf16 nearest to f (ties to even; a NaN stays a NaN),
// as BF16.FromFloat32 and cvt.rn.bf16.f32.
func BFloat16Of(f float32) BFloat16 { return BFloat16(f32ToBF16(f)) }

// Float32 is b's value (exact).
func (b BFloat16) Float32() float32 { return bf16ToF32(uint16(b)) }

// Type is the constraint of typed buffers (collectives.Buffer): exactly
// the Go types that each stand for one element type, so that a buffer's
// element type follows from its Go type. DTypeOf names it.
type Type interface {
	float32 | Float16 | BFloat16 | int32 | uint32 | uint64
}

// DTypeOf is the element type that Go type T stands for: F32 for float32,
// F16 for Float16, BF16 for BFloat16, S32 for int32, U32 for uint32, U64
// for uint64.
func DTypeOf[T Type]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return F32
	case Float16:
		return F16
	case BFloat16:
		return BF16
	case int32:
		return S32
	case uint32:
		return U32
	default: // uint64: the constraint admits no other type
		return U64
	}
}
