package kref

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/x448/float16"

	"github.com/nvls-go/nvls/kernels"
)

func TestCheckAllReduce(t *testing.T) {
	rng, _ := NewRNG()
	for _, dt := range kernels.DTypes {
		for _, op := range kernels.RedOps {
			const count, ranks = 50, 3
			ins := [][]byte{Input(rng, dt, count), Input(rng, dt, count), Input(rng, dt, count)}
			// An exact result computed element by element in float64
			// and rounded, or with wrapping integers.
			got := make([]byte, count*dt.Size())
			for i := range count {
				switch dt {
				case kernels.F32, kernels.F16, kernels.BF16:
					var v float64
					for r := range ranks {
						x := dt.Float64(dt.Bits(ins[r], i))
						switch {
						case r == 0:
							v = x
						case op == kernels.Sum:
							v += x
						case op == kernels.Min:
							v = math.Min(v, x)
						default:
							v = math.Max(v, x)
						}
					}
					putFloat(dt, got, i, v)
				case kernels.S32, kernels.U32:
					var v uint32
					for r := range ranks {
						x := binary.LittleEndian.Uint32(ins[r][4*i:])
						lt := x < v
						if dt == kernels.S32 {
							lt = int32(x) < int32(v)
						}
						switch {
						case r == 0:
							v = x
						case op == kernels.Sum:
							v += x
						case op == kernels.Min && lt, op == kernels.Max && !lt:
							v = x
						}
					}
					binary.LittleEndian.PutUint32(got[4*i:], v)
				case kernels.U64:
					var v uint64
					for r := range ranks {
						x := binary.LittleEndian.Uint64(ins[r][8*i:])
						switch {
						case r == 0:
							v = x
						case op == kernels.Sum:
							v += x
						case op == kernels.Min:
							v = min(v, x)
						default:
							v = max(v, x)
						}
					}
					binary.LittleEndian.PutUint64(got[8*i:], v)
				}
			}
			bad, n := CheckAllReduce(dt, op, ins, got, count, 3)
			assert.Zero(t, n, "%v %v: %v", dt, op, bad)
			// Flip a bit of the exponent or high byte of element 7.
			e := 7*dt.Size() + dt.Size() - 1
			got[e] ^= 0x20
			bad, n = CheckAllReduce(dt, op, ins, got, count, 3)
			assert.Equal(t, 1, n, "%v %v", dt, op)
			if assert.Len(t, bad, 1) {
				assert.Equal(t, 7, bad[0].Index)
			}
		}
	}
}

func putFloat(dt kernels.DType, b []byte, i int, v float64) {
	switch dt {
	case kernels.F32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case kernels.F16:
		// float64 -> f16 through f32 is exact here: the inputs are
		// f16 values and a 3-way sum of them fits f32.
		binary.LittleEndian.PutUint16(b[2*i:], f16Bits(float32(v)))
	case kernels.BF16:
		u := math.Float32bits(float32(v))
		u += 0x7fff + (u>>16)&1
		binary.LittleEndian.PutUint16(b[2*i:], uint16(u>>16))
	}
}

func f16Bits(f float32) uint16 { return float16.Fromfloat32(f).Bits() }
