package collectives

import (
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// The copy-engine path (WithCopyEngineMin): on the unicast transport, an
// all-gather (2 ranks or more) or a broadcast (2 ranks) of at least the
// limit moves its data with cuMemcpyDtoDAsync into the peers' buffers,
// between two barrier kernels, instead of the SMs' stores. On 2 x H200
// the copy engines carried 395 GB/s a direction where the SMs' stores
// carried 368 (docs/perf.md run 41). A rank's copies to its peers run one
// after another on its stream: each takes the GPU's whole NVLink egress
// through the switches. A broadcast of 3 ranks or more keeps its
// kernels: the root would send its data nranks-1 times. The start barrier
// makes sure every rank's recv is free; a rank arrives at the end barrier
// only after its copies, which stream order places before it, so a rank
// that leaves it finds every peer's data in its recv. The rank's own copy
// (out of place) runs beside the peer copies, on the side stream, forked
// from and joined back into the call's stream with events, which stream
// capture follows too.

// usesCE reports whether the Comm has the copy-engine path: unicast, 2
// ranks or more, a limit, and no device that ranks share
// (team.WithSharedDevices). On 1 x H100 with 2 ranks the copies reached
// 73-74% of the copy roofline where the kernels reach 85-92%: the
// all-gather's 85.6 (run 56), the broadcast sliced with the root's slice
// 85.2 and the one-pass all-reduce 92.0 (run 58).
func (c *Comm) usesCE() bool {
	return c.flavor == kernels.Unicast && c.size >= 2 && c.cfg.ceMin != 0 && !c.sharedDevs
}

// ceCall reports whether call cl, of n bytes a rank sends, goes by copy
// engine: usesCE, an all-gather or a 2-rank broadcast, a recv that is a
// team buffer at the same offset on every rank (the peer copies'
// destination), and n at least the limit.
func (c *Comm) ceCall(cl *call, n uint64) bool {
	kind := c.size == 2 || cl.coll == kernels.CollAllGather
	return c.usesCE() && kind && cl.recvZC && n >= c.cfg.ceMin
}

// ceRank enqueues a copy-engine collective on rank rs: the start barrier;
// n bytes from src into every peer's workspace at offset peerOff (n == 0:
// none) and, beside them, n bytes from src to ownDst where ownDst is not
// src; the end barrier.
func (c *Comm) ceRank(cl *call, rs *part, src cuda.DevicePtr, n, peerOff uint64, ownDst cuda.DevicePtr) error {
	if err := c.barrierRank(cl, rs); err != nil {
		return fmt.Errorf("the copy engines' start barrier: %w", err)
	}
	return c.ceCopies(cl, rs, src, n, peerOff, ownDst)
}

// ceCopies enqueues ceRank's copies and its end barrier.
func (c *Comm) ceCopies(cl *call, rs *part, src cuda.DevicePtr, n, peerOff uint64, ownDst cuda.DevicePtr) error {
	if n > 0 {
		own := ownDst != src
		if own {
			if err := c.d.EventRecord(rs.fork, rs.stream); err != nil {
				return fmt.Errorf("forking the rank's own copy: %w", err)
			}
			if err := c.d.StreamWaitEvent(rs.side, rs.fork); err != nil {
				return fmt.Errorf("forking the rank's own copy: %w", err)
			}
			if err := c.d.MemcpyDtoDAsync(ownDst, src, n, rs.side); err != nil {
				return fmt.Errorf("the rank's own copy: %w", err)
			}
			if err := c.d.EventRecord(rs.join, rs.side); err != nil {
				return fmt.Errorf("joining the rank's own copy: %w", err)
			}
		}
		for i := 1; i < c.size; i++ { // the next rank first, as a ring would
			p := (rs.rank + i) % c.size
			if err := c.d.MemcpyDtoDAsync(cuda.DevicePtr(rs.peer[p]+peerOff), src, n, rs.stream); err != nil {
				return fmt.Errorf("the copy to rank %d: %w", p, err)
			}
		}
		if own {
			if err := c.d.StreamWaitEvent(rs.stream, rs.join); err != nil {
				return fmt.Errorf("joining the rank's own copy: %w", err)
			}
		}
		rs.launches++
	}
	if err := c.barrierRank(cl, rs); err != nil {
		return fmt.Errorf("the copy engines' end barrier: %w", err)
	}
	return nil
}

// ceAllReduce reports whether all-reduce call cl goes half by copy engine:
// usesCE, send and recv team buffers, a count that nranks slices of whole
// 16-byte vectors make up, and at least twice the limit in all: a slice
// (the bytes a rank sends in the all-gather half) of the limit at 2
// ranks, half of it at 4. On 4 x H100 (docs/perf.md run 83) the 256 MiB
// all-reduce took 1159-1161 us with its 64 MiB slices by copy engine
// against 1200-1203 by the SMs; 128 MiB (32 MiB slices) was level.
func (c *Comm) ceAllReduce(cl *call) bool {
	n := uint64(c.size)
	slice := cl.bytes / n
	return c.usesCE() && cl.sendZC && cl.recvZC && cl.count%n == 0 && slice%kabi.VecBytes == 0 && cl.bytes/2 >= c.cfg.ceMin
}

// ceAllReduceRank enqueues an all-reduce on rank rs as a reduce-scatter
// half and an all-gather half, the latter by copy engine: copies of the
// rank's reduced slice into every peer's recv (the two-shot's stores, 346
// GB/s a link on 4 x H200, against the copy engines' 395 at 2 ranks,
// docs/perf.md runs 41, 47), and the end barrier. 512 MiB f32 took 2288
// us where the two-shot took 2391 on 4 x H200 (runs 47, 52), 1515 against
// 1550 on 2 (run 53).
//
// The reduce-scatter half is a kernel, which reduces the rank's slice of
// every rank's send into the same slice of its recv and whose end barrier
// tells it that every rank has read what it needed (send may be recv).
// Out of place in a team of 2 it goes by copy engine too
// (ceReduceScatterRank). With 4 ranks that lost, whether a barrier a
// piece (run 66: 2288 -> 2379-2405 us at 512 MiB) or pipelined (run 72:
// 2280 -> 2375-2407 on 4 x H100): cutting the copies in pieces costs the
// copy engines a fifth of their rate when every GPU copies at once
// (scripts/cepattern.cu, run 72).
func (c *Comm) ceAllReduceRank(cl *call, rs *part) error {
	n := uint64(c.size)
	count := cl.count / n
	slice := count * cl.esize
	mine := uint64(rs.rank) * slice
	if cl.sendOff != cl.recvOff && c.size == 2 {
		if err := c.ceReduceScatterRank(cl, rs, count); err != nil {
			return fmt.Errorf("the reduce-scatter half: %w", err)
		}
	} else {
		k := kernels.Kernel{Coll: kernels.CollReduceScatter, Algo: kernels.OneShot, DType: cl.dt, Op: cl.op}
		c.params(cl, rs, count)
		rs.p.Send, rs.p.Recv = cl.sendOff, cl.recvOff+mine
		if err := c.launchKernel(cl, rs, k, c.grid(kernels.OneShot, slice), kabi.BlockThreads); err != nil {
			return fmt.Errorf("the reduce-scatter half: %w", err)
		}
	}
	src := rs.recv + cuda.DevicePtr(mine)
	return c.ceCopies(cl, rs, src, slice, cl.recvOff+mine, src)
}

// ceReduceScatterRank enqueues the reduce-scatter half of an all-reduce out
// of place (send and recv team buffers at different offsets, slices of
// count elements) on rank rs, by copy engine, as a pipeline. After a start
// barrier the side stream runs one local reduce (kabi.FlagLocal |
// FlagPieces: slot q of the rank's recv holds rank q's slice, its send
// its own), which reduces each of kabi.CEPieces pieces of its slot as soon
// as every peer's flag for it says the piece landed, while the call's
// stream copies, piece by piece (halves, quarters and so on:
// kabi.CEPieceStart), slice p of the rank's send into slot rank of rank
// p's recv for every peer p (free until the all-gather half fills it),
// each followed by a 4-byte copy of the rank's start-barrier sequence word
// into p's flag for the piece (kabi.CEFlag). The call's stream then joins
// the side stream, and a last barrier keeps the all-gather half from
// overwriting a slot before its rank has read it. Run 67's version (a
// barrier and a launch a piece) took 512 MiB on 2 x H200 in 1470 us
// against the SMs' 1514, and lost at 4 ranks (run 66).
func (c *Comm) ceReduceScatterRank(cl *call, rs *part, count uint64) error {
	slice := count * cl.esize
	mine := uint64(rs.rank) * slice
	per := kabi.VecBytes / cl.esize
	k := kernels.Kernel{Coll: kernels.CollReduceScatter, Algo: kernels.OneShot, DType: cl.dt, Op: cl.op}
	if err := c.barrierRank(cl, rs); err != nil {
		return fmt.Errorf("the copy engines' start barrier: %w", err)
	}
	if err := c.d.EventRecord(rs.fork, rs.stream); err != nil {
		return fmt.Errorf("forking the local reduce: %w", err)
	}
	if err := c.d.StreamWaitEvent(rs.side, rs.fork); err != nil {
		return fmt.Errorf("forking the local reduce: %w", err)
	}
	c.params(cl, rs, count)
	rs.p.Send, rs.p.Recv, rs.p.Stage, rs.p.Flags = cl.sendOff+mine, cl.recvOff+mine, cl.recvOff, kabi.FlagLocal|kabi.FlagPieces
	if err := c.launchKernelOn(cl, rs, k, c.grid(kernels.OneShot, slice), kabi.BlockThreads, rs.side); err != nil {
		return fmt.Errorf("the local reduce: %w", err)
	}
	if err := c.cePieces(rs, count, per, cl.esize, func(p int, lo uint64) (dst, src cuda.DevicePtr) {
		return cuda.DevicePtr(rs.peer[p] + cl.recvOff + mine + lo), rs.send + cuda.DevicePtr(uint64(p)*slice+lo)
	}, rs.rank+1, c.size-1); err != nil {
		return err
	}
	if err := c.d.EventRecord(rs.join, rs.side); err != nil {
		return fmt.Errorf("joining the local reduce: %w", err)
	}
	if err := c.d.StreamWaitEvent(rs.stream, rs.join); err != nil {
		return fmt.Errorf("joining the local reduce: %w", err)
	}
	if err := c.barrierRank(cl, rs); err != nil {
		return fmt.Errorf("the barrier after the local reduce: %w", err)
	}
	return nil
}

// cePieces enqueues on rank rs's stream the copies of a pipelined
// copy-engine reduction: for each of kabi.CEPieces pieces of count
// elements (kabi.CEPieceStart, whole vectors of per elements), to each of
// the n ranks from rank first on (modulo the team size: the next rank
// first, as the copy engines' copies go) in turn, the piece (at byte
// offset lo, from where at gives, when it is not empty) and then the
// rank's start-barrier sequence word into that peer's flag for the piece
// (kabi.CEFlag).
func (c *Comm) cePieces(rs *part, count, per, esize uint64, at func(p int, lo uint64) (dst, src cuda.DevicePtr), first, n int) error {
	seq := cuda.DevicePtr(rs.own + kabi.EpochOffset)
	for i := range kabi.CEPieces {
		lo, hi := kabi.CEPieceStart(i, count, per)*esize, kabi.CEPieceStart(i+1, count, per)*esize
		for j := range n {
			p := (first + j) % c.size
			if hi > lo {
				dst, src := at(p, lo)
				if err := c.d.MemcpyDtoDAsync(dst, src, hi-lo, rs.stream); err != nil {
					return fmt.Errorf("the copy of piece %d to rank %d: %w", i, p, err)
				}
			}
			if err := c.d.MemcpyDtoDAsync(cuda.DevicePtr(rs.peer[p]+kabi.CEFlag(i, rs.rank)), seq, 4, rs.stream); err != nil {
				return fmt.Errorf("the flag of piece %d to rank %d: %w", i, p, err)
			}
		}
	}
	rs.launches++ // the copies
	return nil
}

// ceReduce reports whether reduce call cl goes by copy engine (ceReduceRank):
// usesCE, a team of 2, send and recv team buffers at different 16-byte
// aligned offsets (the root's recv is where the peer's copies land), and
// at least the reduce's limit (reduceCEMin: the copy-engine limit, or 256 MiB
// by default where the pull runs below it). With more ranks the root's
// recv has room for one peer's data only, and a ring's share of the links
// is what NCCL already reaches (docs/perf.md, "Where issue 22 stands").
func (c *Comm) ceReduce(cl *call) bool {
	return c.usesCE() && c.size == 2 && cl.sendZC && cl.recvZC && cl.sendOff != cl.recvOff &&
		cl.sendOff%kabi.VecBytes == 0 && cl.bytes >= c.cfg.reduceCEMin(c.size)
}

// ceReduceRank enqueues a 2-rank reduce on rank rs by copy engine, as a
// pipeline without a launch a piece. After a start barrier the rank other
// than the root copies its send into the root's recv in kabi.CEPieces
// pieces (halves, quarters and so on: kabi.CEPieceStart), each followed by
// a 4-byte copy of its start-barrier sequence word into the root's flag
// slot of the piece (kabi.CEFlagOffset). The root launches one kernel
// (kabi.FlagLocal | kabi.FlagPieces) that waits for each flag to equal its
// own sequence word, which the same barrier set, and reduces the piece
// from its own memory (its send and the landed piece, into the landed
// piece) while the next, smaller one is copied: the last reduce is of
// 1/128 of the data. The peer's link carries the data once at the copy
// engines' rate (395 GB/s a direction on 2 x H200, run 62) where the SMs'
// two-shot carried 349 (run 67); run 68's version, a barrier and a launch
// a piece, lost about 35 us to them and to the last piece's reduce. No
// end barrier: the peer's stream has done its copies when it goes on, and
// every later call that writes the root's recv starts with a barrier. The
// root's kernel polls with the call's deadline, so a peer that never
// copies makes it time out as a barrier would.
func (c *Comm) ceReduceRank(cl *call, rs *part) error {
	if err := c.barrierRank(cl, rs); err != nil {
		return fmt.Errorf("the copy engines' start barrier: %w", err)
	}
	if rs.local == cl.rootLocal {
		k := kernels.Kernel{Coll: kernels.CollReduce, Algo: kernels.OneShot, DType: cl.dt, Op: cl.op}
		c.params(cl, rs, cl.count)
		rs.p.Send, rs.p.Recv, rs.p.Stage, rs.p.Flags = cl.sendOff, cl.recvOff, cl.recvOff, kabi.FlagLocal|kabi.FlagPieces
		if err := c.launchKernel(cl, rs, k, c.grid(kernels.OneShot, cl.bytes), kabi.BlockThreads); err != nil {
			return fmt.Errorf("the local reduce: %w", err)
		}
		return nil
	}
	return c.cePieces(rs, cl.count, kabi.VecBytes/cl.esize, cl.esize, func(p int, lo uint64) (dst, src cuda.DevicePtr) {
		return cuda.DevicePtr(rs.peer[p] + cl.recvOff + lo), rs.send + cuda.DevicePtr(lo)
	}, cl.root, 1)
}
