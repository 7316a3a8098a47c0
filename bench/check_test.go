package main

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

func TestValueRoundTripsAndRanges(t *testing.T) {
	seed := rand.Uint64()
	for _, dt := range dtypes {
		buf := make([]byte, 1000*dt.size)
		seen := map[uint64]bool{}
		for i := range 1000 {
			bits, v := dt.value(seed, 3, uint64(i))
			dt.put(buf, i, bits)
			gb, gv := dt.get(buf, i)
			require.Equal(t, bits, gb, dt.name)
			require.Equal(t, v, gv, dt.name)
			seen[bits] = true
			switch dt.name {
			case "float", "half", "bfloat16":
				require.True(t, v >= -1 && v <= 1, "%s %v", dt.name, v)
			case "int32":
				require.True(t, v >= -(1<<20) && v < 1<<20, "%v", v)
			case "uint32":
				require.Less(t, v, float64(1<<24))
			case "uint64":
				require.Less(t, v, float64(uint64(1)<<40))
			}
		}
		assert.Greater(t, len(seen), 200, "%s: values vary", dt.name)
		// Another rank, another seed: other values.
		b1, _ := dt.value(seed, 0, 7)
		b2, _ := dt.value(seed, 1, 7)
		b3, _ := dt.value(seed+1, 0, 7)
		assert.False(t, b1 == b2 && b1 == b3, dt.name)
	}
}

func TestBF16Conversion(t *testing.T) {
	assert.Equal(t, uint16(0x3f80), bf16FromFloat32(1))
	assert.Equal(t, uint16(0xc000), bf16FromFloat32(-2))
	// Round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
	assert.Equal(t, uint16(0x3f80), bf16FromFloat32(1+0x1p-8))
	assert.Equal(t, uint16(0x3f81), bf16FromFloat32(1+0x1p-8+0x1p-12))
	assert.True(t, math.IsNaN(float64(bf16ToFloat32(bf16FromFloat32(float32(math.NaN()))))))
	for range 1000 {
		f := rand.Float32()*2 - 1
		g := bf16ToFloat32(bf16FromFloat32(f))
		assert.LessOrEqual(t, math.Abs(float64(f-g)), math.Abs(float64(f))*0x1p-8)
	}
}

func TestPoisonIsNeverAValue(t *testing.T) {
	for _, dt := range dtypes {
		buf := make([]byte, dt.size)
		for i := range buf {
			buf[i] = dt.poison()
		}
		pbits, pv := dt.get(buf, 0)
		if dt.kind == kindFloat {
			assert.True(t, math.IsNaN(pv), dt.name)
			continue
		}
		// Integer sums of up to 8 ranks stay below the poison's magnitude.
		seed := rand.Uint64()
		for i := range uint64(2000) {
			s := reduceExact(dt, opSum, seed, 8, i)
			assert.NotEqual(t, pbits, s, dt.name)
		}
	}
}

// The reference against an independent computation: element by element,
// in float32 for floats in rank order (what a device does), which must lie
// within the tolerance of the float64 reference; integers wrap.
func TestReferenceAndTolerance(t *testing.T) {
	for _, dt := range dtypes {
		for _, op := range []redop{opSum, opMin, opMax} {
			ranks := 2 + rand.IntN(7)
			seed := rand.Uint64()
			k := 3000
			var ref reference
			o := opSpec{coll: collAllReduce, dtype: dt, op: op}
			computeReference(&ref, o, ranks, seed, 100, k)
			got := make([]byte, k*dt.size)
			for j := range k {
				i := uint64(100 + j)
				var acc32 float32
				var accI int64
				var accU uint64
				var best float64
				var bestBits uint64
				for r := range ranks {
					bits, v := dt.value(seed, r, i)
					acc32 += float32(v)
					accI += int64(v)
					accU += uint64(v)
					if r == 0 || (op == opMin && v < best) || (op == opMax && v > best) {
						best, bestBits = v, bits
					}
				}
				var out uint64
				switch {
				case op != opSum:
					out = bestBits
				case dt.name == "float":
					out = uint64(math.Float32bits(acc32))
				case dt.name == "half":
					out = uint64(float16.Fromfloat32(acc32).Bits())
				case dt.name == "bfloat16":
					out = uint64(bf16FromFloat32(acc32))
				case dt.name == "int32":
					out = uint64(uint32(int32(accI)))
				case dt.name == "uint32":
					out = uint64(uint32(accU))
				default:
					out = accU
				}
				dt.put(got, j, out)
			}
			wrong, maxErr := compareChunk(dt, &ref, got, k)
			assert.Zero(t, wrong, "%s %s", dt.name, op)
			if dt.kind == kindFloat && op == opSum && dt.name != "float" {
				assert.Greater(t, maxErr, 0.0, "%s: 16-bit sums round", dt.name)
			}
			// Off by the tolerance (or by one for integers): wrong.
			for _, j := range []int{0, k / 2, k - 1} {
				bits, v := dt.get(got, j)
				if ref.exact {
					dt.put(got, j, bits^1)
				} else {
					bad := v + 2*ref.tol[j] + 0.01
					switch dt.name {
					case "float":
						dt.put(got, j, uint64(math.Float32bits(float32(bad))))
					case "half":
						dt.put(got, j, uint64(float16.Fromfloat32(float32(bad)).Bits()))
					default:
						dt.put(got, j, uint64(bf16FromFloat32(float32(bad))))
					}
				}
			}
			wrong, _ = compareChunk(dt, &ref, got, k)
			assert.Equal(t, int64(3), wrong, "%s %s", dt.name, op)
		}
	}
}

func TestBroadcastReferenceIsTheRoot(t *testing.T) {
	seed := rand.Uint64()
	dt := dtypeByName("half")
	var ref reference
	computeReference(&ref, opSpec{coll: collBroadcast, dtype: dt, root: 2}, 4, seed, 0, 500)
	require.True(t, ref.exact)
	for i := range 500 {
		b, _ := dt.value(seed, 2, uint64(i))
		require.Equal(t, b, ref.bits[i])
	}
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 3.0, medianOf([]float64{5, 1, 3}))
	assert.Equal(t, 2.5, medianOf([]float64{4, 1, 2, 3}))
	assert.Equal(t, 0.0, medianOf(nil))
}

func TestParallelForCoversEachIndexOnce(t *testing.T) {
	for _, k := range []int{0, 1, 1000, 64 << 10, 1<<20 + 7} {
		for _, w := range []int{1, 3, 16} {
			hits := make([]int32, k)
			var calls int
			var mu sync.Mutex
			parallelFor(k, w, func(lo, hi int) {
				mu.Lock()
				calls++
				mu.Unlock()
				for i := lo; i < hi; i++ {
					hits[i]++
				}
			})
			for i, h := range hits {
				require.Equal(t, int32(1), h, "k=%d w=%d i=%d", k, w, i)
			}
			assert.LessOrEqual(t, calls, max(1, w))
		}
	}
}
