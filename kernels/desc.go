package kernels

// Coll is a kernel family: the entry points of one source.
type Coll uint8

// The families, in the order of Sources.
const (
	CollAllReduce Coll = iota
	CollBroadcast
	CollBarrier
	CollReduceScatter
	CollAllGather
	CollReduce
	numColls
)

// Colls lists every family.
var Colls = []Coll{CollAllReduce, CollBroadcast, CollBarrier, CollReduceScatter, CollAllGather, CollReduce}

// Opcodes name a collective in the kernels' status word, and so in the
// errors of package collectives (TimeoutError.Opcode, AbortError.Opcode;
// OpName names one). Each has a twin NVLS_OP_* in nvls.h.
const (
	OpBarrier   = 1
	OpAllReduce = 2
	OpBroadcast = 3
	// OpReduceScatter, OpAllGather, OpReduce: the reduce-scatter,
	// all-gather and reduce (to a root) kernels.
	OpReduceScatter = 4
	OpAllGather     = 5
	OpReduce        = 6
)

// Desc describes one collective: the row of the kernel table that package
// kernels (entry names, PTX files), the loader, kernels/simkern (which
// reference kernel runs), package collectives (layouts, in-place rules)
// and nvls-bench (its table, bus bandwidth) all read. Adding a collective
// is a row of collTable and its opcode (here and in nvls.h), its source,
// its reference kernel, its Comm method and its tests
// (docs/architecture.md).
type Desc struct {
	// Coll is the row's family.
	Coll Coll
	// Name is the short name: kernels/<Name>.cu, ptx/<Name>_<flavor>.ptx,
	// the entry names (nvls_<Name>...), nvls-bench's -coll and JSON.
	Name string
	// OpName is how errors and the status word name it ("all-reduce");
	// Opcode is its Op* value (what its kernels write in the status word).
	OpName string
	Opcode uint32
	// Algos are the algorithms with an entry point each (none: one).
	Algos []Algo
	// Reduces: it takes a reduction operator and has an entry point per
	// element type and operator (Supported says which each flavor has);
	// otherwise it moves bytes of any element type.
	Reduces bool
	// Rooted: it has a root rank.
	Rooted bool
	// Moves: it moves data (all but the barrier).
	Moves bool
	// Sliced says which side holds ranks x count elements. The in-place
	// rule follows: with NoSide, send == recv; with SendSide
	// (reduce-scatter), recv is the rank's slice of send; with RecvSide
	// (all-gather), send is the rank's slice of recv (InPlace).
	Sliced Side
	// BusFactor is nccl-tests' busbw / algbw for n ranks: the share of
	// the data each rank's links carry.
	BusFactor func(n int) float64
}

// Side is the side of a collective that holds every rank's slice.
type Side uint8

// The sides.
const (
	NoSide Side = iota
	SendSide
	RecvSide
)

// InPlace reports whether send and recv of team rank rank are the
// collective's in-place layout, for slices of sliceBytes bytes (the count
// in bytes: a rank's share).
func (d *Desc) InPlace(send, recv uint64, rank int, sliceBytes uint64) bool {
	slot := uint64(rank) * sliceBytes
	switch d.Sliced {
	case SendSide:
		return recv == send+slot
	case RecvSide:
		return send == recv+slot
	default:
		return send == recv
	}
}

// Supports reports whether flavor f has the collective's kernel for
// element type dt and operator op (ignored where it does not reduce): the
// unicast flavor has every pair, the multicast one what multimem can
// reduce (Supported).
func (d *Desc) Supports(f Flavor, dt DType, op RedOp) bool {
	if d.Reduces {
		return Supported(f, dt, op)
	}
	return f.Valid() && dt.Valid()
}

// Desc is the family's row; nil for an invalid c.
func (c Coll) Desc() *Desc {
	if !c.Valid() {
		return nil
	}
	return &collTable[c]
}

// Descs lists every collective's row, in Colls order.
func Descs() []*Desc {
	ds := make([]*Desc, numColls)
	for c := range numColls {
		ds[c] = &collTable[c]
	}
	return ds
}

var collTable = [numColls]Desc{
	CollAllReduce: {Coll: CollAllReduce, Name: "allreduce", OpName: "all-reduce", Opcode: OpAllReduce,
		Algos: []Algo{OneShot, TwoShot, LL}, Reduces: true, Moves: true, BusFactor: factorAllReduce},
	CollBroadcast: {Coll: CollBroadcast, Name: "broadcast", OpName: "broadcast", Opcode: OpBroadcast,
		Rooted: true, Moves: true, BusFactor: factorOne},
	CollBarrier: {Coll: CollBarrier, Name: "barrier", OpName: "barrier", Opcode: OpBarrier, BusFactor: factorNone},
	CollReduceScatter: {Coll: CollReduceScatter, Name: "reducescatter", OpName: "reduce-scatter", Opcode: OpReduceScatter,
		Algos: []Algo{OneShot, LL}, Reduces: true, Moves: true, Sliced: SendSide, BusFactor: factorPartial},
	CollAllGather: {Coll: CollAllGather, Name: "allgather", OpName: "all-gather", Opcode: OpAllGather,
		Algos: []Algo{OneShot, LL}, Moves: true, Sliced: RecvSide, BusFactor: factorPartial},
	CollReduce: {Coll: CollReduce, Name: "reduce", OpName: "reduce", Opcode: OpReduce,
		Algos: []Algo{OneShot, TwoShot, LL}, Reduces: true, Rooted: true, Moves: true, BusFactor: factorOne},
}

// nccl-tests' bus-bandwidth factors: busbw = algbw * factor, algbw = size
// / time. A factor counts the bytes each rank's links carry, so that
// figures for different rank counts compare against the link speed
// (all_reduce.cu, reduce_scatter.cu, all_gather.cu, broadcast.cu and
// reduce.cu of nccl-tests compute them so).

// factorAllReduce is all-reduce's 2(n-1)/n.
func factorAllReduce(n int) float64 { return 2 * factorPartial(n) }

// factorPartial is (n-1)/n: reduce-scatter, all-gather, all-to-all.
func factorPartial(n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(n-1) / float64(n)
}

// factorOne is 1: broadcast, reduce, send/recv.
func factorOne(n int) float64 {
	if n <= 0 {
		return 0
	}
	return 1
}

// factorNone is a barrier's 0: it moves no data.
func factorNone(int) float64 { return 0 }
