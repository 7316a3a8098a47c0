package kernels

import (
	"errors"
	"fmt"
	"slices"
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

// Algo is a collective's algorithm (an entry point per algorithm; the
// kernel table says which a collective has).
type Algo uint8

// The algorithms.
const (
	// OneShot: every rank reduces the whole buffer from every rank into
	// its own recv. Latency-bound sizes. For reduce-scatter and all-gather
	// the one pass over the rank's own slice (their only algorithm besides
	// LL); for reduce, the root reduces the whole buffer.
	OneShot Algo = iota
	// TwoShot: each rank reduces a 1/nranks slice and stores it to every
	// rank (reduce-scatter, then all-gather). Bandwidth-bound sizes. For
	// reduce: each rank reduces a slice into the root's memory.
	TwoShot
	// LL: low latency, for small messages: every rank pushes its send, in
	// 16-byte lines that carry a flag next to every 4 data bytes, into an
	// LL area of every rank, then polls its own area until every rank's
	// lines of this call have arrived and reduces them. No barrier, no
	// fence: one one-way NVLink trip. Same kernel in both flavors (UC
	// accesses only). The parameters ll_area and ll_lines give the LL
	// area's workspace offset (the same on every rank) and its capacity
	// (kernels/README.md).
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

// The kernel table (collTable, desc.go): one row per collective, from
// which the entry point names, the PTX files, the opcodes' names, the
// loader (internal/kabi), the simulator's kernels, package collectives' layouts and nvls-bench's table
// all follow.
//
// Entry point names (every one an extern "C" entry in the PTX of both
// flavors, except the type and operator pairs Supported leaves out):
//
//	nvls_<source>[_<algo>][_<dtype>_<op>]
//	    algo  = oneshot | twoshot | ll     (Algo.String), if the row has algos
//	    dtype = f32 | f16 | bf16 | s32 | u32 | u64 (DType.String), if typed
//	    op    = sum | min | max            (RedOp.String), if typed
//
// e.g. nvls_allreduce_oneshot_f32_sum, nvls_broadcast, nvls_barrier,
// nvls_reducescatter_ll_bf16_sum, nvls_allgather_oneshot.

// Valid reports whether c is one of the families.
func (c Coll) Valid() bool { return c < numColls }

func (c Coll) String() string {
	if c.Valid() {
		return collTable[c].Name
	}
	return fmt.Sprintf("Coll(%d)", uint8(c))
}

// Opcode is the Op* value of the family's kernels (0 for an invalid one).
func (c Coll) Opcode() uint32 {
	if c.Valid() {
		return collTable[c].Opcode
	}
	return 0
}

// Entry point names of the families without variants.
const (
	BroadcastName = "nvls_broadcast"
	BarrierName   = "nvls_barrier"
)

// Sources names the kernel sources (kernels/<name>.cu) and the PTX images
// made from them (ptx/<name>_<flavor suffix>.ptx), one per family.
var Sources = func() []string {
	s := make([]string, numColls)
	for c := range numColls {
		s[c] = collTable[c].Name
	}
	return s
}()

// Kernel names one entry point: its family and, where the family has
// them, its algorithm, element type and operator (ignored otherwise).
type Kernel struct {
	Coll  Coll
	Algo  Algo
	DType DType
	Op    RedOp
}

// norm is k with the fields its family ignores zeroed; ok is false when
// a field it uses is invalid.
func (k Kernel) norm() (n Kernel, ok bool) {
	if !k.Coll.Valid() {
		return Kernel{}, false
	}
	c := &collTable[k.Coll]
	n.Coll = k.Coll
	if len(c.Algos) > 0 {
		if !slices.Contains(c.Algos, k.Algo) {
			return Kernel{}, false
		}
		n.Algo = k.Algo
	}
	if c.Reduces {
		if !k.DType.Valid() || !k.Op.Valid() {
			return Kernel{}, false
		}
		n.DType, n.Op = k.DType, k.Op
	}
	return n, true
}

// In reports whether flavor f has the entry point k.
func (k Kernel) In(f Flavor) bool {
	n, ok := k.norm()
	return ok && collTable[n.Coll].Supports(f, n.DType, n.Op)
}

// kernelNames holds every name, so that Name does not allocate.
var kernelNames [numColls][numAlgos][numDTypes][numRedOps]string

func init() {
	for c := range numColls {
		for _, k := range variants(c) {
			name := "nvls_" + collTable[c].Name
			if len(collTable[c].Algos) > 0 {
				name += "_" + k.Algo.String()
			}
			if collTable[c].Reduces {
				name += "_" + k.DType.String() + "_" + k.Op.String()
			}
			kernelNames[c][k.Algo][k.DType][k.Op] = name
		}
	}
}

// variants lists every entry point of family c in the unicast flavor (a
// superset of the multicast one): element type, operator, algorithm.
func variants(c Coll) []Kernel {
	info := &collTable[c]
	algos, dts, ops := info.Algos, []DType{0}, []RedOp{0}
	if len(algos) == 0 {
		algos = []Algo{0}
	}
	if info.Reduces {
		dts, ops = DTypes, RedOps
	}
	var ks []Kernel
	for _, t := range dts {
		for _, o := range ops {
			for _, a := range algos {
				ks = append(ks, Kernel{Coll: c, Algo: a, DType: t, Op: o})
			}
		}
	}
	return ks
}

// Name is k's entry point name, e.g. "nvls_allreduce_oneshot_f32_sum"; ""
// for an invalid k. It does not allocate.
func (k Kernel) Name() string {
	n, ok := k.norm()
	if !ok {
		return ""
	}
	return kernelNames[n.Coll][n.Algo][n.DType][n.Op]
}

// AllReduceName is the entry point of the all-reduce kernel for algo, dt
// and op, e.g. "nvls_allreduce_oneshot_f32_sum". It returns "" for an
// invalid argument. It does not allocate.
func AllReduceName(dt DType, op RedOp, algo Algo) string {
	return Kernel{Coll: CollAllReduce, Algo: algo, DType: dt, Op: op}.Name()
}

// Kernels lists every entry point flavor f has, family by family.
func Kernels(f Flavor) []Kernel {
	var ks []Kernel
	for c := range numColls {
		ks = append(ks, kernelsOf(c, f)...)
	}
	return ks
}

func kernelsOf(c Coll, f Flavor) []Kernel {
	var ks []Kernel
	for _, k := range variants(c) {
		if k.In(f) {
			ks = append(ks, k)
		}
	}
	return ks
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

// Supported reports whether the flavor has the typed kernels (all-reduce,
// reduce-scatter, reduce) for dt and op. The unicast flavor has every pair; the multicast flavor lacks f32
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
		return fmt.Sprintf("kernels: invalid element type %v (want one of %s)", e.DType, join(DTypes))
	}
	if !e.Op.Valid() {
		return fmt.Sprintf("kernels: invalid reduction operator %v (want one of %s)", e.Op, join(RedOps))
	}
	return fmt.Sprintf("kernels: %v %v is not supported by the %v flavor (allowed for %v: %s)",
		e.DType, e.Op, e.Flavor, e.DType, join(e.Allowed))
}

// join is "a, b, c": the names of xs.
func join[T fmt.Stringer](xs []T) string {
	names := make([]string, len(xs))
	for i, x := range xs {
		names[i] = x.String()
	}
	return strings.Join(names, ", ")
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
	var names []string
	for c := range numColls {
		if collTable[c].Name == source {
			for _, k := range kernelsOf(c, f) {
				names = append(names, k.Name())
			}
		}
	}
	return names
}

// AllEntries lists every entry point of flavor f over all Sources.
func AllEntries(f Flavor) []string {
	var names []string
	for _, k := range Kernels(f) {
		names = append(names, k.Name())
	}
	return names
}

// OpName names an Op* value ("all-reduce").
func OpName(op uint32) string {
	for _, c := range collTable {
		if c.Opcode == op {
			return c.OpName
		}
	}
	return fmt.Sprintf("op %d", op)
}
