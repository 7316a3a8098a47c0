package kref

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/kernels"
)

// bitsOf packs one element per rank (bit patterns of dt) into inputs.
func bitsOf(dt kernels.DType, vals ...uint64) [][]byte {
	ins := make([][]byte, len(vals))
	for r, v := range vals {
		ins[r] = make([]byte, dt.Size())
		dt.PutBits(ins[r], 0, v)
	}
	return ins
}

func f32b(x float64) uint64 { return uint64(math.Float32bits(float32(x))) }

const nan = math.MaxUint64 // "any NaN" in the table below

// TestExactRules: hand-derived results of the rules the hardware follows
// (IEEE f32 addition in rank order with one rounding; PTX min_num/max_num
// with -0 < +0; wrapping integers).
func TestExactRules(t *testing.T) {
	negz := uint64(0x80000000)
	cases := []struct {
		what string
		dt   kernels.DType
		op   kernels.RedOp
		in   []uint64
		want uint64
	}{
		{"Inf-Inf", kernels.F32, kernels.Sum, []uint64{f32b(math.Inf(1)), f32b(math.Inf(-1))}, nan},
		{"-0 + -0", kernels.F32, kernels.Sum, []uint64{negz, negz}, negz},
		{"-0 + +0", kernels.F32, kernels.Sum, []uint64{negz, 0}, 0},
		{"+0 + -0", kernels.F32, kernels.Sum, []uint64{0, negz}, 0},
		{"x + -x", kernels.F32, kernels.Sum, []uint64{f32b(1.5), f32b(-1.5)}, 0},
		{"NaN + 1", kernels.F32, kernels.Sum, []uint64{0x7fc00000, f32b(1)}, nan},
		{"1 + sNaN", kernels.F32, kernels.Sum, []uint64{f32b(1), 0x7f800001}, nan},
		{"overflow", kernels.F32, kernels.Sum, []uint64{0x7f7fffff, 0x7f7fffff}, 0x7f800000},
		{"subnormals", kernels.F32, kernels.Sum, []uint64{1, 1, 0x80000001}, 1},
		{"rank order", kernels.F32, kernels.Sum, []uint64{f32b(1 << 24), f32b(1), f32b(1)}, f32b(1 << 24)},
		{"rank order reversed", kernels.F32, kernels.Sum, []uint64{f32b(1), f32b(1), f32b(1 << 24)}, f32b(1<<24 + 2)},
		{"min NaN first", kernels.F32, kernels.Min, []uint64{0x7fc00000, f32b(1)}, f32b(1)},
		{"min NaN last", kernels.F32, kernels.Min, []uint64{f32b(1), 0xffc00000}, f32b(1)},
		{"min NaN NaN", kernels.F32, kernels.Min, []uint64{0x7fc00000, 0x7f800001}, nan},
		{"min +0 -0", kernels.F32, kernels.Min, []uint64{0, negz}, negz},
		{"min -0 +0", kernels.F32, kernels.Min, []uint64{negz, 0}, negz},
		{"min -sub +0", kernels.F32, kernels.Min, []uint64{0, 0x80000001}, 0x80000001},
		{"min -Inf NaN", kernels.F32, kernels.Min, []uint64{f32b(math.Inf(-1)), 0x7fc00000}, f32b(math.Inf(-1))},
		{"max -0 +0", kernels.F32, kernels.Max, []uint64{negz, 0}, 0},
		{"max +0 -0", kernels.F32, kernels.Max, []uint64{0, negz}, 0},
		{"max -0 -0", kernels.F32, kernels.Max, []uint64{negz, negz}, negz},
		{"max NaN -Inf", kernels.F32, kernels.Max, []uint64{0x7fc00000, f32b(math.Inf(-1))}, f32b(math.Inf(-1))},
		{"max NaN NaN NaN", kernels.F32, kernels.Max, []uint64{0x7fc00000, 0xffc00000, 0x7f800001}, nan},

		{"f16 overflow", kernels.F16, kernels.Sum, []uint64{0x7bff, 0x7bff}, 0x7c00},
		{"f16 tie at max rounds to Inf", kernels.F16, kernels.Sum, []uint64{0x7bff, 0x4c00}, 0x7c00}, // 65504 + 16
		{"f16 below the tie stays", kernels.F16, kernels.Sum, []uint64{0x7bff, 0x4b80}, 0x7bff},      // 65504 + 15
		{"f16 subnormals", kernels.F16, kernels.Sum, []uint64{0x0001, 0x0001}, 0x0002},
		{"f16 ±subnormal", kernels.F16, kernels.Sum, []uint64{0x0001, 0x8001}, 0x0000},
		{"f16 rounded once", kernels.F16, kernels.Sum, []uint64{0x6800, 0x3c00, 0x3c00}, 0x6801}, // 2048+1+1 = 2050
		{"f16 Inf-Inf", kernels.F16, kernels.Sum, []uint64{0x7c00, 0xfc00}, nan},
		{"f16 min NaN", kernels.F16, kernels.Min, []uint64{0x7e00, 0x3c00}, 0x3c00},
		{"f16 min ±0", kernels.F16, kernels.Min, []uint64{0x0000, 0x8000}, 0x8000},
		{"f16 max ±0", kernels.F16, kernels.Max, []uint64{0x8000, 0x0000}, 0x0000},
		{"f16 max sNaN", kernels.F16, kernels.Max, []uint64{0xfbff, 0x7c01}, 0xfbff},

		{"bf16 overflow", kernels.BF16, kernels.Sum, []uint64{0x7f7f, 0x7f7f}, 0x7f80},
		{"bf16 Inf-Inf", kernels.BF16, kernels.Sum, []uint64{0x7f80, 0xff80}, nan},
		{"bf16 tie to even (down)", kernels.BF16, kernels.Sum, []uint64{0x3f80, 0x3b80}, 0x3f80}, // 1 + 2^-8
		{"bf16 tie to even (up)", kernels.BF16, kernels.Sum, []uint64{0x3f81, 0x3b80}, 0x3f82},
		{"bf16 subnormals", kernels.BF16, kernels.Sum, []uint64{0x0001, 0x0001, 0x0001}, 0x0003},
		{"bf16 min NaN -0", kernels.BF16, kernels.Min, []uint64{0xffc0, 0x8000}, 0x8000},
		{"bf16 max -0 +0", kernels.BF16, kernels.Max, []uint64{0x8000, 0x0000}, 0x0000},

		{"s32 sum wraps", kernels.S32, kernels.Sum, []uint64{math.MaxInt32, 1}, 1 << 31},
		{"s32 min", kernels.S32, kernels.Min, []uint64{1 << 31, math.MaxInt32}, 1 << 31},
		{"s32 max signed", kernels.S32, kernels.Max, []uint64{math.MaxUint32, 0}, 0},
		{"u32 max unsigned", kernels.U32, kernels.Max, []uint64{math.MaxUint32, 0}, math.MaxUint32},
		{"u32 sum wraps", kernels.U32, kernels.Sum, []uint64{math.MaxUint32, 2}, 1},
		{"u64 sum wraps", kernels.U64, kernels.Sum, []uint64{math.MaxUint64, math.MaxUint64}, math.MaxUint64 - 1},
		{"u64 min", kernels.U64, kernels.Min, []uint64{1 << 63, 1<<63 - 1}, 1<<63 - 1},
	}
	for _, c := range cases {
		got := c.dt.Bits(Exact(c.dt, c.op, bitsOf(c.dt, c.in...), 1), 0)
		if c.want == nan {
			assert.True(t, isNaN(c.dt, got), "%s: got %#x, want a NaN", c.what, got)
			continue
		}
		assert.Equal(t, c.want, got, "%s: got %#x, want %#x", c.what, got, c.want)
	}
}

// TestSpecialCoversEveryClass: Special draws every special value class
// of every type, and ordinary values too.
func TestSpecialCoversEveryClass(t *testing.T) {
	rng, _ := NewRNG()
	const count = 20000
	for _, dt := range kernels.DTypes {
		seen := map[uint64]int{}
		for _, b := range Special(rng, dt, 2, count/2) {
			for i := range count / 2 {
				seen[dt.Bits(b, i)]++
			}
		}
		f, isFloat := formatOf(dt)
		if !isFloat {
			for _, v := range intSpecials(dt) {
				assert.Greater(t, seen[v], 0, "%v: %#x never drawn", dt, v)
			}
			assert.Greater(t, len(seen), count/2, "%v: ordinary values too", dt)
			continue
		}
		classes := map[string]int{}
		for v, n := range seen {
			classes[classOf(f, v)] += n
		}
		for _, c := range []string{"+0", "-0", "+Inf", "-Inf", "+NaN", "-NaN", "+sub", "-sub", "+normal", "-normal"} {
			assert.Greater(t, classes[c], count/100, "%v: class %s drawn %d times", dt, c, classes[c])
		}
		for _, v := range f.specials() {
			assert.Greater(t, seen[uint64(v)], 0, "%v: special %#x never drawn", dt, v)
		}
	}
}

// TestCheckExact: any NaN matches any NaN; -0 and +0 differ; a flipped
// bit is found.
func TestCheckExact(t *testing.T) {
	rng, _ := NewRNG()
	for _, dt := range kernels.DTypes {
		for _, op := range kernels.RedOps {
			const count = 2000
			ins := Special(rng, dt, 3, count)
			got := Exact(dt, op, ins, count)
			_, n := CheckExact(dt, op, ins, got, count, 3)
			require.Zero(t, n, "%v %v", dt, op)
			e := dt.Size()
			f, isFloat := formatOf(dt)
			nans, negz, zeros, zeroAt := 0, 0, 0, -1
			for i := range count {
				v := dt.Bits(got, i)
				switch {
				case isFloat && isNaN(dt, v):
					// Another NaN still matches.
					dt.PutBits(got, i, v^1)
					if !isNaN(dt, v^1) {
						dt.PutBits(got, i, v|1<<(f.mant-1))
					}
					nans++
				case isFloat && v == 1<<(f.exp+f.mant):
					negz++
				}
				switch {
				case isFloat && v&^(1<<(f.exp+f.mant)) == 0 && zeros == 0:
					dt.PutBits(got, i, v^1<<(f.exp+f.mant)) // the other zero
					zeros, zeroAt = 1, i
				}
			}
			bad, n := CheckExact(dt, op, ins, got, count, 3)
			assert.Equal(t, zeros, n, "%v %v: %v", dt, op, bad)
			if isFloat {
				assert.Greater(t, nans, 0, "%v %v: the special inputs gave no NaN result", dt, op)
				assert.Greater(t, negz, 0, "%v %v: the special inputs gave no -0 result", dt, op)
			}
			at := 7
			if zeroAt == at {
				at++
			}
			got[at*e+e-1] ^= 0x04
			_, n2 := CheckExact(dt, op, ins, got, count, 3)
			assert.Equal(t, n+1, n2, "%v %v", dt, op)
		}
	}
}

// TestCancellingOrderMatters: with Cancelling's inputs the f32 sum in
// rank order and in reversed order differ on nearly every element from 3
// ranks on (the two orders' small sums can round to the same 16-bit
// value), for every float type.
func TestCancellingOrderMatters(t *testing.T) {
	rng, _ := NewRNG()
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16} {
		for _, ranks := range []int{2, 3, 4, 8} {
			const count = 4000
			ins := Cancelling(rng, dt, ranks, count)
			fwd := Exact(dt, kernels.Sum, ins, count)
			rev := Exact(dt, kernels.Sum, Reversed(ins), count)
			diff := Differing(dt, fwd, rev, count)
			t.Logf("%v, %d ranks: %d of %d sums depend on the order", dt, ranks, diff, count)
			if ranks == 2 {
				assert.Zero(t, diff, "%v: a + b = b + a", dt)
				continue
			}
			assert.GreaterOrEqual(t, diff, count-count/100, "%v, %d ranks", dt, ranks)
		}
	}
}
