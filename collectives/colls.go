package collectives

import (
	"context"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// ReduceScatter reduces, with op, every rank's send (nranks x recvcount
// elements of type dt) and leaves slice r (elements [r*recvcount,
// (r+1)*recvcount)) of the result in rank r's recv, as ncclReduceScatter.
// In place is recv[i] == send[i] + rank x recvcount elements. send is read
// by every rank: zero-copy when it is a team buffer at the same offset on
// every rank, else copied in through the staging area; recv is written by
// its own rank only and may be any memory of the rank's device (no copy).
// Arguments otherwise as for AllReduce.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv []cuda.DevicePtr, recvcount uint64, dt DType, op Op, streams []cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.getCall("ReduceScatter")
	defer c.putCall(cl)
	skip, err := c.prepareReduceScatter(cl, send, recv, recvcount, dt, op, streams)
	if err != nil || skip {
		return err
	}
	return c.run(ctx, cl)
}

// AllGather gathers every rank's send (sendcount elements of type dt)
// into every rank's recv, rank r's at element offset r*sendcount, as
// ncclAllGather. In place is send[i] == recv[i] + rank x sendcount
// elements. recv is written by every rank: zero-copy when it is a team
// buffer at the same offset on every rank, else gathered into the staging
// area and copied out; send is read by its own rank only and may be any
// memory of the rank's device (no copy). Arguments otherwise as for
// AllReduce (any element type: nothing is reduced).
func (c *Comm) AllGather(ctx context.Context, send, recv []cuda.DevicePtr, sendcount uint64, dt DType, streams []cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.getCall("AllGather")
	defer c.putCall(cl)
	skip, err := c.prepareAllGather(cl, send, recv, sendcount, dt, streams)
	if err != nil || skip {
		return err
	}
	return c.run(ctx, cl)
}

// Reduce reduces count elements of type dt with op over every rank's send
// into the recv of rank root (a team rank), as ncclReduce; no other rank's
// recv is read or written (those ranks may pass 0). In place is send[i] ==
// recv[i] on the root. send is read by every rank: zero-copy when it is a
// team buffer at the same offset on every rank, else copied in through the
// staging area. The root's recv may be any memory of its device; above the
// one-shot limit (unicast), where every rank stores its share of the
// result into it, a 16-byte aligned team buffer takes it without a copy,
// anything else through the root's staging area and a copy out. Under MPI
// the other processes cannot see the root's recv: for it to go without a
// copy they pass the same team buffer as recv (0 or other memory tells
// them it is not one). Arguments otherwise as for AllReduce.
func (c *Comm) Reduce(ctx context.Context, send, recv []cuda.DevicePtr, count uint64, dt DType, op Op, root int, streams []cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.getCall("Reduce")
	defer c.putCall(cl)
	skip, err := c.prepareReduce(cl, send, recv, count, dt, op, root, streams)
	if err != nil || skip {
		return err
	}
	return c.run(ctx, cl)
}

// overlapIn reports whether [a, a+an) and [b, b+bn) overlap.
func overlapIn(a cuda.DevicePtr, an uint64, b cuda.DevicePtr, bn uint64) bool {
	x, y := uint64(a), uint64(b)
	return x < y+bn && y < x+an
}

// classifySend and classifyRecv classify call cl's pointers of rank rs
// (classify), and note whether the driver must check them. The own-only
// operands (a reduce-scatter's or reduce's recv, an all-gather's send)
// need no alignment.
func (c *Comm) classifySend(cl *call, rs *part) (err error) {
	rs.sendIn, rs.sendOff, rs.sendChk, err = c.classify(cl, "send", rs.rankState, rs.send, cl.sendBytes, cl.coll.Desc().Sliced == kernels.RecvSide)
	cl.foreign = cl.foreign || rs.sendChk
	cl.sendZC = cl.sendZC && rs.sendIn && rs.sendOff == cl.parts[0].sendOff
	return err
}

func (c *Comm) classifyRecv(cl *call, rs *part) (err error) {
	rs.recvIn, rs.recvOff, rs.recvChk, err = c.classify(cl, "recv", rs.rankState, rs.recv, cl.recvBytes, cl.coll.Desc().Sliced != kernels.RecvSide)
	cl.foreign = cl.foreign || rs.recvChk
	cl.recvZC = cl.recvZC && rs.recvIn && rs.recvOff == cl.parts[0].recvOff
	return err
}

// checkLayout refuses send and recv of rank rs that overlap without being
// the call's in-place layout (inPlace).
func (c *Comm) checkLayout(cl *call, rs *part, inPlace bool) error {
	if !inPlace && overlapIn(rs.send, cl.sendBytes, rs.recv, cl.recvBytes) {
		return argErr(cl.name, argName("send", rs.rankState), rs.rank, "send [%#x, +%d) and recv [%#x, +%d) overlap without being the in-place layout", uint64(rs.send), cl.sendBytes, uint64(rs.recv), cl.recvBytes)
	}
	return nil
}

// prepareReduceScatter checks a reduce-scatter and plans it into cl.
func (c *Comm) prepareReduceScatter(cl *call, send, recv []cuda.DevicePtr, count uint64, dt DType, op Op, streams []cuda.Stream) (skip bool, err error) {
	if err := c.start(cl, send, recv, streams, dt, op, true); err != nil || count == 0 {
		return err == nil, err
	}
	return false, c.prepareSliced(cl, kernels.CollReduceScatter, send, recv, count, dt, op)
}

// prepareAllGather checks an all-gather and plans it into cl.
func (c *Comm) prepareAllGather(cl *call, send, recv []cuda.DevicePtr, count uint64, dt DType, streams []cuda.Stream) (skip bool, err error) {
	if err := c.start(cl, send, recv, streams, dt, 0, false); err != nil || count == 0 {
		return err == nil, err
	}
	return false, c.prepareSliced(cl, kernels.CollAllGather, send, recv, count, dt, 0)
}

// prepareSliced plans a reduce-scatter (send holds nranks slices) or an
// all-gather (recv does) into cl, checking every rank's pointers: the
// in-place layout (the own slice inside the other buffer) or no overlap.
func (c *Comm) prepareSliced(cl *call, coll kernels.Coll, send, recv []cuda.DevicePtr, count uint64, dt DType, op Op) error {
	d := coll.Desc()
	n := uint64(c.size)
	sendN, recvN := n, uint64(1)
	if d.Sliced == kernels.RecvSide {
		sendN, recvN = 1, n
	}
	if err := c.plan(cl, coll, count, dt, op, sendN, recvN); err != nil {
		return err
	}
	for l := range cl.parts {
		rs := &cl.parts[l]
		rs.send, rs.recv = send[l], recv[l]
		inPlace := d.InPlace(uint64(rs.send), uint64(rs.recv), rs.rank, cl.bytes)
		if err := c.checkLayout(cl, rs, inPlace); err != nil {
			return err
		}
		if err := c.classifySend(cl, rs); err != nil {
			return err
		}
		if err := c.classifyRecv(cl, rs); err != nil {
			return err
		}
	}
	cl.sendOff, cl.recvOff = cl.parts[0].sendOff, cl.parts[0].recvOff
	return nil
}

// prepareReduce checks a reduce and plans it into cl. Only the root's
// recv is checked; planReduceRecv decides where the result goes.
func (c *Comm) prepareReduce(cl *call, send, recv []cuda.DevicePtr, count uint64, dt DType, op Op, root int, streams []cuda.Stream) (skip bool, err error) {
	if err := c.start(cl, send, recv, streams, dt, op, true); err != nil {
		return false, err
	}
	if err := c.checkRoot(cl.name, root); err != nil || count == 0 {
		return err == nil, err
	}
	if err := c.plan(cl, kernels.CollReduce, count, dt, op, 1, 1); err != nil {
		return false, err
	}
	cl.root = root
	for l := range cl.parts {
		rs := &cl.parts[l]
		rs.send, rs.recv = send[l], 0
		if err := c.classifySend(cl, rs); err != nil {
			return false, err
		}
		if rs.rank != root {
			continue
		}
		cl.rootLocal, rs.recv = l, recv[l]
		if err := c.checkLayout(cl, rs, rs.send == rs.recv); err != nil {
			return false, err
		}
		if err := c.classifyRecv(cl, rs); err != nil {
			return false, err
		}
	}
	cl.sendOff = cl.parts[0].sendOff
	c.planReduceRecv(cl, recv)
	return false, nil
}

// planReduceRecv decides where every rank stores a reduce's result: into
// the root's recv itself (cl.recvZC, at workspace offset cl.recvOff, through
// the root's UC alias: no stage, no copy out) when that recv is a 16-byte
// aligned pointer into the root's team workspace, else into the root's
// staging area B. Where the root is local its pointer decides. Where it is
// another process's (MPI), this process's ranks cannot see it: their own
// recv stands for it, so zero-copy needs every local recv at one aligned
// workspace offset, the root's (the same team buffer); 0, or anything
// else, means the root's recv is not one (a non-root's recv is never
// written, so it is not an error).
func (c *Comm) planReduceRecv(cl *call, recv []cuda.DevicePtr) {
	if cl.rootLocal >= 0 {
		rs := &cl.parts[cl.rootLocal]
		cl.recvZC, cl.recvOff = rs.recvIn && rs.recvOff%kabi.VecBytes == 0, rs.recvOff
		return
	}
	for l, rs := range c.ranks {
		if recv[l] == 0 {
			cl.recvZC = false
			return
		}
		in, off, _, err := c.classify(cl, "recv", rs, recv[l], cl.recvBytes, true)
		if l == 0 {
			cl.recvOff = off
		}
		cl.recvZC = cl.recvZC && err == nil && in && off%kabi.VecBytes == 0 && off == cl.recvOff
	}
}

// reduceScatterRank enqueues a reduce-scatter on one rank: LL up to llMax
// (bytes of a slice); one launch on a symmetric send; otherwise in chunks
// of the staging area (stageBytes / nranks per slice): every slice's chunk
// copied into A, [nranks][chunk], then one launch. recv is always used in
// place (FlagAbsRecv).
func (c *Comm) reduceScatterRank(cl *call, rs *part) error {
	k := kernels.Kernel{Coll: kernels.CollReduceScatter, Algo: kernels.OneShot, DType: cl.dt, Op: cl.op}
	if cl.bytes <= c.llMax {
		return c.launchLL(cl, rs, k, rs.recv)
	}
	step, n := cl.count, uint64(c.size)
	if !cl.sendZC {
		step = c.stageBytes / (n * cl.esize)
	}
	a := cuda.DevicePtr(rs.own + c.stageA)
	for i := uint64(0); i < cl.count; i += step {
		m := min(step, cl.count-i)
		c.params(cl, rs, m)
		rs.p.Send, rs.p.Recv, rs.p.Flags = cl.sendOff, uint64(rs.recv)+i*cl.esize, kabi.FlagAbsRecv
		if !cl.sendZC {
			rs.p.Send = c.stageA
			for q := range n {
				src := rs.send + cuda.DevicePtr((q*cl.count+i)*cl.esize)
				if err := c.copyIn(rs, a+cuda.DevicePtr(q*m*cl.esize), src, m*cl.esize); err != nil {
					return err
				}
			}
		}
		if err := c.launchKernel(cl, rs, k, c.grid(kernels.OneShot, m*cl.esize), kabi.BlockThreads); err != nil {
			return err
		}
	}
	return nil
}

// allGatherRank enqueues an all-gather on one rank: LL up to llMax (bytes
// of a slot); one launch into a symmetric recv; otherwise in chunks
// (stageBytes / nranks per slot) gathered into B, [nranks][chunk], and
// copied out slot by slot. send is always used in place (FlagAbsSend).
func (c *Comm) allGatherRank(cl *call, rs *part) error {
	k := kernels.Kernel{Coll: kernels.CollAllGather, Algo: kernels.OneShot}
	if cl.bytes <= c.llMax {
		return c.launchLL(cl, rs, k, rs.recv)
	}
	if c.ceCall(cl, cl.bytes) {
		slot := uint64(rs.rank) * cl.bytes
		return c.ceRank(cl, rs, rs.send, cl.bytes, cl.recvOff+slot, rs.recv+cuda.DevicePtr(slot))
	}
	step, n := cl.count, uint64(c.size)
	if !cl.recvZC {
		step = c.stageBytes / (n * cl.esize)
	}
	b := cuda.DevicePtr(rs.own + c.stageA + c.stageBytes)
	for i := uint64(0); i < cl.count; i += step {
		m := min(step, cl.count-i)
		c.params(cl, rs, m)
		rs.p.Send, rs.p.Recv, rs.p.Flags = uint64(rs.send)+i*cl.esize, cl.recvOff, kabi.FlagAbsSend
		if !cl.recvZC {
			rs.p.Recv = c.stageA + c.stageBytes
		}
		if err := c.launchKernel(cl, rs, k, c.grid(kernels.OneShot, m*cl.esize), kabi.BlockThreads); err != nil {
			return err
		}
		if cl.recvZC {
			continue
		}
		for q := range n {
			dst := rs.recv + cuda.DevicePtr((q*cl.count+i)*cl.esize)
			if err := c.copyOut(rs, dst, b+cuda.DevicePtr(q*m*cl.esize), m*cl.esize); err != nil {
				return err
			}
		}
	}
	return nil
}

// reduceAlgo is the algorithm of a reduce of n bytes (every chunk of it)
// above the LL limit, its send a team buffer (zc) or copied in: two-shot
// above the one-shot limit in the unicast flavor, where the root would
// otherwise load nranks-1 times the data over its links, but one-shot
// again from the pull limit (WithReducePullMin; at 2 ranks the root's
// link then carries load responses alone) where the send is a team
// buffer (a send copied in goes in chunks of the staging size, 2 MiB by
// default, where the pull was no faster: docs/perf.md run 117); one-shot
// always in the multicast flavor, where the root's multimem.ld_reduce
// brings it the reduced data once, as two-shot's stores from every rank
// would.
func (c *Comm) reduceAlgo(n uint64, zc bool) kernels.Algo {
	if c.flavor == kernels.Multicast || (zc && c.cfg.pullMin != 0 && n >= c.cfg.pullMin) {
		return kernels.OneShot
	}
	return c.chunkAlgo(n)
}

// llTwo reports whether a reduce of n bytes runs LL in two steps
// (kabi.FlagLLTwo): unicast, above the LL limit, up to WithLLTwoMax, and
// held by the LL limit's lines: each rank's slot takes 2 ceil(lines /
// nranks) lines, so n / 2 times the LL limit at most (never in a team of
// 2). The area's extra lines for the broadcast do not stretch it (run 85
// measured it to 256 KiB). 4 x H100, docs/perf.md run 85.
func (c *Comm) llTwo(n uint64) bool {
	if c.flavor != kernels.Unicast || c.llMax == 0 || n <= c.llMax || n > c.cfg.llTwoMax {
		return false
	}
	lines := linesOf(n)
	return 2*(lines/uint64(c.size)+b2u64(lines%uint64(c.size) != 0)) <= linesOf(c.llMax)
}

// llTwoBcast reports whether a broadcast of n bytes runs LL in two steps
// (kabi.FlagLLTwo with kabi.FlagLL): unicast, three ranks or more, above
// the LL limit, up to WithLLTwoBcastMax, for which the LL area is sized:
// each slot takes one line and a slice of ceil(lines / (nranks - 1))
// lines. The root's links then carry the lines once, not nranks - 1
// times (nvls.h: ll_broadcast).
func (c *Comm) llTwoBcast(n uint64) bool {
	if c.flavor != kernels.Unicast || c.size < 3 || c.llMax == 0 || n <= c.llMax || n > c.cfg.llTwoBcastMax {
		return false
	}
	return llTwoBcastLines(n, c.size) <= c.llLines
}

// rootSlice reports whether the two-shot reduce's root reduces a slice
// too (kabi.FlagRootSlice): in a team of 2, where the root's link then
// carries half the sum as stores and half the peer's send as loads, as
// the two-shot all-reduce's does (347 GB/s at 512 MiB on 2 x H200, run
// 40), instead of the whole sum as stores and its whole send as the
// peer's loads (326, run 46). With more ranks the root's own slice would
// add nranks-1 loads of it over the root's links, unless ranks share a
// device, where there are no links to spare and every rank's share of
// the GPU's memory bandwidth counts.
func (c *Comm) rootSlice() bool {
	return c.size == 2 || c.sharedDevs
}

// reduceRank enqueues a reduce on one rank: LL up to llMax; otherwise one
// launch on a symmetric send, straight into the root's recv (one-shot: the
// root writes it, FlagAbsRecv; two-shot: every rank stores its slice there
// when planReduceRecv found it in the root's workspace), with the
// all-reduce's grid. The rest goes in chunks: send copied into A where it
// is not symmetric (chunks of the staging size), and, two-shot into a
// root recv that is not a team buffer, every rank's slice stored into the
// root's stage (B; A and B together, chunks of twice the staging size,
// where A holds no send), which the root copies out.
func (c *Comm) reduceRank(cl *call, rs *part) error {
	root := rs.local == cl.rootLocal
	k := kernels.Kernel{Coll: kernels.CollReduce, Algo: c.reduceAlgo(cl.bytes, cl.sendZC), DType: cl.dt, Op: cl.op}
	if cl.bytes <= c.llMax || c.llTwo(cl.bytes) {
		return c.launchLL(cl, rs, k, rs.recv)
	}
	if c.ceReduce(cl) {
		return c.ceReduceRank(cl, rs)
	}
	if c.pushReduce(cl) {
		return c.pushReduceRank(cl, rs)
	}
	staged := k.Algo == kernels.TwoShot && !cl.recvZC
	step, stage := cl.count, c.stageA+c.stageBytes
	switch {
	case !cl.sendZC:
		step = c.stageBytes / cl.esize
	case staged:
		step, stage = 2*c.stageBytes/cl.esize, c.stageA
	}
	a := cuda.DevicePtr(rs.own + c.stageA)
	b := cuda.DevicePtr(rs.own + stage)
	for i := uint64(0); i < cl.count; i += step {
		m := min(step, cl.count-i)
		off, nb := i*cl.esize, m*cl.esize
		c.params(cl, rs, m)
		rs.p.Send = cl.sendOff + off
		if !cl.sendZC {
			rs.p.Send = c.stageA
			if err := c.copyIn(rs, a, rs.send+cuda.DevicePtr(off), nb); err != nil {
				return err
			}
		}
		switch {
		case k.Algo == kernels.OneShot && root:
			rs.p.Recv, rs.p.Flags = uint64(rs.recv)+off, kabi.FlagAbsRecv
		case k.Algo == kernels.OneShot:
			rs.p.Recv, rs.p.Flags = 0, kabi.FlagAbsRecv
		case staged:
			rs.p.Recv = stage
		default:
			rs.p.Recv = cl.recvOff + off
		}
		if k.Algo == kernels.TwoShot && c.rootSlice() {
			rs.p.Flags |= kabi.FlagRootSlice
		}
		if err := c.launchKernel(cl, rs, k, c.grid(k.Algo, nb), kabi.BlockThreads); err != nil {
			return err
		}
		if root && staged {
			if err := c.copyOut(rs, rs.recv+cuda.DevicePtr(off), b, nb); err != nil {
				return err
			}
		}
	}
	return nil
}

// pushReduce reports whether reduce call cl runs the ring (the two-shot
// kernel with kabi.FlagPush: each rank adds its piece to its
// predecessor's partial sum and stores it into its successor's FIFO, the
// root into its recv; reduce.cu): unicast, 2 ranks or more, the FIFO
// allocated (WithRingMin), 4- and 8-byte types (a 16-bit partial sum
// would be rounded at every hop), send and recv team buffers, and at
// least the ring's limit.
func (c *Comm) pushReduce(cl *call) bool {
	return c.ringHeld && cl.esize >= 4 && cl.bytes >= c.cfg.ringMin && cl.sendZC && cl.sendOff%kabi.VecBytes == 0 && cl.recvZC
}

// pushReduceGrid is the ring's grid: as many blocks as its FIFO holds
// slots for, at most maxGrid (at least one: resolve refuses a FIFO
// smaller than one block's slots where the ring is on).
func (c *Comm) pushReduceGrid() uint64 {
	perBlock := kabi.PushReduceBytes(1, kabi.BlockThreads) - kabi.PushFlagsBytes
	return min((c.ringBytes-kabi.PushFlagsBytes)/perBlock, c.maxGrid)
}

// pushReduceRank enqueues the ring on one rank: one launch on the
// symmetric buffers, its flags and FIFO in the ring's area.
func (c *Comm) pushReduceRank(cl *call, rs *part) error {
	k := kernels.Kernel{Coll: kernels.CollReduce, Algo: kernels.TwoShot, DType: cl.dt, Op: cl.op}
	c.params(cl, rs, cl.count)
	rs.p.Send, rs.p.Recv, rs.p.Stage, rs.p.Flags = cl.sendOff, cl.recvOff, c.ringOff, kabi.FlagPush
	return c.launchKernel(cl, rs, k, c.pushReduceGrid(), kabi.BlockThreads)
}
