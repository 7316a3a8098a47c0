package collectives

import (
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/kernels"
)

// DType is an element type. Its values are those of kernels.DType.
type DType uint8

// The element types.
const (
	F32  DType = DType(kernels.F32)
	F16  DType = DType(kernels.F16)
	BF16 DType = DType(kernels.BF16)
	S32  DType = DType(kernels.S32)
	U32  DType = DType(kernels.U32)
	U64  DType = DType(kernels.U64)
)

// numDTypes, numOps and numAlgos size the function tables (a test checks
// them against package kernels).
const (
	numDTypes = 6
	numOps    = 3
	numAlgos  = 3
)

// DTypes lists every element type.
var DTypes = []DType{F32, F16, BF16, S32, U32, U64}

var dtypeNames = [numDTypes]string{"f32", "f16", "bf16", "s32", "u32", "u64"}
var dtypeSizes = [numDTypes]uint64{4, 2, 2, 4, 4, 8}

func (t DType) String() string {
	if t.Valid() {
		return dtypeNames[t]
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// Valid reports whether t is one of the element types.
func (t DType) Valid() bool { return t < numDTypes }

// Size is the size of one element in bytes (0 for an invalid type).
func (t DType) Size() int {
	if t.Valid() {
		return int(dtypeSizes[t])
	}
	return 0
}

// ParseDType parses an element type: f32|float|float32, f16|half|float16,
// bf16|bfloat16, s32|int32, u32|uint32, u64|uint64 (any case).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f32", "float", "float32":
		return F32, nil
	case "f16", "half", "float16":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "s32", "int32":
		return S32, nil
	case "u32", "uint32":
		return U32, nil
	case "u64", "uint64":
		return U64, nil
	}
	return 0, fmt.Errorf("%w: unknown element type %q (want f32|float|float32, f16|half|float16, bf16|bfloat16, s32|int32, u32|uint32, u64|uint64)", ErrInvalid, s)
}

// MarshalText writes the type's name.
func (t DType) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("%w: invalid element type %d", ErrInvalid, uint8(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText parses a name as ParseDType does.
func (t *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Op is a reduction operator. Its values are those of kernels.RedOp.
type Op uint8

// The operators.
const (
	Sum Op = Op(kernels.Sum)
	Min Op = Op(kernels.Min)
	Max Op = Op(kernels.Max)
)

// Ops lists every operator.
var Ops = []Op{Sum, Min, Max}

var opNames = [numOps]string{"sum", "min", "max"}

func (o Op) String() string {
	if o.Valid() {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Valid reports whether o is one of the operators.
func (o Op) Valid() bool { return o < numOps }

// ParseOp parses an operator: sum, min or max (any case).
func ParseOp(s string) (Op, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "sum":
		return Sum, nil
	case "min":
		return Min, nil
	case "max":
		return Max, nil
	}
	return 0, fmt.Errorf("%w: unknown reduction operator %q (want sum, min or max)", ErrInvalid, s)
}

// MarshalText writes the operator's name.
func (o Op) MarshalText() ([]byte, error) {
	if !o.Valid() {
		return nil, fmt.Errorf("%w: invalid reduction operator %d", ErrInvalid, uint8(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText parses a name as ParseOp does.
func (o *Op) UnmarshalText(b []byte) error {
	v, err := ParseOp(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// Supported reports whether the flavor has all-reduce kernels for dt and
// op (kernels.Supported): the unicast flavor has every pair, the multicast
// flavor no f32 min or max.
func Supported(f kernels.Flavor, dt DType, op Op) bool {
	return kernels.Supported(f, kernels.DType(dt), kernels.RedOp(op))
}
