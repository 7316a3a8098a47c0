package kref

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/x448/float16"

	"github.com/nvls-go/nvls/kernels"
)

// This file is the exact oracle: the bits the unicast kernels produce
// (nvls.h: uc_load_reduce, uc_load_reduce1), not a tolerance. Floats are
// widened to f32, reduced in rank order 0..n-1 with IEEE f32 addition
// (add.f32: round to nearest even, subnormals kept, Inf-Inf = NaN) or
// PTX min.f32/max.f32, and rounded once to the element type
// (cvt.rn.f16.f32, cvt.rn.bf16.f32). min/max follow the PTX ISA's
// min_num/max_num: a NaN operand yields the other operand, two NaNs a NaN,
// and -0 orders below +0. The simulator applies the same rules to the
// multimem leaves; the ISA does not define the order or the NaN and
// signed-zero rules of multimem.ld_reduce, so only a multicast run on
// hardware can check that part.

// format is a binary float format: exponent and mantissa bits.
type format struct{ exp, mant uint }

func formatOf(dt kernels.DType) (format, bool) {
	switch dt {
	case kernels.F32:
		return format{8, 23}, true
	case kernels.F16:
		return format{5, 10}, true
	case kernels.BF16:
		return format{8, 7}, true
	}
	return format{}, false
}

// specials are the bit patterns of f's special values: ±0, ±Inf, quiet
// and signaling NaNs of both signs, the smallest and largest subnormals,
// the smallest normal and the largest finite value, each of both signs.
func (f format) specials() []uint32 {
	sign := uint32(1) << (f.exp + f.mant)
	inf := (uint32(1)<<f.exp - 1) << f.mant
	quiet := uint32(1) << (f.mant - 1)
	pos := []uint32{
		0,                     // +0
		inf,                   // +Inf
		inf | quiet,           // quiet NaN
		inf | 1,               // signaling NaN
		inf | quiet | 1,       // NaN with a payload
		1,                     // smallest subnormal
		uint32(1)<<f.mant - 1, // largest subnormal
		uint32(1) << f.mant,   // smallest normal
		inf - 1,               // largest finite
	}
	out := make([]uint32, 0, 2*len(pos))
	for _, p := range pos {
		out = append(out, p, p|sign)
	}
	return out
}

// intSpecials are the integer extremes, as 64-bit patterns truncated to
// the element width: 0, ±1, the signed and unsigned limits and their
// neighbours.
func intSpecials(dt kernels.DType) []uint64 {
	if dt == kernels.U64 {
		return []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1, 1 << 63, 1<<63 - 1, 1<<63 + 1, 2}
	}
	return []uint64{0, 1, math.MaxUint32, math.MaxUint32 - 1, 1 << 31, 1<<31 - 1, 1<<31 + 1, 2}
}

// Special returns one input per rank, count elements of dt each, rich in
// special values: for floats NaN (quiet, signaling, with payload, of
// either sign), ±0, ±Inf, subnormals (the extremes and random ones), the
// smallest normal and the largest finite value; for integers 0, ±1 and
// the signed and unsigned extremes. In one element of 8 every rank draws
// from the same class (floats: zeros, NaNs, infinities or subnormals,
// half the time all of one sign, so that sums of zeros keep their sign and
// min/max meet all-NaN elements; integers: the extremes); in the others
// each rank's element is special with odds 1/3, else drawn as Input draws
// it.
func Special(rng *rand.Rand, dt kernels.DType, ranks, count int) [][]byte {
	ins := make([][]byte, ranks)
	for r := range ins {
		ins[r] = Input(rng, dt, count)
	}
	f, isFloat := formatOf(dt)
	var fs []uint32
	if isFloat {
		fs = f.specials()
	}
	is := intSpecials(dt)
	for i := range count {
		same := rng.IntN(8) == 0
		class, sign := rng.IntN(4), rng.IntN(4) // sign: 0, 1, or random
		for r := range ins {
			var v uint64
			switch {
			case !same && rng.IntN(3) != 0:
				continue // Input's value
			case !isFloat:
				v = is[rng.IntN(len(is))]
			case same:
				v = uint64(f.draw(rng, class, sign))
			case rng.IntN(5) == 0:
				v = uint64(f.draw(rng, classSubnormal, -1))
			default:
				v = uint64(fs[rng.IntN(len(fs))])
			}
			dt.PutBits(ins[r], i, v)
		}
	}
	return ins
}

// Classes of special float values.
const (
	classZero = iota
	classNaN
	classInf
	classSubnormal
)

// draw returns a random value of class, positive for sign 0, negative
// for sign 1, else of either sign.
func (f format) draw(rng *rand.Rand, class, sign int) uint32 {
	if sign != 0 && sign != 1 {
		sign = rng.IntN(2)
	}
	sbit := uint32(sign) << (f.exp + f.mant)
	inf := (uint32(1)<<f.exp - 1) << f.mant
	quiet := uint32(1) << (f.mant - 1)
	switch class {
	case classNaN:
		return sbit | inf | []uint32{quiet, 1, quiet | 1, quiet | 2}[rng.IntN(4)]
	case classInf:
		return sbit | inf
	case classSubnormal:
		return sbit | (1 + rng.Uint32N(uint32(1)<<f.mant-1))
	}
	return sbit // ±0
}

// Cancelling returns one input per rank (count elements of a float type
// each) whose f32 sums depend on the order of the ranks: in every element
// two ranks hold a large power of two and its negation, and the others
// small values with random mantissas, at least 2^25 times smaller. Summed
// in rank order, the small values before the large pair are lost in it and
// those after it survive; summed in reverse, the other way round. The pair
// is never the first and the last rank, so with 3 ranks or more every
// element's sum depends on the order. Integer types get Input's values
// (their sums do not depend on the order).
func Cancelling(rng *rand.Rand, dt kernels.DType, ranks, count int) [][]byte {
	ins := make([][]byte, ranks)
	var big, small int
	switch dt {
	case kernels.F32:
		big, small = 40, 10
	case kernels.F16:
		big, small = 14, -14 // small: normal f16 values, 2^-14 up to 2^-11
	case kernels.BF16:
		big, small = 80, 50
	default:
		for r := range ins {
			ins[r] = Input(rng, dt, count)
		}
		return ins
	}
	for r := range ins {
		ins[r] = make([]byte, count*dt.Size())
	}
	for i := range count {
		a, b := 0, ranks-1
		for ranks > 2 && a == 0 && b == ranks-1 {
			a, b = rng.IntN(ranks), rng.IntN(ranks)
			if a > b {
				a, b = b, a
			}
			if a == b {
				a, b = 0, ranks-1
			}
		}
		x := float32(math.Ldexp(1, big+rng.IntN(2)))
		if rng.IntN(2) == 0 {
			x = -x
		}
		for r := range ins {
			v := -x
			switch r {
			case a:
				v = x
			case b:
			default:
				v = float32(math.Ldexp(1+rng.Float64(), small+rng.IntN(3)))
				if rng.IntN(2) == 0 {
					v = -v
				}
			}
			putF32As(dt, ins[r], i, v)
		}
	}
	return ins
}

// Exact returns the all-reduce of ins (one input per rank, count elements
// of dt each) as the unicast kernels compute it, bit for bit (see the
// top of this file); integer sums wrap.
func Exact(dt kernels.DType, op kernels.RedOp, ins [][]byte, count int) []byte {
	e := dt.Size()
	out := make([]byte, count*e)
	for i := range count {
		if dt.Kind() == kernels.Float {
			acc := f32At(dt, ins[0], i)
			for _, in := range ins[1:] {
				x := f32At(dt, in, i)
				switch op {
				case kernels.Sum:
					acc += x
				case kernels.Min:
					acc = minNum(acc, x)
				case kernels.Max:
					acc = maxNum(acc, x)
				}
			}
			putF32As(dt, out, i, acc)
			continue
		}
		acc := dt.Bits(ins[0], i)
		for _, in := range ins[1:] {
			x := dt.Bits(in, i)
			switch op {
			case kernels.Sum:
				acc += x // truncated to the width by put: wraps
			case kernels.Min:
				if intLess(dt, x, acc) {
					acc = x
				}
			case kernels.Max:
				if intLess(dt, acc, x) {
					acc = x
				}
			}
		}
		dt.PutBits(out, i, acc)
	}
	return out
}

// CheckExact compares got with Exact(dt, op, ins, count) and returns the
// wrong elements, at most limit of them, and how many there were in all.
// Every bit must match (+0 and -0 differ), except that any NaN matches any
// NaN: the hardware's NaN payloads are not specified.
func CheckExact(dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, count, limit int) (bad []Mismatch, nbad int) {
	want := Exact(dt, op, ins, count)
	isFloat := dt.Kind() == kernels.Float
	for i := range count {
		g, w := dt.Bits(got, i), dt.Bits(want, i)
		if g == w || isFloat && isNaN(dt, g) && isNaN(dt, w) {
			continue
		}
		nbad++
		if len(bad) < limit {
			bad = append(bad, Mismatch{Index: i, Got: Format(dt, got, i), Want: Format(dt, want, i) + " from " + inputsAt(dt, ins, i)})
		}
	}
	return bad, nbad
}

// Reversed returns ins in reversed rank order: Exact of it is the
// reduction in the other order.
func Reversed(ins [][]byte) [][]byte {
	out := slices.Clone(ins)
	slices.Reverse(out)
	return out
}

// Differing counts the elements of a and b (count elements of dt each)
// whose bits differ, any NaN matching any NaN.
func Differing(dt kernels.DType, a, b []byte, count int) int {
	isFloat := dt.Kind() == kernels.Float
	n := 0
	for i := range count {
		x, y := dt.Bits(a, i), dt.Bits(b, i)
		if x != y && !(isFloat && isNaN(dt, x) && isNaN(dt, y)) {
			n++
		}
	}
	return n
}

// Tally counts the special values among count elements of dt in b: NaNs,
// negative zeros, infinities and subnormals (all zero for integers) — to
// log what a test exercised.
func Tally(dt kernels.DType, b []byte, count int) (nans, negZeros, infs, subnormals int) {
	f, ok := formatOf(dt)
	if !ok {
		return
	}
	for i := range count {
		switch classOf(f, dt.Bits(b, i)) {
		case "+NaN", "-NaN":
			nans++
		case "-0":
			negZeros++
		case "+Inf", "-Inf":
			infs++
		case "+sub", "-sub":
			subnormals++
		}
	}
	return
}

// classOf names the class of the bits v in format f: "+0", "-sub",
// "+Inf", "-NaN", "+normal", ...
func classOf(f format, v uint64) string {
	sign := "+"
	if v>>(f.exp+f.mant)&1 == 1 {
		sign = "-"
	}
	ex := v >> f.mant & (1<<f.exp - 1)
	m := v & (1<<f.mant - 1)
	switch {
	case ex == 0 && m == 0:
		return sign + "0"
	case ex == 0:
		return sign + "sub"
	case ex == 1<<f.exp-1 && m == 0:
		return sign + "Inf"
	case ex == 1<<f.exp-1:
		return sign + "NaN"
	}
	return sign + "normal"
}

// Format shows element i of b with its bits, e.g. "-0 (0x8000)".
func Format(dt kernels.DType, b []byte, i int) string {
	e := dt.Size()
	v := dt.Bits(b, i)
	switch dt {
	case kernels.F32, kernels.F16, kernels.BF16:
		return fmt.Sprintf("%g (%#0*x)", f32At(dt, b, i), 2+2*e, v)
	case kernels.S32:
		return fmt.Sprint(int32(uint32(v)))
	}
	return fmt.Sprint(v)
}

func inputsAt(dt kernels.DType, ins [][]byte, i int) string {
	s := "["
	for r, in := range ins {
		if r > 0 {
			s += ", "
		}
		s += Format(dt, in, i)
	}
	return s + "]"
}

// minNum and maxNum are PTX min.f32 and max.f32 without .NaN, written
// from the ISA's min_num / max_num: with -0 < +0 in the compare.
func minNum(x, y float32) float32 {
	switch {
	case x != x:
		return y // y, or both NaN
	case y != y:
		return x
	case less(x, y):
		return x
	}
	return y
}

func maxNum(x, y float32) float32 {
	switch {
	case x != x:
		return y
	case y != y:
		return x
	case less(y, x):
		return x
	}
	return y
}

// less is x < y with -0 < +0.
func less(x, y float32) bool {
	if x == 0 && y == 0 {
		return math.Signbit(float64(x)) && !math.Signbit(float64(y))
	}
	return x < y
}

func intLess(dt kernels.DType, a, b uint64) bool {
	if dt.Kind() == kernels.Signed {
		return int32(uint32(a)) < int32(uint32(b))
	}
	return a < b
}

// f32At widens element i of an f32, f16 or bf16 array to f32 (exact).
func f32At(dt kernels.DType, b []byte, i int) float32 {
	switch dt {
	case kernels.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	case kernels.F16:
		return float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32()
	}
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
}

// putF32As rounds x to dt once, to nearest even (a NaN stays a NaN), and
// stores it as element i of b.
func putF32As(dt kernels.DType, b []byte, i int, x float32) {
	switch dt {
	case kernels.F32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	case kernels.F16:
		binary.LittleEndian.PutUint16(b[2*i:], float16.Fromfloat32(x).Bits())
	case kernels.BF16:
		binary.LittleEndian.PutUint16(b[2*i:], bf16RNE(x))
	}
}

// bf16RNE is cvt.rn.bf16.f32: the upper half of the f32 bits rounded to
// nearest even on the lower half; NaN gives a NaN of the same sign.
func bf16RNE(x float32) uint16 {
	u := math.Float32bits(x)
	hi, lo := u>>16, u&0xffff
	if x != x {
		return uint16(hi) | 0x0040
	}
	if lo > 0x8000 || lo == 0x8000 && hi&1 == 1 {
		hi++ // carries into the exponent: up to Inf, as IEEE rounding does
	}
	return uint16(hi)
}

func isNaN(dt kernels.DType, v uint64) bool {
	f, _ := formatOf(dt)
	mask := uint64(1)<<(f.exp+f.mant) - 1
	inf := uint64(uint32(1)<<f.exp-1) << f.mant
	return v&mask > inf
}
