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

// scratch holds reusable per-launch buffers of the reductions.
type scratch struct {
	facc, fx []float32
	iacc, ix []uint64
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// reduce is the reduction the kernels do: dst = op over srcs, element-wise,
// in the order of srcs (rank order); 16-bit floats are widened to f32,
// reduced in f32 and rounded once to nearest even. len(dst) and every
// len(srcs[r]) are the same multiple of dt.Size().
func reduce(dt kernels.DType, op kernels.RedOp, dst []byte, srcs [][]byte) {
	var sc scratch
	sc.reduce(dt, op, dst, srcs)
}

func (sc *scratch) reduce(dt kernels.DType, op kernels.RedOp, dst []byte, srcs [][]byte) {
	n := len(dst) / dt.Size()
	switch dt {
	case kernels.F32, kernels.F16, kernels.BF16:
		sc.facc, sc.fx = grow(sc.facc, n), grow(sc.fx, n)
		acc, x := sc.facc, sc.fx
		decodeF(dt, acc, srcs[0])
		for _, s := range srcs[1:] {
			decodeF(dt, x, s)
			switch op {
			case kernels.Sum:
				for i := range acc {
					acc[i] += x[i]
				}
			case kernels.Min:
				for i := range acc {
					acc[i] = fmin(acc[i], x[i])
				}
			case kernels.Max:
				for i := range acc {
					acc[i] = fmax(acc[i], x[i])
				}
			}
		}
		encodeF(dt, dst, acc)
	case kernels.S32, kernels.U32, kernels.U64:
		sc.iacc, sc.ix = grow(sc.iacc, n), grow(sc.ix, n)
		acc, x := sc.iacc, sc.ix
		decodeI(dt, acc, srcs[0])
		for _, s := range srcs[1:] {
			decodeI(dt, x, s)
			switch {
			case op == kernels.Sum:
				// Wraps in the element width once truncated by encodeI.
				for i := range acc {
					acc[i] += x[i]
				}
			case dt == kernels.S32 && op == kernels.Min:
				for i := range acc {
					acc[i] = uint64(min(int64(acc[i]), int64(x[i])))
				}
			case dt == kernels.S32 && op == kernels.Max:
				for i := range acc {
					acc[i] = uint64(max(int64(acc[i]), int64(x[i])))
				}
			case op == kernels.Min:
				for i := range acc {
					acc[i] = min(acc[i], x[i])
				}
			case op == kernels.Max:
				for i := range acc {
					acc[i] = max(acc[i], x[i])
				}
			}
		}
		encodeI(dt, dst, acc)
	}
}

func decodeF(dt kernels.DType, out []float32, b []byte) {
	switch dt {
	case kernels.F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case kernels.F16:
		for i := range out {
			out[i] = f16ToF32(le.Uint16(b[2*i:]))
		}
	case kernels.BF16:
		for i := range out {
			out[i] = bf16ToF32(le.Uint16(b[2*i:]))
		}
	}
}

func encodeF(dt kernels.DType, b []byte, in []float32) {
	switch dt {
	case kernels.F32:
		for i, v := range in {
			le.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case kernels.F16:
		for i, v := range in {
			le.PutUint16(b[2*i:], f32ToF16(v))
		}
	case kernels.BF16:
		for i, v := range in {
			le.PutUint16(b[2*i:], f32ToBF16(v))
		}
	}
}

// decodeI widens integers to 64 bits: s32 sign-extended (so that signed
// min/max compare as int64), u32 zero-extended.
func decodeI(dt kernels.DType, out []uint64, b []byte) {
	switch dt {
	case kernels.S32:
		for i := range out {
			out[i] = uint64(int64(int32(le.Uint32(b[4*i:]))))
		}
	case kernels.U32:
		for i := range out {
			out[i] = uint64(le.Uint32(b[4*i:]))
		}
	case kernels.U64:
		for i := range out {
			out[i] = le.Uint64(b[8*i:])
		}
	}
}

func encodeI(dt kernels.DType, b []byte, in []uint64) {
	if dt == kernels.U64 {
		for i, v := range in {
			le.PutUint64(b[8*i:], v)
		}
		return
	}
	for i, v := range in {
		le.PutUint32(b[4*i:], uint32(v))
	}
}
