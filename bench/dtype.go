package main

import (
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/nccl"
)

// The element types and operators are package kernels' vocabulary
// (kernels.DType and kernels.RedOp, which collectives.DType and
// collectives.Op are): -d and -o parse with it, the table prints
// nccl-tests' names from it. What the benchmark adds: NCCL's values for
// them, the values it fills buffers with, and the poison.

// ncclTypes and ncclOps are the types and operators as NCCL numbers them.
var (
	ncclTypes = [...]nccl.DataType{kernels.F32: nccl.Float32, kernels.F16: nccl.Float16, kernels.BF16: nccl.Bfloat16,
		kernels.S32: nccl.Int32, kernels.U32: nccl.Uint32, kernels.U64: nccl.Uint64}
	ncclOps = [...]nccl.RedOp{kernels.Sum: nccl.Sum, kernels.Min: nccl.Min, kernels.Max: nccl.Max}
)

// splitmix64: the value generator. Every element's value is a function of
// (seed, rank, index), so the host reference regenerates any rank's input
// without keeping it.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func elemHash(seed uint64, rank int, i uint64) uint64 {
	return mix(seed ^ uint64(rank+1)*0xd1b54a32d192ed03 ^ mix(i))
}

// value returns element i of rank's input as the type's bit pattern (in
// the low bytes of the result) and as a float64 (exact: every value of
// these types is a float64, uint64 ones below 2^40 by construction).
//
// Floats are uniform in [-1, 1) with the type's full precision; integers
// are bounded so that sums over 8 ranks stay far from the poison pattern:
// int32 in [-2^20, 2^20), uint32 in [0, 2^24), uint64 in [0, 2^40).
func value(t kernels.DType, seed uint64, rank int, i uint64) (bits uint64, v float64) {
	h := elemHash(seed, rank, i)
	switch t {
	case kernels.S32:
		x := int32(h>>43) - 1<<20 // 21 bits, centred on 0
		return uint64(uint32(x)), float64(x)
	case kernels.U32:
		x := uint32(h >> 40)
		return uint64(x), float64(x)
	case kernels.U64:
		x := h >> 24
		return x, float64(x)
	}
	bits = t.FromFloat32(float32(int32(h>>32)) * 0x1p-31)
	return bits, t.Float64(bits)
}

// get reads element i of buf as bits and as a float64 (NaN for a NaN).
func get(t kernels.DType, buf []byte, i int) (bits uint64, v float64) {
	bits = t.Bits(buf, i)
	return bits, t.Float64(bits)
}

// poison is the byte written over outputs before a checked run: all ones
// for floats (a NaN in every float type: never equal to anything), 0xA5
// for integers (outside every range value() produces, sums included).
func poison(t kernels.DType) uint8 {
	if t.Kind() == kernels.Float {
		return 0xff
	}
	return 0xa5
}
