package kernels

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/ptx"
)

// Flavor selects the PTX compiled with multimem leaves or with unicast
// leaves (see package ptx).
type Flavor = ptx.Flavor

// The flavors.
const (
	Unicast   = ptx.Unicast
	Multicast = ptx.Multicast
)

// DType is an element type of the all-reduce kernels.
type DType uint8

// The element types. Their names are the kernel name parts.
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

var dtypeNames = [numDTypes]string{"f32", "f16", "bf16", "s32", "u32", "u64"}
var dtypeSizes = [numDTypes]int{4, 2, 2, 4, 4, 8}

func (t DType) String() string {
	if t < numDTypes {
		return dtypeNames[t]
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// Size is the size of one element in bytes (0 for an invalid type).
func (t DType) Size() int {
	if t < numDTypes {
		return dtypeSizes[t]
	}
	return 0
}

// Valid reports whether t is one of the element types.
func (t DType) Valid() bool { return t < numDTypes }

// ParseDType parses a type name ("f32", "bf16", ...; "float32", "half",
// "bfloat16", "int32", "uint32", "uint64" too, as nccl-tests spells them).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32", "float":
		return F32, nil
	case "f16", "float16", "half":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "s32", "int32", "int":
		return S32, nil
	case "u32", "uint32":
		return U32, nil
	case "u64", "uint64":
		return U64, nil
	}
	return 0, fmt.Errorf("kernels: unknown element type %q (want one of f32, f16, bf16, s32, u32, u64)", s)
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

var redopNames = [numRedOps]string{"sum", "min", "max"}

func (o RedOp) String() string {
	if o < numRedOps {
		return redopNames[o]
	}
	return fmt.Sprintf("RedOp(%d)", uint8(o))
}

// Valid reports whether o is one of the operators.
func (o RedOp) Valid() bool { return o < numRedOps }

// ParseRedOp parses an operator name ("sum", "min", "max").
func ParseRedOp(s string) (RedOp, error) {
	switch strings.ToLower(s) {
	case "sum", "add":
		return Sum, nil
	case "min":
		return Min, nil
	case "max":
		return Max, nil
	}
	return 0, fmt.Errorf("kernels: unknown reduction operator %q (want sum, min or max)", s)
}

// Algo is an all-reduce algorithm.
type Algo uint8

// The algorithms.
const (
	// OneShot: every rank reduces the whole buffer from every rank into
	// its own recv. Latency-bound sizes.
	OneShot Algo = iota
	// TwoShot: each rank reduces a 1/nranks slice and stores it to every
	// rank (reduce-scatter, then all-gather). Bandwidth-bound sizes.
	TwoShot
	// LL: low latency, for small messages: every rank pushes its send, in
	// 16-byte lines that carry a flag next to every 4 data bytes, into an
	// LL area of every rank, then polls its own area until every rank's
	// lines of this call have arrived and reduces them. No barrier, no
	// fence: one one-way NVLink trip. Same kernel in both flavors (UC
	// accesses only). Params.Stage is the workspace offset of the LL area
	// (LLAreaBytes for the payload, the same offset on every rank).
	LL
	numAlgos
)

// Algos lists every algorithm.
var Algos = []Algo{OneShot, TwoShot, LL}

var algoNames = [numAlgos]string{"oneshot", "twoshot", "ll"}

func (a Algo) String() string {
	if a < numAlgos {
		return algoNames[a]
	}
	return fmt.Sprintf("Algo(%d)", uint8(a))
}

// Valid reports whether a is one of the algorithms.
func (a Algo) Valid() bool { return a < numAlgos }

// Kernel entry point names. The scheme (every name is an extern "C" entry
// in the PTX of both flavors unless Supported says otherwise):
//
//	nvls_allreduce_<algo>_<dtype>_<op>   kernels/allreduce.cu
//	    algo  = oneshot | twoshot | ll   (Algo.String)
//	    dtype = f32 | f16 | bf16 | s32 | u32 | u64 (DType.String)
//	    op    = sum | min | max          (RedOp.String)
//	nvls_broadcast                       kernels/broadcast.cu
//	nvls_barrier                         kernels/barrier.cu
const (
	BroadcastName = "nvls_broadcast"
	BarrierName   = "nvls_barrier"
)

// Sources names the kernel sources (kernels/<name>.cu) and the PTX images
// made from them (ptx/<name>_<flavor suffix>.ptx).
var Sources = []string{"allreduce", "broadcast", "barrier"}

var allreduceNames [numAlgos][numDTypes][numRedOps]string

func init() {
	for a := range numAlgos {
		for t := range numDTypes {
			for o := range numRedOps {
				allreduceNames[a][t][o] = "nvls_allreduce_" + a.String() + "_" + t.String() + "_" + o.String()
			}
		}
	}
}

// AllReduceName is the entry point of the all-reduce kernel for algo, dt
// and op, e.g. "nvls_allreduce_oneshot_f32_sum". It returns "" for an
// invalid argument. It does not allocate.
func AllReduceName(dt DType, op RedOp, algo Algo) string {
	if !dt.Valid() || !op.Valid() || !algo.Valid() {
		return ""
	}
	return allreduceNames[algo][dt][op]
}

// multicastOps is what multimem.ld_reduce can do for each element type:
// f32 add only; f16x2/bf16x2 add (with .acc::f32), min, max; s32, u32 and
// u64 add, min, max.
var multicastOps = [numDTypes][numRedOps]bool{
	F32:  {Sum: true},
	F16:  {Sum: true, Min: true, Max: true},
	BF16: {Sum: true, Min: true, Max: true},
	S32:  {Sum: true, Min: true, Max: true},
	U32:  {Sum: true, Min: true, Max: true},
	U64:  {Sum: true, Min: true, Max: true},
}

// Supported reports whether the flavor has all-reduce kernels for dt and
// op. The unicast flavor has every pair; the multicast flavor lacks f32
// min and max (multimem.ld_reduce has no f32 min/max).
func Supported(f Flavor, dt DType, op RedOp) bool {
	if !f.Valid() || !dt.Valid() || !op.Valid() {
		return false
	}
	if f == Multicast {
		return multicastOps[dt][op]
	}
	return true
}

// AllowedOps lists the operators the flavor supports for dt.
func AllowedOps(f Flavor, dt DType) []RedOp {
	var ops []RedOp
	for _, o := range RedOps {
		if Supported(f, dt, o) {
			ops = append(ops, o)
		}
	}
	return ops
}

// ErrUnsupported is matched (errors.Is) by every *UnsupportedError.
var ErrUnsupported = errors.New("kernels: unsupported element type and operator")

// UnsupportedError says that a flavor has no kernel for a type and
// operator, and what it does allow for that type.
type UnsupportedError struct {
	Flavor  Flavor
	DType   DType
	Op      RedOp
	Allowed []RedOp
}

func (e *UnsupportedError) Error() string {
	if !e.DType.Valid() {
		return fmt.Sprintf("kernels: invalid element type %v (want one of f32, f16, bf16, s32, u32, u64)", e.DType)
	}
	if !e.Op.Valid() {
		return fmt.Sprintf("kernels: invalid reduction operator %v (want sum, min or max)", e.Op)
	}
	names := make([]string, len(e.Allowed))
	for i, o := range e.Allowed {
		names[i] = o.String()
	}
	return fmt.Sprintf("kernels: %v %v is not supported by the %v flavor (allowed for %v: %s)",
		e.DType, e.Op, e.Flavor, e.DType, strings.Join(names, ", "))
}

// Is makes errors.Is(err, ErrUnsupported) hold.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// CheckSupported returns nil when Supported(f, dt, op), and otherwise an
// *UnsupportedError naming the allowed operators.
func CheckSupported(f Flavor, dt DType, op RedOp) error {
	if Supported(f, dt, op) {
		return nil
	}
	return &UnsupportedError{Flavor: f, DType: dt, Op: op, Allowed: AllowedOps(f, dt)}
}

// Entries lists every kernel entry point the PTX of source (one of
// Sources) holds in flavor f, in a fixed order.
func Entries(source string, f Flavor) []string {
	switch source {
	case "allreduce":
		var names []string
		for _, t := range DTypes {
			for _, o := range RedOps {
				if Supported(f, t, o) {
					for _, a := range Algos {
						names = append(names, AllReduceName(t, o, a))
					}
				}
			}
		}
		return names
	case "broadcast":
		return []string{BroadcastName}
	case "barrier":
		return []string{BarrierName}
	}
	return nil
}

// AllEntries lists every entry point of flavor f over all Sources.
func AllEntries(f Flavor) []string {
	var names []string
	for _, s := range Sources {
		names = append(names, Entries(s, f)...)
	}
	return names
}
