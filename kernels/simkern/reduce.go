package simkern

import (
	"encoding/binary"
	"math"

	"github.com/nvls-go/nvls/kernels"
)

var le = binary.LittleEndian

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
	if dt.Kind() == kernels.Float {
		sc.facc, sc.fx = grow(sc.facc, n), grow(sc.fx, n)
		acc, x := sc.facc, sc.fx
		dt.Float32s(acc, srcs[0])
		for _, s := range srcs[1:] {
			dt.Float32s(x, s)
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
		dt.PutFloat32s(dst, acc)
		return
	}
	sc.iacc, sc.ix = grow(sc.iacc, n), grow(sc.ix, n)
	acc, x := sc.iacc, sc.ix
	dt.Ints(acc, srcs[0])
	signed := dt.Kind() == kernels.Signed
	for _, s := range srcs[1:] {
		dt.Ints(x, s)
		switch {
		case op == kernels.Sum:
			// Wraps in the element width once truncated by PutInts.
			for i := range acc {
				acc[i] += x[i]
			}
		case signed && op == kernels.Min:
			for i := range acc {
				acc[i] = uint64(min(int64(acc[i]), int64(x[i])))
			}
		case signed && op == kernels.Max:
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
	dt.PutInts(dst, acc)
}
