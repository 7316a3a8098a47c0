package main

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"

	"github.com/nvls-go/nvls/kernels"
)

func TestValueRoundTripsAndRanges(t *testing.T) {
	seed := rand.Uint64()
	for _, dt := range kernels.DTypes {
		buf := make([]byte, 1000*dt.Size())
		seen := map[uint64]bool{}
		for i := range 1000 {
			bits, v := value(dt, seed, 3, uint64(i))
			dt.PutBits(buf, i, bits)
			gb, gv := get(dt, buf, i)
			require.Equal(t, bits, gb, dt.NCCLName())
			require.Equal(t, v, gv, dt.NCCLName())
			seen[bits] = true
			switch dt {
			case kernels.F32, kernels.F16, kernels.BF16:
				require.True(t, v >= -1 && v <= 1, "%s %v", dt.NCCLName(), v)
			case kernels.S32:
				require.True(t, v >= -(1<<20) && v < 1<<20, "%v", v)
			case kernels.U32:
				require.Less(t, v, float64(1<<24))
			case kernels.U64:
				require.Less(t, v, float64(uint64(1)<<40))
			}
		}
		assert.Greater(t, len(seen), 200, "%s: values vary", dt.NCCLName())
		// Another rank, another seed: other values.
		b1, _ := value(dt, seed, 0, 7)
		b2, _ := value(dt, seed, 1, 7)
		b3, _ := value(dt, seed+1, 0, 7)
		assert.False(t, b1 == b2 && b1 == b3, dt.NCCLName())
	}
}

func TestPoisonIsNeverAValue(t *testing.T) {
	for _, dt := range kernels.DTypes {
		buf := make([]byte, dt.Size())
		for i := range buf {
			buf[i] = poison(dt)
		}
		pbits, pv := get(dt, buf, 0)
		if dt.Kind() == kernels.Float {
			assert.True(t, math.IsNaN(pv), dt.NCCLName())
			continue
		}
		// Integer sums of up to 8 ranks stay below the poison's magnitude.
		seed := rand.Uint64()
		for i := range uint64(2000) {
			s := reduceExact(dt, kernels.Sum, seed, 8, i)
			assert.NotEqual(t, pbits, s, dt.NCCLName())
		}
	}
}

// The reference against an independent computation: element by element,
// in float32 for floats in rank order (what a device does), which must lie
// within the tolerance of the float64 reference; integers wrap.
func TestReferenceAndTolerance(t *testing.T) {
	for _, dt := range kernels.DTypes {
		for _, op := range []kernels.RedOp{kernels.Sum, kernels.Min, kernels.Max} {
			ranks := 2 + rand.IntN(7)
			seed := rand.Uint64()
			k := 3000
			var ref reference
			o := opSpec{coll: collAllReduce, dtype: dt, op: op}
			computeReference(&ref, o, ranks, 0, seed, 100, k)
			got := make([]byte, k*dt.Size())
			for j := range k {
				i := uint64(100 + j)
				var acc32 float32
				var accI int64
				var accU uint64
				var best float64
				var bestBits uint64
				for r := range ranks {
					bits, v := value(dt, seed, r, i)
					acc32 += float32(v)
					accI += int64(v)
					accU += uint64(v)
					if r == 0 || (op == kernels.Min && v < best) || (op == kernels.Max && v > best) {
						best, bestBits = v, bits
					}
				}
				var out uint64
				switch {
				case op != kernels.Sum:
					out = bestBits
				case dt == kernels.F32:
					out = uint64(math.Float32bits(acc32))
				case dt == kernels.F16:
					out = uint64(float16.Fromfloat32(acc32).Bits())
				case dt == kernels.BF16:
					out = kernels.BF16.FromFloat32(acc32)
				case dt == kernels.S32:
					out = uint64(uint32(int32(accI)))
				case dt == kernels.U32:
					out = uint64(uint32(accU))
				default:
					out = accU
				}
				dt.PutBits(got, j, out)
			}
			wrong, maxErr := compareChunk(dt, &ref, got, k)
			assert.Zero(t, wrong, "%s %s", dt.NCCLName(), op)
			if dt.Kind() == kernels.Float && op == kernels.Sum && dt != kernels.F32 {
				assert.Greater(t, maxErr, 0.0, "%s: 16-bit sums round", dt.NCCLName())
			}
			// Off by the tolerance (or by one for integers): wrong.
			for _, j := range []int{0, k / 2, k - 1} {
				bits, v := get(dt, got, j)
				if ref.exact {
					dt.PutBits(got, j, bits^1)
				} else {
					bad := v + 2*ref.tol[j] + 0.01
					switch dt {
					case kernels.F32:
						dt.PutBits(got, j, uint64(math.Float32bits(float32(bad))))
					case kernels.F16:
						dt.PutBits(got, j, uint64(float16.Fromfloat32(float32(bad)).Bits()))
					default:
						dt.PutBits(got, j, kernels.BF16.FromFloat32(float32(bad)))
					}
				}
			}
			wrong, _ = compareChunk(dt, &ref, got, k)
			assert.Equal(t, int64(3), wrong, "%s %s", dt.NCCLName(), op)
		}
	}
}

func TestBroadcastReferenceIsTheRoot(t *testing.T) {
	seed := rand.Uint64()
	dt := kernels.F16
	var ref reference
	computeReference(&ref, opSpec{coll: collBroadcast, dtype: dt, root: 2}, 4, 0, seed, 0, 500)
	require.True(t, ref.exact)
	for i := range 500 {
		b, _ := value(dt, seed, 2, uint64(i))
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

// TestNCCLMapping: every element type and operator has its NCCL twin, of
// the same size.
func TestNCCLMapping(t *testing.T) {
	require.Len(t, ncclTypes, len(kernels.DTypes))
	for _, dt := range kernels.DTypes {
		assert.Equal(t, dt.Size(), ncclTypes[dt].Size(), "%v is %v", dt, ncclTypes[dt])
	}
	require.Len(t, ncclOps, len(kernels.RedOps))
	assert.Equal(t, []string{"ncclSum", "ncclMin", "ncclMax"}, []string{ncclOps[kernels.Sum].String(), ncclOps[kernels.Min].String(), ncclOps[kernels.Max].String()})
}
