package collectives

import (
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// The element types and operators are package kernels' vocabulary, under
// the names this package has always used: DType is kernels.DType and Op
// is kernels.RedOp (the same types, so no conversion is ever needed).

// DType is an element type: F32, F16, BF16, S32, U32, U64 (kernels.DType).
type DType = kernels.DType

// The element types.
const (
	F32  = kernels.F32
	F16  = kernels.F16
	BF16 = kernels.BF16
	S32  = kernels.S32
	U32  = kernels.U32
	U64  = kernels.U64
)

// DTypes lists every element type.
var DTypes = kernels.DTypes

// ParseDType parses an element type in any case: f32|float|float32|fp32,
// f16|half|float16|fp16, bf16|bfloat16, s32|int32|int|i32, u32|uint32,
// u64|uint64 (kernels.ParseDType). Its errors match ErrInvalid.
func ParseDType(s string) (DType, error) { return kernels.ParseDType(s) }

// Op is a reduction operator: Sum, Min, Max (kernels.RedOp).
type Op = kernels.RedOp

// The operators.
const (
	Sum = kernels.Sum
	Min = kernels.Min
	Max = kernels.Max
)

// Ops lists every operator.
var Ops = kernels.RedOps

// ParseOp parses an operator in any case: sum (or add), min or max
// (kernels.ParseRedOp). Its errors match ErrInvalid.
func ParseOp(s string) (Op, error) { return kernels.ParseRedOp(s) }

// Supported reports whether the flavor has all-reduce kernels for dt and
// op (kernels.Supported): the unicast flavor has every pair, the multicast
// flavor no f32 min or max.
func Supported(f kernels.Flavor, dt DType, op Op) bool { return kernels.Supported(f, dt, op) }

// FlavorOf is the kernel flavor a team with transport t runs: the
// multicast kernels over the multicast transport, the unicast ones
// otherwise. It is the one place that maps the one to the other.
func FlavorOf(t team.Transport) kernels.Flavor {
	if t == team.Multicast {
		return kernels.Multicast
	}
	return kernels.Unicast
}
