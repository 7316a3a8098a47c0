// Package kref is the test oracle of the kernels: fresh random inputs per
// element type, and a check of an all-reduce result against a reduction
// computed here in float64 (floats) or exact integers, independently of
// the kernels' arithmetic. exact.go adds the exact oracle (the bits the
// unicast kernels produce: rank order, one rounding, PTX min/max rules)
// with inputs full of special values (Special) or whose sums depend on the
// rank order (Cancelling). Used by the simulator tests (kernels/simkern)
// and the GPU tests (kernels, build tag gpu).
package kref

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nvls-go/nvls/internal/kabi"
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
		if dt.Kind() == kernels.Float {
			f := float32((rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(8)-3))
			dt.PutBits(b, i, dt.FromFloat32(f))
		} else {
			dt.PutBits(b, i, rng.Uint64())
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
		if dt.Kind() == kernels.Float {
			ok, want, have = checkFloat(dt, op, ins, got, i)
		} else {
			ok, want, have = checkInt(dt, op, ins, got, i)
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

// checkFloat checks element i of a float type against a float64
// reduction of the inputs.
func checkFloat(dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, i int) (ok bool, want, have func() string) {
	var s, abs float64
	m := dt.Float64(dt.Bits(ins[0], i))
	for _, in := range ins {
		x := dt.Float64(dt.Bits(in, i))
		s += x
		abs += math.Abs(x)
		if op == kernels.Min {
			m = math.Min(m, x)
		} else if op == kernels.Max {
			m = math.Max(m, x)
		}
	}
	g := dt.Float64(dt.Bits(got, i))
	have = func() string { return fmt.Sprintf("%g", g) }
	if op != kernels.Sum {
		return g == m, func() string { return fmt.Sprintf("%g", m) }, have
	}
	tol := float64(len(ins)) * math.Ldexp(abs, -23)
	if dt != kernels.F32 {
		tol += dt.ULP(s) / 2
	}
	return math.Abs(g-s) <= tol, func() string { return fmt.Sprintf("%g (±%g)", s, tol) }, have
}

// checkInt checks element i of an integer type against an exact
// reduction: sums wrap in the type's width, min and max compare signed
// values as signed.
func checkInt(dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, i int) (ok bool, want, have func() string) {
	mask := uint64(math.MaxUint64) >> (64 - 8*dt.Size())
	less := func(a, b uint64) bool { return a < b }
	if dt.Kind() == kernels.Signed {
		shift := 64 - 8*dt.Size()
		less = func(a, b uint64) bool { return int64(a<<shift) < int64(b<<shift) }
	}
	var s, m uint64 // Go's uint64 sum wraps mod 2^64, as the GPU's does
	for k, in := range ins {
		x := dt.Bits(in, i)
		s += x
		if k == 0 || (op == kernels.Min && less(x, m)) || (op == kernels.Max && less(m, x)) {
			m = x
		}
	}
	w := m
	if op == kernels.Sum {
		w = s & mask
	}
	g := dt.Bits(got, i)
	return g == w, func() string { return fmt.Sprint(w) }, func() string { return fmt.Sprint(g) }
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
	{"blocks", func(per, _ int) int { return (3*kabi.BlockThreads+37)*per + per/2 }, 3, false},
	{"tail-in-place", func(per, _ int) int { return 2*per + 1 }, 2, true},
	{"blocks-in-place", func(per, _ int) int { return (3*kabi.BlockThreads+37)*per + 1 }, 3, true},
}
