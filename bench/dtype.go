package main

import (
	"encoding/binary"
	"math"
	"strings"

	"github.com/x448/float16"

	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/nccl"
)

type dkind int

const (
	kindFloat dkind = iota
	kindSigned
	kindUnsigned
)

// dtype is an element type as the benchmark sees it: nccl-tests' name,
// its size, how to make, read and compare values of it.
type dtype struct {
	name    string // nccl-tests' name: float, half, bfloat16, int32, uint32, uint64
	aliases []string
	size    int
	kind    dkind
	nccl    nccl.DataType
	kern    kernels.DType
	// unit is the unit roundoff of a floating type (half an ulp at 1).
	unit float64
	// tiny is the spacing of the type's subnormals (absolute error floor).
	tiny float64
}

var dtypes = []*dtype{
	{name: "float", kern: kernels.F32, aliases: []string{"float32", "f32", "fp32"}, size: 4, kind: kindFloat, nccl: nccl.Float32, unit: 0x1p-24, tiny: 0x1p-149},
	{name: "half", kern: kernels.F16, aliases: []string{"float16", "f16", "fp16"}, size: 2, kind: kindFloat, nccl: nccl.Float16, unit: 0x1p-11, tiny: 0x1p-24},
	{name: "bfloat16", kern: kernels.BF16, aliases: []string{"bf16"}, size: 2, kind: kindFloat, nccl: nccl.Bfloat16, unit: 0x1p-8, tiny: 0x1p-133},
	{name: "int32", kern: kernels.S32, aliases: []string{"int", "s32", "i32"}, size: 4, kind: kindSigned, nccl: nccl.Int32},
	{name: "uint32", kern: kernels.U32, aliases: []string{"u32"}, size: 4, kind: kindUnsigned, nccl: nccl.Uint32},
	{name: "uint64", kern: kernels.U64, aliases: []string{"u64"}, size: 8, kind: kindUnsigned, nccl: nccl.Uint64},
}

func dtypeByName(s string) *dtype {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, t := range dtypes {
		if s == t.name {
			return t
		}
		for _, a := range t.aliases {
			if s == a {
				return t
			}
		}
	}
	return nil
}

func dtypeAllowed() string {
	var s []string
	for _, t := range dtypes {
		s = append(s, t.name)
	}
	for _, t := range dtypes {
		s = append(s, t.aliases...)
	}
	return strings.Join(s, ", ")
}

// redop is a reduction operation.
type redop int

const (
	opSum redop = iota
	opMin
	opMax
)

func parseRedop(s string) (redop, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "sum":
		return opSum, true
	case "min":
		return opMin, true
	case "max":
		return opMax, true
	}
	return 0, false
}

func (o redop) String() string {
	switch o {
	case opMin:
		return "min"
	case opMax:
		return "max"
	}
	return "sum"
}

// kern is the operator as package kernels names it.
func (o redop) kern() kernels.RedOp {
	switch o {
	case opMin:
		return kernels.Min
	case opMax:
		return kernels.Max
	}
	return kernels.Sum
}

func (o redop) nccl() nccl.RedOp {
	switch o {
	case opMin:
		return nccl.Min
	case opMax:
		return nccl.Max
	}
	return nccl.Sum
}

// bf16 conversion: round to nearest even on the upper 16 bits of a float32.
func bf16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f { // NaN stays NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bf16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

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
func (t *dtype) value(seed uint64, rank int, i uint64) (bits uint64, v float64) {
	h := elemHash(seed, rank, i)
	switch t.name {
	case "float":
		f := float32(int32(h>>32)) * 0x1p-31
		return uint64(math.Float32bits(f)), float64(f)
	case "half":
		f := float16.Fromfloat32(float32(int32(h>>32)) * 0x1p-31)
		return uint64(f.Bits()), float64(f.Float32())
	case "bfloat16":
		b := bf16FromFloat32(float32(int32(h>>32)) * 0x1p-31)
		return uint64(b), float64(bf16ToFloat32(b))
	case "int32":
		x := int32(h>>43) - 1<<20 // 21 bits, centred on 0
		return uint64(uint32(x)), float64(x)
	case "uint32":
		x := uint32(h >> 40)
		return uint64(x), float64(x)
	case "uint64":
		x := h >> 24
		return x, float64(x)
	}
	panic("unknown dtype " + t.name)
}

// put writes bits as element i of buf.
func (t *dtype) put(buf []byte, i int, bits uint64) {
	switch t.size {
	case 2:
		binary.LittleEndian.PutUint16(buf[2*i:], uint16(bits))
	case 4:
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(bits))
	case 8:
		binary.LittleEndian.PutUint64(buf[8*i:], bits)
	}
}

// get reads element i of buf as bits and as a float64 (NaN for a NaN).
func (t *dtype) get(buf []byte, i int) (bits uint64, v float64) {
	switch t.name {
	case "float":
		b := binary.LittleEndian.Uint32(buf[4*i:])
		return uint64(b), float64(math.Float32frombits(b))
	case "half":
		b := binary.LittleEndian.Uint16(buf[2*i:])
		return uint64(b), float64(float16.Frombits(b).Float32())
	case "bfloat16":
		b := binary.LittleEndian.Uint16(buf[2*i:])
		return uint64(b), float64(bf16ToFloat32(b))
	case "int32":
		b := binary.LittleEndian.Uint32(buf[4*i:])
		return uint64(b), float64(int32(b))
	case "uint32":
		b := binary.LittleEndian.Uint32(buf[4*i:])
		return uint64(b), float64(b)
	case "uint64":
		b := binary.LittleEndian.Uint64(buf[8*i:])
		return b, float64(b)
	}
	panic("unknown dtype " + t.name)
}

// poison is the byte written over outputs before a checked run: all ones
// for floats (a NaN in every float type: never equal to anything), 0xA5
// for integers (outside every range value() produces, sums included).
func (t *dtype) poison() uint8 {
	if t.kind == kindFloat {
		return 0xff
	}
	return 0xa5
}
