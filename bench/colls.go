package main

import (
	"context"
	"strings"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/nccl"
)

// collective is one entry of the benchmark's table: the collective's
// descriptor (kernels.Desc: name, root, reduction, bus factor, sliced
// side) and what only the benchmark knows of it: the runners, the check,
// the traffic. Adding a collective is adding an entry to colls.
type collective struct {
	*kernels.Desc
	// nvls issues it with package collectives on every local rank's
	// stream (collectives.go).
	nvls func(ctx context.Context, c *collectives.Comm, op opSpec, send, recv []cuda.DevicePtr, streams []cuda.Stream) error
	// nccl issues it on one rank's NCCL communicator (ncclrun.go); nil:
	// NCCL has no such collective.
	nccl func(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error
	// want is the expected output of rank rank, element by element
	// (check.go); nil with Moves false.
	want func(op opSpec, ranks, rank int, seed uint64) expectation
	// perRank: want differs from rank to rank (else it is computed once).
	perRank bool
	// traffic is the fewest bytes the collective must move on n ranks
	// for a row of size bytes (the table's size: nccl-tests' max(send,
	// recv) bytes of one rank): every input it needs read once, every
	// output written once. The roofline column divides it by the time
	// (roofline.go). nil with Moves false.
	traffic func(n int, size uint64) (read, written uint64)
	// ncclSym reports whether NCCL has symmetric kernels for op (the
	// column of NCCL on symmetric memory runs only then; ncclrun.go);
	// nil: none for this collective.
	ncclSym func(op opSpec) bool
}

// The collectives nvls-bench measures. Sliced collectives follow
// nccl-tests' reduce_scatter/all_gather sizing: the count is the size's
// elements split over the ranks, rounded down to whole 16-byte vectors,
// and a rank's sliced side holds ranks x count elements (shape, counts,
// inPlace).
var (
	collAllReduce = &collective{Desc: kernels.CollAllReduce.Desc(),
		nvls: allReduceNVLS, nccl: allReduceNCCL, want: allReduceWant,
		traffic: trafficAllReduce, ncclSym: symFloatSum}
	collBroadcast = &collective{Desc: kernels.CollBroadcast.Desc(),
		nvls: broadcastNVLS, nccl: broadcastNCCL, want: broadcastWant,
		traffic: trafficSpread}
	collBarrier       = &collective{Desc: kernels.CollBarrier.Desc(), nvls: barrierNVLS}
	collReduceScatter = &collective{Desc: kernels.CollReduceScatter.Desc(),
		nvls: reduceScatterNVLS, nccl: reduceScatterNCCL, want: reduceScatterWant, perRank: true,
		traffic: trafficCombine, ncclSym: symFloatSum}
	collAllGather = &collective{Desc: kernels.CollAllGather.Desc(),
		nvls: allGatherNVLS, nccl: allGatherNCCL, want: allGatherWant,
		traffic: trafficSpread, ncclSym: symAnyType}
	collReduce = &collective{Desc: kernels.CollReduce.Desc(),
		nvls: reduceNVLS, nccl: reduceNCCL, want: reduceWant, perRank: true,
		traffic: trafficCombine}

	colls = []*collective{collAllReduce, collBroadcast, collBarrier, collReduceScatter, collAllGather, collReduce}
)

// collByName is the entry -coll names (any case), or nil.
func collByName(s string) *collective {
	for _, c := range colls {
		if strings.EqualFold(strings.TrimSpace(s), c.Name) {
			return c
		}
	}
	return nil
}

// movesData reports whether the collective a report names moves data
// (true for a name not in the table).
func movesData(name string) bool {
	c := collByName(name)
	return c == nil || c.Moves
}

func collNames() string {
	s := make([]string, len(colls))
	for i, c := range colls {
		s[i] = c.Name
	}
	return strings.Join(s, ", ")
}

// bandwidth returns algbw and busbw in GB/s (10^9 bytes per second, as
// nccl-tests) for size bytes moved in sec seconds, busbw with the factor
// of the collective and rank count.
func bandwidth(size uint64, sec, factor float64) (algbw, busbw float64) {
	if sec <= 0 {
		return 0, 0
	}
	algbw = float64(size) / 1e9 / sec
	return algbw, algbw * factor
}

// The fewest bytes a collective moves (collective.traffic), for n ranks
// and a row of size bytes, nccl-tests' size: the larger of one rank's
// send and recv. Every input the result depends on is read once, every
// output written once; nothing else counts (no staging, no flags).

// trafficAllReduce: every rank's input read (n x size), every rank's
// output written (n x size).
func trafficAllReduce(n int, size uint64) (read, written uint64) {
	return uint64(n) * size, uint64(n) * size
}

// trafficSpread is one rank's worth of input read and every rank's
// output written: broadcast (the root's size bytes read, n x size
// written) and all-gather (n sends of size/n read, n recvs of size
// written).
func trafficSpread(n int, size uint64) (read, written uint64) {
	return size, uint64(n) * size
}

// trafficCombine is every rank's input read and one rank's worth of
// output written: reduce (n x size read, the root's size written) and
// reduce-scatter (n sends of size read, n recvs of size/n written).
func trafficCombine(n int, size uint64) (read, written uint64) {
	return uint64(n) * size, size
}

// NCCL's symmetric kernels (NCCL 2.27.3 to 2.30, src/sym_kernels.cc:
// ncclSymkImplemented) do all-reduce and reduce-scatter with sum over
// float, half and bfloat16 (and fp8), and all-gather of any type.

// symFloatSum: sum over a float type of 32 bits or fewer.
func symFloatSum(op opSpec) bool {
	return op.op == kernels.Sum && op.dtype.Kind() == kernels.Float && op.dtype.Size() <= 4
}

// symAnyType: any type (all-gather moves bytes).
func symAnyType(opSpec) bool { return true }

// shape is what nccl-tests makes of a size of the sweep: the count the
// collective is called with and the size its row shows (and its bandwidth
// counts), max(send, recv bytes). Sliced collectives: count = the size's
// elements / ranks, rounded down to whole 16-byte vectors, size = ranks x
// count elements (reduce_scatter.cu, all_gather.cu); the others: every
// element of the size. count 0: the size is skipped, as nccl-tests does.
func (c *collective) shape(size, elem uint64, ranks int) (count, shown uint64) {
	count = size / elem
	if c.Sliced == kernels.NoSide {
		return count, count * elem
	}
	per := max(kabi.VecBytes/elem, 1)
	count = count / uint64(ranks) / per * per
	return count, count * elem * uint64(ranks)
}

// counts are the elements of a rank's send and recv for op.
func (c *collective) counts(op opSpec, ranks int) (send, recv uint64) {
	switch c.Sliced {
	case kernels.SendSide:
		return op.count * uint64(ranks), op.count
	case kernels.RecvSide:
		return op.count, op.count * uint64(ranks)
	}
	return op.count, op.count
}

// inPlace are the send and recv pointers of op in place over the recv
// buffers (nccl-tests' in-place offsets): reduce-scatter: recv is the
// rank's slice of the buffer; all-gather: send is the rank's slot of it;
// the others: the buffer itself.
func (c *collective) inPlace(op opSpec, n *node, recv []cuda.DevicePtr) (s, r []cuda.DevicePtr) {
	s, r = append([]cuda.DevicePtr(nil), recv...), append([]cuda.DevicePtr(nil), recv...)
	for i := range recv {
		off := cuda.DevicePtr(uint64(n.rank(i)) * op.count * uint64(op.dtype.Size()))
		switch c.Sliced {
		case kernels.SendSide:
			r[i] += off
		case kernels.RecvSide:
			s[i] += off
		}
	}
	return s, r
}
