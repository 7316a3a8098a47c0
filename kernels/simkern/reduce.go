package simkern

import (
	"encoding/binary"
	"math"

	"github.com/x448/float16"

	"github.com/nvls-go/nvls/kernels"
)

var le = binary.LittleEndian

// bf16ToF32 widens a bfloat16 (exact).
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds to nearest even, as cvt.rn.bf16.f32 does; NaN stays a
// (quiet) NaN.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func f16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }
func f32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// fmin and fmax are PTX's min.f32 / max.f32: a NaN operand yields the
// other operand; -0 orders below +0.
func fmin(a, b float32) float32 {
	switch {
	case a != a:
		return b
	case b != b:
		return a
	case a < b:
		return a
	case b < a:
		return b
	case math.Signbit(float64(a)):
		return a
	}
	return b
}

func fmax(a, b float32) float32 {
	switch {
	case a != a:
		return b
	case b != b:
		return a
	case a > b:
		return a
	case b > a:
		return b
	case math.Signbit(float64(a)):
		return b
	}
	return a
}

func fop(op kernels.RedOp) func(a, b float32) float32 {
	switch op {
	case kernels.Min:
		return fmin
	case kernels.Max:
		return fmax
	}
	return func(a, b float32) float32 { return a + b }
}

// lanes reduces srcs (one per rank, in rank order, each len(dst) bytes)
// element by element into dst: acc = get(srcs[0]); acc = op(acc,
// get(srcs[r])) for r = 1..; put(dst, acc).
func lanes[A any](dst []byte, srcs [][]byte, size int, get func([]byte) A, put func([]byte, A), op func(A, A) A) {
	for i := 0; i+size <= len(dst); i += size {
		acc := get(srcs[0][i:])
		for _, s := range srcs[1:] {
			acc = op(acc, get(s[i:]))
		}
		put(dst[i:], acc)
	}
}

func iop[T int32 | uint32 | uint64](op kernels.RedOp) func(a, b T) T {
	switch op {
	case kernels.Min:
		return func(a, b T) T { return min(a, b) }
	case kernels.Max:
		return func(a, b T) T { return max(a, b) }
	}
	return func(a, b T) T { return a + b }
}

// reduce is the reduction the kernels do: dst = op over srcs, element-wise,
// with 16-bit floats widened to f32, reduced in f32 in the order of srcs
// and rounded once. len(dst) is a multiple of dt.Size(); dst may alias
// none of srcs.
func reduce(dt kernels.DType, op kernels.RedOp, dst []byte, srcs [][]byte) {
	switch dt {
	case kernels.F32:
		lanes(dst, srcs, 4,
			func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) },
			func(b []byte, a float32) { le.PutUint32(b, math.Float32bits(a)) }, fop(op))
	case kernels.F16:
		lanes(dst, srcs, 2,
			func(b []byte) float32 { return f16ToF32(le.Uint16(b)) },
			func(b []byte, a float32) { le.PutUint16(b, f32ToF16(a)) }, fop(op))
	case kernels.BF16:
		lanes(dst, srcs, 2,
			func(b []byte) float32 { return bf16ToF32(le.Uint16(b)) },
			func(b []byte, a float32) { le.PutUint16(b, f32ToBF16(a)) }, fop(op))
	case kernels.S32:
		lanes(dst, srcs, 4,
			func(b []byte) int32 { return int32(le.Uint32(b)) },
			func(b []byte, a int32) { le.PutUint32(b, uint32(a)) }, iop[int32](op))
	case kernels.U32:
		lanes(dst, srcs, 4, le.Uint32, le.PutUint32, iop[uint32](op))
	case kernels.U64:
		lanes(dst, srcs, 8, le.Uint64, le.PutUint64, iop[uint64](op))
	}
}
