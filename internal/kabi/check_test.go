package kabi

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/nvls-go/nvls/kernels"
)

// TestCheckFieldsFit: every element type, operator and opcode fits its
// field of CheckArgs (the ranks' bits are checked at compile time).
func TestCheckFieldsFit(t *testing.T) {
	assert.LessOrEqual(t, len(kernels.DTypes), 1<<checkDTypeBits)
	assert.LessOrEqual(t, len(kernels.RedOps), 1<<checkRedOpBits)
	for _, d := range kernels.Descs() {
		assert.Less(t, d.Opcode, uint32(1<<checkOpBits), "%v", d.Coll)
	}
}

// TestArgWordsRoundTrip: on random arguments, the arrival word the device
// makes (CallWord, plus a sequence byte) and the word an LL kernel records
// (its line check split as simkern's llWord does) decode to the arguments
// the host packed, the count exact below 2^40 (arrival) or its low 21 bits
// (LL).
func TestArgWordsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 5))
	descs := kernels.Descs()
	for range 2000 {
		d := descs[r.IntN(len(descs))]
		dt := kernels.DTypes[r.IntN(len(kernels.DTypes))]
		op := kernels.RedOps[r.IntN(len(kernels.RedOps))]
		root := r.IntN(MaxRanks)
		count := r.Uint64N(1 << 40)
		check := CheckArgs(d.Opcode, dt, op, root)

		seq := 1 + r.Uint64N(255)
		a, ok := DecodeWord(seq<<56 | CallWord(check, count))
		assert.True(t, ok)
		want := kernels.Args{Opcode: d.Opcode, DType: dt, Op: op, Root: root, Count: count, CountBits: 40}
		assert.Equal(t, want, a)

		ll := LLCheck(check, count)
		a, ok = DecodeWord(uint64(ll>>21)<<40 | uint64(ll&(1<<21-1)))
		assert.True(t, ok)
		want.Count, want.CountBits = count&(1<<21-1), 21
		assert.Equal(t, want, a)
	}
	_, ok := DecodeWord(0)
	assert.False(t, ok, "0 is no word seen")
}

// TestDescribeMismatch: ranks grouped by value, fields in a fixed order,
// ranks whose word was not seen left out.
func TestDescribeMismatch(t *testing.T) {
	w := func(count uint64, dt kernels.DType) uint64 {
		return 1<<56 | CallWord(CheckArgs(kernels.OpAllReduce, dt, kernels.Sum, 0), count)
	}
	words := []uint64{w(1024, kernels.F32), w(1024, kernels.F32), 0, w(512, kernels.BF16)}
	assert.Equal(t, "count: ranks 0, 1 have 1024, rank 3 has 512; dtype: ranks 0, 1 have f32, rank 3 has bf16",
		DescribeMismatch(words))
	assert.Equal(t, "the ranks' arguments differ", DescribeMismatch(words[:2]))
}
