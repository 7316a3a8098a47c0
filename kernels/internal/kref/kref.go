// Package kref is the test oracle of the kernels: fresh random inputs per
// element type, and a check of an all-reduce result against a reduction
// computed here in float64 (floats) or exact integers, independently of
// the kernels' arithmetic. Used by the simulator tests (kernels/simkern)
// and the GPU tests (kernels, build tag gpu).
package kref

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/x448/float16"

	"github.com/nvls-go/nvls/kernels"
)

// RNG is the random generator the helpers take.
type RNG = *rand.Rand

// NewRNG returns a generator with a fresh random seed, and the seed (to
// log, so that a failure can be replayed with Seeded).
func NewRNG() (*rand.Rand, uint64) {
	seed := rand.Uint64()
	return Seeded(seed), seed
}

// Seeded returns the generator NewRNG returns for seed.
func Seeded(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Input returns count random elements of dt: floats of both signs and
// magnitudes from 1/8 to 16 (never NaN or Inf), integers over their whole
// range (so that sums wrap).
func Input(rng *rand.Rand, dt kernels.DType, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := range count {
		f := float32((rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(8)-3))
		switch dt {
		case kernels.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		case kernels.F16:
			binary.LittleEndian.PutUint16(b[2*i:], float16.Fromfloat32(f).Bits())
		case kernels.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(f)>>16))
		case kernels.S32, kernels.U32:
			binary.LittleEndian.PutUint32(b[4*i:], rng.Uint32())
		case kernels.U64:
			binary.LittleEndian.PutUint64(b[8*i:], rng.Uint64())
		}
	}
	return b
}

// Bytes returns n random bytes (poison for outputs, guards).
func Bytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n+7)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	return b[:n:n]
}

// Float reads element i of an f32, f16 or bf16 array as float64.
func Float(dt kernels.DType, b []byte, i int) float64 {
	switch dt {
	case kernels.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case kernels.F16:
		return float64(float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32())
	default: // BF16
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	}
}

// ULP is the spacing of dt's values at |x|.
func ULP(dt kernels.DType, x float64) float64 {
	m, emin := 23, -126
	switch dt {
	case kernels.F16:
		m, emin = 10, -14
	case kernels.BF16:
		m = 7
	}
	_, e := math.Frexp(math.Abs(x))
	return math.Ldexp(1, max(e-1, emin)-m)
}

// Mismatch is one wrong element.
type Mismatch struct {
	Index     int
	Got, Want string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("element %d: got %s, want %s", m.Index, m.Got, m.Want)
}

// CheckAllReduce compares got (count elements of dt) with op over ins (one
// input per rank) and returns the wrong elements, at most limit of them,
// and how many there were in all. Sums of floats may differ from the
// exact sum by the f32 accumulation error (nranks * 2^-23 * sum of |x|)
// plus, for 16-bit types, half an ulp (one rounding to nearest); min, max
// and integer results must be exact (integer sums wrap).
func CheckAllReduce(dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, count, limit int) (bad []Mismatch, nbad int) {
	for i := range count {
		var ok bool
		var want, have func() string // formatted only for wrong elements
		switch dt {
		case kernels.F32, kernels.F16, kernels.BF16:
			var s, abs float64
			m := Float(dt, ins[0], i)
			for _, in := range ins {
				x := Float(dt, in, i)
				s += x
				abs += math.Abs(x)
				if op == kernels.Min {
					m = math.Min(m, x)
				} else if op == kernels.Max {
					m = math.Max(m, x)
				}
			}
			g := Float(dt, got, i)
			if op == kernels.Sum {
				tol := float64(len(ins)) * math.Ldexp(abs, -23)
				if dt != kernels.F32 {
					tol += ULP(dt, s) / 2
				}
				ok = math.Abs(g-s) <= tol
				want = func() string { return fmt.Sprintf("%g (±%g)", s, tol) }
			} else {
				ok = g == m
				want = func() string { return fmt.Sprintf("%g", m) }
			}
			have = func() string { return fmt.Sprintf("%g", g) }
		case kernels.S32, kernels.U32:
			var s, m int64
			for k, in := range ins {
				u := binary.LittleEndian.Uint32(in[4*i:])
				x := int64(u)
				if dt == kernels.S32 {
					x = int64(int32(u))
				}
				s += x
				if k == 0 || (op == kernels.Min && x < m) || (op == kernels.Max && x > m) {
					m = x
				}
			}
			w := uint32(m)
			if op == kernels.Sum {
				w = uint32(uint64(s) & 0xffffffff)
			}
			g := binary.LittleEndian.Uint32(got[4*i:])
			ok = g == w
			want, have = func() string { return fmt.Sprint(w) }, func() string { return fmt.Sprint(g) }
		case kernels.U64:
			var s, m uint64 // Go's uint64 sum wraps mod 2^64, as the GPU's does
			for k, in := range ins {
				x := binary.LittleEndian.Uint64(in[8*i:])
				s += x
				if k == 0 || (op == kernels.Min && x < m) || (op == kernels.Max && x > m) {
					m = x
				}
			}
			w := m
			if op == kernels.Sum {
				w = s
			}
			g := binary.LittleEndian.Uint64(got[8*i:])
			ok = g == w
			want, have = func() string { return fmt.Sprint(w) }, func() string { return fmt.Sprint(g) }
		}
		if !ok {
			nbad++
			if len(bad) < limit {
				bad = append(bad, Mismatch{Index: i, Got: have(), Want: want()})
			}
		}
	}
	return bad, nbad
}

// SizeCase is a size class of the correctness matrix.
type SizeCase struct {
	Name string
	// Count is the element count for per elements per 16-byte vector
	// and ranks ranks.
	Count   func(per, ranks int) int
	Grid    uint32
	InPlace bool
}

// SizeCases are the classes every all-reduce is tested with: one element,
// a scalar tail, exactly one vector, a vector count not divisible by the
// ranks, several blocks with a grid-stride wrap, and in place.
var SizeCases = []SizeCase{
	{"one-element", func(int, int) int { return 1 }, 1, false},
	{"tail", func(per, _ int) int { return 2*per + 1 }, 2, false},
	{"one-vector", func(per, _ int) int { return per }, 3, false},
	{"ragged", func(per, n int) int { return (7*n+3)*per + per - 1 }, 2, false},
	{"blocks", func(per, _ int) int { return (3*kernels.BlockThreads+37)*per + per/2 }, 3, false},
	{"tail-in-place", func(per, _ int) int { return 2*per + 1 }, 2, true},
	{"blocks-in-place", func(per, _ int) int { return (3*kernels.BlockThreads+37)*per + 1 }, 3, true},
}
