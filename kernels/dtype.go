package kernels

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The vocabulary of element types and reduction operators, the one every
// layer speaks: the kernels' entry point names, collectives (whose DType
// and Op are these types), nvls-bench's -d and -o, the simulator's
// reference kernels and the test oracle. A new element type is a row of
// dtypeTable (and its codec cases in elem.go), plus its dt_* struct in
// nvls.h and its instantiations in the .cu files.

// ErrInvalid is matched (errors.Is) by every parse error of this
// vocabulary. Package collectives re-exports it as collectives.ErrInvalid,
// so that callers of either package match the one sentinel; each package
// prefixes its own name to the messages that wrap it.
var ErrInvalid = errors.New("invalid argument")

// DType is an element type.
type DType uint8

// The element types. Their names (String) are the kernel name parts.
const (
	F32 DType = iota
	F16
	BF16
	S32
	U32
	U64
	numDTypes
)

// DTypes lists every element type.
var DTypes = []DType{F32, F16, BF16, S32, U32, U64}

// Kind is what the bits of an element type mean.
type Kind uint8

// The kinds.
const (
	Float Kind = iota
	Signed
	Unsigned
)

// dtypeInfo is one row of the vocabulary.
type dtypeInfo struct {
	name    string   // kernel name part, String()
	nccl    string   // nccl-tests' name, NCCLName()
	aliases []string // the other spellings ParseDType takes
	size    int
	kind    Kind
	mant    int // floats: stored mantissa bits
	minExp  int // floats: exponent of the smallest normal number
}

var dtypeTable = [numDTypes]dtypeInfo{
	F32:  {name: "f32", nccl: "float", aliases: []string{"float32", "f32", "fp32"}, size: 4, kind: Float, mant: 23, minExp: -126},
	F16:  {name: "f16", nccl: "half", aliases: []string{"float16", "f16", "fp16"}, size: 2, kind: Float, mant: 10, minExp: -14},
	BF16: {name: "bf16", nccl: "bfloat16", aliases: []string{"bf16"}, size: 2, kind: Float, mant: 7, minExp: -126},
	S32:  {name: "s32", nccl: "int32", aliases: []string{"int", "s32", "i32"}, size: 4, kind: Signed},
	U32:  {name: "u32", nccl: "uint32", aliases: []string{"u32"}, size: 4, kind: Unsigned},
	U64:  {name: "u64", nccl: "uint64", aliases: []string{"u64"}, size: 8, kind: Unsigned},
}

// Valid reports whether t is one of the element types.
func (t DType) Valid() bool { return t < numDTypes }

func (t DType) String() string {
	if t.Valid() {
		return dtypeTable[t].name
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// NCCLName is the name nccl-tests prints for t: float, half, bfloat16,
// int32, uint32, uint64 ("" for an invalid type).
func (t DType) NCCLName() string {
	if t.Valid() {
		return dtypeTable[t].nccl
	}
	return ""
}

// Size is the size of one element in bytes (0 for an invalid type).
func (t DType) Size() int {
	if t.Valid() {
		return dtypeTable[t].size
	}
	return 0
}

// Kind says whether t is a floating, signed or unsigned type.
func (t DType) Kind() Kind {
	if t.Valid() {
		return dtypeTable[t].kind
	}
	return Unsigned
}

// ParseDType parses an element type, in any case: its name (f32), the name
// nccl-tests uses (float) or another common spelling (float32, fp32, ...;
// DTypeSpellings lists them all).
func ParseDType(s string) (DType, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for t, d := range dtypeTable {
		if k == d.nccl || k == d.name || slices.Contains(d.aliases, k) {
			return DType(t), nil
		}
	}
	return 0, fmt.Errorf("kernels: %w: unknown element type %q (want %s)", ErrInvalid, s, dtypeWant)
}

// DTypeSpellings lists every spelling ParseDType takes: the nccl-tests
// names of all types first, then the other spellings, type by type.
func DTypeSpellings() []string {
	var s []string
	for _, d := range dtypeTable {
		s = append(s, d.nccl)
	}
	for _, d := range dtypeTable {
		s = append(s, d.aliases...)
	}
	return s
}

// dtypeWant is "f32|float|float32|fp32, f16|half|...": every type's
// spellings, its name first.
var dtypeWant = func() string {
	var types []string
	for _, d := range dtypeTable {
		names := []string{d.name, d.nccl}
		for _, a := range d.aliases {
			if a != d.name {
				names = append(names, a)
			}
		}
		types = append(types, strings.Join(names, "|"))
	}
	return strings.Join(types, ", ")
}()

// MarshalText writes the type's name.
func (t DType) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("kernels: %w: invalid element type %d", ErrInvalid, uint8(t))
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

// RedOp is a reduction operator.
type RedOp uint8

// The operators. Their names are the kernel name parts.
const (
	Sum RedOp = iota
	Min
	Max
	numRedOps
)

// RedOps lists every operator.
var RedOps = []RedOp{Sum, Min, Max}

// redopTable holds each operator's name and the other spellings
// ParseRedOp takes.
var redopTable = [numRedOps]struct {
	name    string
	aliases []string
}{
	Sum: {"sum", []string{"add"}},
	Min: {"min", nil},
	Max: {"max", nil},
}

// Valid reports whether o is one of the operators.
func (o RedOp) Valid() bool { return o < numRedOps }

func (o RedOp) String() string {
	if o.Valid() {
		return redopTable[o].name
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ParseRedOp parses an operator, in any case: sum (or add), min, max.
func ParseRedOp(s string) (RedOp, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for o, r := range redopTable {
		if k == r.name || slices.Contains(r.aliases, k) {
			return RedOp(o), nil
		}
	}
	return 0, fmt.Errorf("kernels: %w: unknown reduction operator %q (want sum, min or max; add means sum)", ErrInvalid, s)
}

// MarshalText writes the operator's name.
func (o RedOp) MarshalText() ([]byte, error) {
	if !o.Valid() {
		return nil, fmt.Errorf("kernels: %w: invalid reduction operator %d", ErrInvalid, uint8(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText parses a name as ParseRedOp does.
func (o *RedOp) UnmarshalText(b []byte) error {
	v, err := ParseRedOp(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}
