package main

import (
	"context"
	"strings"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
)

// collective is one entry of the benchmark's table: everything the sweep,
// the runners, the check and the report know of one collective. Adding a
// collective is adding an entry to colls.
type collective struct {
	// name is what -coll takes, the JSON's "coll" and the header's.
	name string
	// busFactor is nccl-tests' busbw / algbw for n ranks (see below).
	busFactor func(n int) float64
	// reduces: takes a reduction op (-o); rooted: has a root (-r, the
	// table's root column); moves: moves data, so it has sizes, a dtype,
	// an in-place variant and a check.
	reduces, rooted, moves bool
	// nvls issues it with package collectives on every local rank's
	// stream (collectives.go).
	nvls func(ctx context.Context, c *collectives.Comm, op opSpec, send, recv []cuda.DevicePtr, streams []cuda.Stream) error
	// nccl issues it on one rank's NCCL communicator (ncclrun.go); nil:
	// NCCL has no such collective.
	nccl func(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error
	// want is the expected output of every rank, element by element
	// (check.go); nil with moves false.
	want func(op opSpec, ranks int, seed uint64) expectation
}

// The collectives nvls-bench measures.
var (
	collAllReduce = &collective{name: "allreduce", busFactor: factorAllReduce, reduces: true, moves: true,
		nvls: allReduceNVLS, nccl: allReduceNCCL, want: allReduceWant}
	collBroadcast = &collective{name: "broadcast", busFactor: factorOne, rooted: true, moves: true,
		nvls: broadcastNVLS, nccl: broadcastNCCL, want: broadcastWant}
	collBarrier = &collective{name: "barrier", busFactor: factorNone, nvls: barrierNVLS}

	colls = []*collective{collAllReduce, collBroadcast, collBarrier}
)

// collByName is the entry -coll names (any case), or nil.
func collByName(s string) *collective {
	for _, c := range colls {
		if strings.EqualFold(strings.TrimSpace(s), c.name) {
			return c
		}
	}
	return nil
}

// movesData reports whether the collective a report names moves data
// (true for a name not in the table).
func movesData(name string) bool {
	c := collByName(name)
	return c == nil || c.moves
}

func collNames() string {
	s := make([]string, len(colls))
	for i, c := range colls {
		s[i] = c.name
	}
	return strings.Join(s, ", ")
}

// nccl-tests' bus-bandwidth factors: busbw = algbw * factor, algbw = size
// / time. A factor counts the bytes each rank's links carry, so that
// figures for different rank counts compare against the link speed
// (all_reduce.cu, reduce_scatter.cu, all_gather.cu, alltoall.cu,
// broadcast.cu, reduce.cu, sendrecv.cu of nccl-tests compute them so).

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
