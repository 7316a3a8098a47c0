package collectives

import (
	"context"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// barrierBlock is the barrier kernel's block size (one warp; the kernel
// takes any).
const barrierBlock = 32

// AllReduce reduces count elements of type dt with op over every rank's
// send and leaves the result in every rank's recv. send, recv and streams
// hold one entry per local rank (Team.NumLocal), in local rank order. It
// enqueues the work on the streams and returns (Sync waits for it);
// send[i] == recv[i] runs in place. count 0 launches nothing. Every rank
// of the team must call it with the same count, dt and op, in the same
// order relative to its other collectives.
func (c *Comm) AllReduce(ctx context.Context, send, recv []cuda.DevicePtr, count uint64, dt DType, op Op, streams []cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.getCall("AllReduce")
	defer c.putCall(cl)
	skip, err := c.prepareAllReduce(cl, send, recv, count, dt, op, streams)
	if err != nil || skip {
		return err
	}
	return c.run(ctx, cl)
}

// Broadcast copies count elements of type dt from rank root's send to
// every rank's recv. Only the root's send is read (other ranks may pass
// 0); send[i] == recv[i] on the root runs in place. count 0 launches
// nothing. Arguments as for AllReduce; root is a team rank.
func (c *Comm) Broadcast(ctx context.Context, send, recv []cuda.DevicePtr, count uint64, dt DType, root int, streams []cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.getCall("Broadcast")
	defer c.putCall(cl)
	skip, err := c.prepareBroadcast(cl, send, recv, count, dt, root, streams)
	if err != nil || skip {
		return err
	}
	return c.run(ctx, cl)
}

// Barrier enqueues a device-side barrier on every local rank's stream:
// work after it on a rank's stream starts only once every rank of the team
// has reached the barrier on its stream.
func (c *Comm) Barrier(ctx context.Context, streams []cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.getCall("Barrier")
	defer c.putCall(cl)
	if err := c.begin(cl, streams); err != nil {
		return err
	}
	cl.coll = kernels.CollBarrier
	return c.run(ctx, cl)
}

// run launches call cl on every local rank: from the calling goroutine, in
// rank order, where the team's local ranks run in one context and every
// stream is a created one (onCaller); otherwise in parallel on the
// workers. Where a pointer needs the driver's word, every rank's pointers
// are checked before any rank launches (the workers meet in checkAll;
// from the caller, all are checked in rank 0's turn), so that nothing is
// launched when one is wrong.
func (c *Comm) run(ctx context.Context, cl *call) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("collectives: %s: %w", cl.name, err)
	}
	var err error
	if c.onCaller(cl) {
		err = c.tl.RunHere((*hereJob)(cl))
	} else {
		err = c.t.Run((*launchJob)(cl))
	}
	if err == nil {
		return nil
	}
	if cl.checkFailed.Load() {
		return err // nothing was launched
	}
	// A rank that launched has arrived at a barrier that the failed rank
	// never will: the counters of the ranks no longer agree. Under MPI the
	// other processes may have launched.
	broken := c.size > c.nlocal
	for l := range cl.parts {
		broken = broken || cl.parts[l].launched
	}
	if broken {
		c.tl.Fail(err)
		return c.t.Err()
	}
	return err
}

// onCaller reports whether call cl launches (or Sync's cl waits) from the calling
// goroutine (teamlink.Team.RunHere, each rank's context current in turn):
// LaunchCaller, or LaunchAuto with a single local rank, and every stream
// a created one. A default stream stays with the workers, as in Sync: the
// per-thread one (2) is the launching thread's own. One thread launching
// every rank in turn costs less than waking the workers and waiting for
// each, and the launches into one context do not contend for its lock
// (docs/sync.md); with several contexts it switches contexts per rank
// and launches in series what the workers launch in parallel. Sync's wait
// uses the same rule where it needs a current context. By default only a
// single local rank launches from the caller: with 2 and 4 ranks sharing
// an H100 the workers' parallel launches were faster (run 13,
// docs/perf.md); one process driving several GPUs is not measured yet.
func (c *Comm) onCaller(cl *call) bool {
	if c.via == LaunchWorkers || (c.via == LaunchAuto && (c.nlocal > 1 || !c.oneCtx)) {
		return false
	}
	for l := range cl.parts {
		if cl.parts[l].stream <= perThreadStream {
			return false
		}
	}
	return true
}

// launchJob is a call as the job that launches it on the workers.
type launchJob call

func (j *launchJob) Run(l int) error { cl := (*call)(j); return cl.c.launchRank(cl, l) }

// hereJob is a call as the job that launches it from the calling
// goroutine (RunHere runs it for every local rank in turn): in rank 0's
// turn it first checks every rank's pointers that need the driver's word.
type hereJob call

func (j *hereJob) Run(l int) error {
	cl := (*call)(j)
	c := cl.c
	if l == 0 && cl.foreign {
		for k := range c.nlocal {
			if err := c.checkRank(cl, k); err != nil {
				cl.checkFailed.Store(true)
				return err
			}
		}
	}
	return c.launchOne(cl, l)
}

// launchRank enqueues call cl on local rank l's stream (on its worker),
// once every rank's pointers passed the driver's checks.
func (c *Comm) launchRank(cl *call, l int) error {
	if cl.foreign {
		if err := c.checkAll(cl, l); err != nil || cl.checkFailed.Load() {
			return err
		}
	}
	return c.launchOne(cl, l)
}

// launchOne enqueues call cl on local rank l's stream (its context
// current).
func (c *Comm) launchOne(cl *call, l int) error {
	rs := &cl.parts[l]
	if c.skip != nil && c.skip[l] {
		return nil
	}
	var err error
	if c.size == 1 {
		err = c.oneRank(cl, rs)
	} else {
		err = c.launchColl(cl, rs)
	}
	if err != nil {
		return &launchError{name: cl.name, rank: rs.rank, dev: rs.dev, err: err}
	}
	return nil
}

// oneRank enqueues call cl of a team of one rank, as NCCL does
// for one rank: every collective is then the identity (a sum, min or max of
// one operand), so it is a copy of send to recv, or nothing in place, and a
// barrier is nothing. No kernel runs: on an H100 a kernel and its wait
// cost 1.5-1.7 times a 4-byte memset and its wait (docs/sync.md).
func (c *Comm) oneRank(cl *call, rs *part) error {
	if cl.coll == kernels.CollBarrier || rs.send == rs.recv {
		return nil
	}
	if err := c.d.MemcpyDtoDAsync(rs.recv, rs.send, cl.bytes, rs.stream); err != nil {
		return fmt.Errorf("copying send to recv (one rank): %w", err)
	}
	rs.launched, rs.inflight, rs.lastStream = true, true, rs.stream
	rs.launches++
	return nil
}

// launchColl launches call cl's kernels (and copies) on rank rs, with its
// collective's entry of rankFuncs.
func (c *Comm) launchColl(cl *call, rs *part) error {
	f := rankFuncs[cl.coll]
	if f == nil {
		return fmt.Errorf("collectives: internal error: no launch for %s", cl.coll.Desc().OpName)
	}
	return f(c, cl, rs)
}

// rankFuncs enqueue one rank's part of a call of each collective
// (kernels.Colls): its kernels and copies. A new collective's file may add
// its entry from an init function; TestEveryCollHasALaunch checks that
// every descriptor has one.
var rankFuncs = map[kernels.Coll]func(c *Comm, cl *call, rs *part) error{
	kernels.CollBarrier:       (*Comm).barrierRank,
	kernels.CollAllReduce:     (*Comm).allReduceRank,
	kernels.CollBroadcast:     (*Comm).broadcastRank,
	kernels.CollReduceScatter: (*Comm).reduceScatterRank,
	kernels.CollAllGather:     (*Comm).allGatherRank,
	kernels.CollReduce:        (*Comm).reduceRank,
}

// barrierRank enqueues a barrier on one rank: one block of one warp.
func (c *Comm) barrierRank(cl *call, rs *part) error {
	rs.p = rs.base
	return c.launchKernel(cl, rs, kernels.Kernel{Coll: kernels.CollBarrier}, 1, barrierBlock)
}

// checkAll checks local rank l's pointers with the driver, then waits
// until every local rank has checked its own (they run at the same time,
// one per worker), so that no rank launches when another's pointer is
// wrong.
func (c *Comm) checkAll(cl *call, l int) (err error) {
	defer func() {
		if err != nil {
			cl.checkFailed.Store(true)
		}
		cl.checked.Add(1)
		// The others are running their checks right now: yield rather
		// than sleep (a sleeping thread takes long to wake).
		for spin := 0; cl.checked.Load() < int32(c.nlocal); spin++ {
			if spin < 1<<14 {
				runtime.Gosched()
			} else {
				backoff(spin)
			}
		}
	}()
	return c.checkRank(cl, l)
}

// backoff: yield for a while, then sleep in growing steps up to 1 ms.
func backoff(spin int) {
	switch {
	case spin < 64:
		runtime.Gosched()
	case spin < 256:
		time.Sleep(10 * time.Microsecond)
	case spin < 1024:
		time.Sleep(100 * time.Microsecond)
	default:
		time.Sleep(time.Millisecond)
	}
}

// launchError is a driver call of the launch path that failed.
type launchError struct {
	name string
	rank int
	dev  cuda.Device
	err  error
}

func (e *launchError) Error() string {
	return fmt.Sprintf("collectives: %s: rank %d (device %d): %v", e.name, e.rank, e.dev, e.err)
}

func (e *launchError) Unwrap() error { return e.err }

// params starts rank rs's params for a launch of call cl over count of
// its elements (and its root, for the rooted collectives).
func (c *Comm) params(cl *call, rs *part, count uint64) {
	rs.p = rs.base
	rs.p.Count, rs.p.ElemBytes = count, uint32(cl.esize)
	if cl.coll.Desc().Rooted {
		rs.p.Root = uint32(cl.root)
	}
}

// launchLL launches the LL kernel of k's family on the call's pointers
// themselves (FlagAbsPtrs: wherever they are on the rank's device, no
// staging copy): send, and recv (0 for a rank that writes none). The
// broadcast's LL kernel is its one entry with kabi.FlagLL; a rank other
// than the root passes its recv as send (it reads none).
func (c *Comm) launchLL(cl *call, rs *part, k kernels.Kernel, recv cuda.DevicePtr) error {
	c.params(cl, rs, cl.count)
	rs.p.Send, rs.p.Recv = uint64(rs.send), uint64(recv)
	rs.p.LLArea, rs.p.LLLines = c.llOff, uint32(c.llLines)
	rs.p.Flags = kabi.FlagAbsPtrs
	shape := cl.bytes
	if k.Coll == kernels.CollBroadcast {
		rs.p.Flags |= kabi.FlagLL
		if rs.rank != cl.root {
			rs.p.Send = uint64(recv)
		}
		if cl.bytes > c.llMax {
			// broadcastRank's choice (llTwoBcast): a thread a line of
			// a slice.
			rs.p.Flags |= kabi.FlagLLTwo
			shape = (cl.bytes + uint64(c.size) - 2) / uint64(c.size-1)
		}
	}
	if k.Coll == kernels.CollReduce && cl.bytes > c.llMax {
		// reduceRank's choice (llTwo): a thread a line of a slice, as
		// the reduce-scatter's shape.
		rs.p.Flags |= kabi.FlagLLTwo
		shape = (cl.bytes + uint64(c.size) - 1) / uint64(c.size)
	}
	grid, block := c.llShape(shape)
	k.Algo = kernels.LL
	return c.launchKernel(cl, rs, k, grid, block)
}

// launchKernel launches kernel k with rs.p on rank rs's stream, the
// opcode set from k's family and the argument check from call cl.
func (c *Comm) launchKernel(cl *call, rs *part, k kernels.Kernel, grid uint64, block uint32) error {
	return c.launchKernelOn(cl, rs, k, grid, block, rs.stream)
}

// launchKernelOn is launchKernel on stream s: the call's stream or its side
// stream (rs.side), which the call joins back into its stream before it
// ends, so that the call's stream stays the one to wait for.
func (c *Comm) launchKernelOn(cl *call, rs *part, k kernels.Kernel, grid uint64, block uint32, s cuda.Stream) error {
	fn, ok := rs.mod.Func(k)
	if !ok && rs.ucMod != nil {
		// What multimem cannot reduce runs the unicast flavor over the UC
		// aliases; MC 0 is that flavor's params (start logs it).
		if fn, ok = rs.ucMod.Func(k); ok {
			rs.p.MC = 0
		}
	}
	if !ok {
		return fmt.Errorf("no %s kernel loaded for %v", k.Name(), c.flavor)
	}
	rs.p.Opcode = k.Coll.Opcode()
	rs.p.Check, rs.p.CallCount = cl.check(), cl.count
	if c.pdl == PDLEarly {
		rs.p.Flags |= kabi.FlagLaunchDependents
	}
	cfg := cuda.LaunchConfig{Grid: cuda.D1(uint32(grid)), Block: cuda.D1(block), Stream: s, Programmatic: c.pdl != PDLOff}
	if err := c.launch(fn, cfg, unsafe.Pointer(&rs.p)); err != nil {
		return err
	}
	rs.launched, rs.inflight, rs.lastStream = true, true, rs.stream
	rs.launches++
	return nil
}

// launch launches kernel fn with params p: cuLaunchKernelEx, or
// cuLaunchKernel where the driver predates it (cfg is then never
// programmatic: decidePDL).
func (c *Comm) launch(fn cuda.Function, cfg cuda.LaunchConfig, p unsafe.Pointer) error {
	if c.plainLaunch {
		return c.d.LaunchKernel(fn, cfg.Grid, cfg.Block, cfg.SharedMem, cfg.Stream, p, kabi.ParamsSize)
	}
	return c.d.LaunchKernelEx(fn, cfg, p, kabi.ParamsSize)
}

// algo is the all-reduce algorithm for a call (or, for one-shot and
// two-shot, a chunk) of n bytes: LL up to llMax, then one-shot up to
// oneShotMax, then two-shot.
func (c *Comm) algo(n uint64) kernels.Algo {
	if n <= c.llMax {
		return kernels.LL
	}
	return c.chunkAlgo(n)
}

// chunkAlgo is algo without LL: the algorithm of each chunk of a staged
// call larger than llMax.
func (c *Comm) chunkAlgo(n uint64) kernels.Algo {
	if n <= c.cfg.oneShotMax {
		return kernels.OneShot
	}
	return kernels.TwoShot
}

// grid is the grid of a launch over n bytes: enough blocks for each thread
// to handle vecsPerThread 16-byte vectors of its rank's share (all of it
// one-shot, 1/nranks two-shot), from 1 to maxGrid. It depends only on n,
// the algorithm, the team size and the configuration, so every rank
// computes the same.
func (c *Comm) grid(algo kernels.Algo, n uint64) uint64 {
	if algo == kernels.TwoShot {
		return c.shareGrid(n, uint64(c.size))
	}
	return c.blocksFor(n/kabi.VecBytes + 1)
}

// shareGrid is grid for n bytes cut into parts slices, one a rank: the
// sliced broadcast's nranks-1, two-shot's nranks.
func (c *Comm) shareGrid(n, parts uint64) uint64 {
	return c.blocksFor((n/kabi.VecBytes+1)/parts + 1)
}

// blocksFor is the grid for vecs vectors a rank: one vector a thread up to
// minGrid blocks, then vecs / blockVecs blocks, rounded up; from 1 to
// maxGrid.
func (c *Comm) blocksFor(vecs uint64) uint64 {
	spread := min((vecs+kabi.BlockThreads-1)/kabi.BlockThreads, c.minGrid)
	return min(max((vecs+c.blockVecs-1)/c.blockVecs, spread, 1), c.maxGrid)
}

// llShape is the grid and block of an LL launch of n bytes: one 16-byte
// line (8 payload bytes) per thread, blocks of up to llBlockThreads
// threads (fewer, a multiple of a warp, for tiny payloads; more, up to
// kabi.BlockThreads, where maxGrid blocks of llBlockThreads would not
// hold every line), at most maxGrid blocks (the threads then loop over
// the lines). It depends only on n and the configuration, so every rank
// computes the same.
func (c *Comm) llShape(n uint64) (grid uint64, block uint32) {
	lines := max((n+kabi.LLLinePayload-1)/kabi.LLLinePayload, 1)
	b := min((lines+31)/32*32, llBlockThreads)
	if lines > c.maxGrid*b {
		// More lines than maxGrid blocks of b threads hold: blocks as
		// large as one line a thread needs, up to the kernels' 512
		// threads, rather than threads that loop (run 70: a 2-rank 512
		// KiB reduce of 65,536 lines took 7.1 us where 256 KiB in one
		// round took 4.4).
		b = min(((lines+c.maxGrid-1)/c.maxGrid+31)/32*32, kabi.BlockThreads)
	}
	return min((lines+b-1)/b, c.maxGrid), uint32(b)
}

// llBlockThreads is the largest LL block: 256 threads, so that an 8 KiB
// all-reduce (1,024 lines) runs 4 blocks rather than 2 of 512. On 4 x H200
// (run 61, -n 200) that took it from 4.25 to 3.90 us and the 32 KiB
// all-gather from 4.33 to 3.98; 128 threads lost at 8 KiB (4.02).
const llBlockThreads = 256

// allReduceRank enqueues an all-reduce on one rank: LL up to llMax (one
// launch on the pointers themselves, wherever they are on the rank's
// device); otherwise one launch on symmetric buffers, or in chunks of the
// staging size through the staging areas (copy in to A, reduce into B,
// copy out), or when an in-place one-shot needs A as its stage. Chunks
// are counted in elements, as the call is; bytes only size the copies.
func (c *Comm) allReduceRank(cl *call, rs *part) error {
	k := kernels.Kernel{Coll: kernels.CollAllReduce, DType: cl.dt, Op: cl.op}
	if cl.bytes <= c.llMax {
		return c.launchLL(cl, rs, k, rs.recv)
	}
	if c.ceAllReduce(cl) {
		return c.ceAllReduceRank(cl, rs)
	}
	step := cl.count
	if cl.chunked {
		step = c.stageBytes / cl.esize
	}
	a := cuda.DevicePtr(rs.own + c.stageA)
	b := cuda.DevicePtr(rs.own + c.stageA + c.stageBytes)
	for i := uint64(0); i < cl.count; i += step {
		n := min(step, cl.count-i)
		off, nb := i*cl.esize, n*cl.esize
		k.Algo = c.chunkAlgo(nb)
		c.params(cl, rs, n)
		if cl.sendZC {
			rs.p.Send = cl.sendOff + off
		} else {
			rs.p.Send = c.stageA
			if err := c.copyIn(rs, a, rs.send+cuda.DevicePtr(off), nb); err != nil {
				return err
			}
		}
		if cl.recvZC {
			rs.p.Recv = cl.recvOff + off
		} else {
			rs.p.Recv = c.stageA + c.stageBytes
		}
		if cl.inPlace && k.Algo == kernels.OneShot {
			rs.p.Stage = c.stageA
		}
		if k.Algo == kernels.TwoShot && c.sharedDevs {
			// One GPU's memory, not a link, is the limit: the two-pass
			// two-shot's reread cost 91 -> 68% of the copy roofline on
			// 1 x H100 with 2 ranks (docs/perf.md run 57).
			rs.p.Flags |= kabi.FlagOnePass
		}
		if err := c.launchKernel(cl, rs, k, c.grid(k.Algo, nb), kabi.BlockThreads); err != nil {
			return err
		}
		if !cl.recvZC {
			if err := c.copyOut(rs, rs.recv+cuda.DevicePtr(off), b, nb); err != nil {
				return err
			}
		}
	}
	return nil
}

// broadcastRank enqueues a broadcast on one rank: LL up to llMax (one
// launch on the pointers themselves, kabi.FlagLL), and in two LL steps
// above it where llTwoBcast says so. Otherwise, with symmetric
// recv buffers it is one launch; a root whose send is not symmetric first copies
// it into its own recv and broadcasts in place. Otherwise it goes in chunks
// of the staging size (counted in elements): the root's send (copied into
// A where needed) to every rank's B, then copied out. Sliced (unicast:
// slicedBroadcast) the kernel of each rank but the root copies one of
// nranks-1 slices of the root's data, from where the root has it.
func (c *Comm) broadcastRank(cl *call, rs *part) error {
	root := rs.local == cl.rootLocal
	k := kernels.Kernel{Coll: kernels.CollBroadcast}
	if cl.bytes <= c.llMax || c.llTwoBcast(cl.bytes) {
		return c.launchLL(cl, rs, k, rs.recv)
	}
	sliced := c.slicedBroadcast()
	// grid: the root copies it all, each of the other ranks its slice, or
	// (push) a block a piece of a slice, pushGrid.
	grid := func(n uint64) uint64 {
		switch {
		case c.pushBroadcast(n):
			return c.pushGrid(n)
		case sliced:
			return c.shareGrid(n, c.broadcastSlices())
		}
		return c.grid(kernels.OneShot, n)
	}
	// params sets the launch's params; rootSend is where the root's data
	// is (sliced, the root's kernel tells the others).
	params := func(n, recv, rootSend uint64) {
		c.params(cl, rs, n)
		rs.p.Recv, rs.p.Send = recv, recv
		if root {
			rs.p.Send = rootSend
		}
		switch {
		case c.pushBroadcast(n * cl.esize):
			rs.p.Flags |= kabi.FlagPush
		case sliced && c.sharedDevs:
			rs.p.Flags |= kabi.FlagSliced | kabi.FlagRootSlice
		case sliced:
			rs.p.Flags |= kabi.FlagSliced
		}
	}
	if c.ceCall(cl, cl.bytes) {
		if !root {
			return c.ceRank(cl, rs, 0, 0, 0, 0)
		}
		return c.ceRank(cl, rs, rs.send, cl.bytes, cl.recvOff, rs.recv)
	}
	if !cl.chunked {
		rootSend := cl.recvOff // the root copies its send there first
		if cl.sendZC {
			rootSend = cl.sendOff
		} else if root && rs.send != rs.recv {
			if err := c.d.MemcpyDtoDAsync(rs.recv, rs.send, cl.bytes, rs.stream); err != nil {
				return fmt.Errorf("copying the root's send into its recv: %w", err)
			}
		}
		params(cl.count, cl.recvOff, rootSend)
		return c.launchKernel(cl, rs, k, grid(cl.bytes), kabi.BlockThreads)
	}
	a := cuda.DevicePtr(rs.own + c.stageA)
	b := cuda.DevicePtr(rs.own + c.stageA + c.stageBytes)
	step := c.stageBytes / cl.esize
	for i := uint64(0); i < cl.count; i += step {
		n := min(step, cl.count-i)
		off, nb := i*cl.esize, n*cl.esize
		rootSend := c.stageA // the root copies its chunk there first
		if cl.sendZC {
			rootSend = cl.sendOff + off
		} else if root {
			if err := c.copyIn(rs, a, rs.send+cuda.DevicePtr(off), nb); err != nil {
				return err
			}
		}
		params(n, c.stageA+c.stageBytes, rootSend)
		if err := c.launchKernel(cl, rs, k, grid(nb), kabi.BlockThreads); err != nil {
			return err
		}
		if err := c.copyOut(rs, rs.recv+cuda.DevicePtr(off), b, nb); err != nil {
			return err
		}
	}
	return nil
}

// slicedBroadcast reports whether the broadcast kernels run sliced
// (kabi.FlagSliced: each rank but the root copies its slice of the
// root's send, instead of the root copying it all): on the unicast
// transport with more than two ranks, in one process and under MPI alike
// (the root's kernel tells the others where its send is). With two, the
// root stores it all to the other rank: one direction of the link
// carries stores alone, which run faster than the one slice's loads and
// stores (2 x H200, docs/perf.md run 33: stores 360 GB/s a direction,
// loads 330). Where ranks share a device the 2-rank broadcast runs
// sliced too, with the root's slice (broadcastSlices).
func (c *Comm) slicedBroadcast() bool {
	return c.flavor == kernels.Unicast && (c.size > 2 || c.size == 2 && c.sharedDevs)
}

// broadcastSlices is how many slices the sliced broadcast cuts the
// root's data into: nranks-1, the root copying none, so that its link
// carries the data once each way; where ranks share a device, nranks
// (kabi.FlagRootSlice), the root copying one: one GPU's memory, not its
// links, is then the limit, and on 1 x H100 the nranks slices reached
// 84-89% of the copy roofline where nranks-1 reached 64-75% (docs/perf.md
// run 57).
func (c *Comm) broadcastSlices() uint64 {
	if c.sharedDevs {
		return uint64(c.size)
	}
	return uint64(c.size - 1)
}

// pushBroadcast reports whether a broadcast launch of n bytes pushes
// (kabi.FlagPush: the sliced broadcast's slices moved by stores alone,
// the root storing each slice into its owner's recv in flagged pieces,
// each owner storing its slice on to the others): on the unicast
// transport with more than two ranks, from c.pushMin bytes, unless local
// ranks share a device (team.WithSharedDevices), where the push's
// per-piece fences and flag waits ran at 48.6% of the copy roofline and
// the sliced broadcast at 73.7% (4 ranks on 1 x H100, 256 MiB,
// docs/perf.md run 56).
func (c *Comm) pushBroadcast(n uint64) bool {
	return c.flavor == kernels.Unicast && c.size > 2 && n >= c.pushMin && !c.sharedDevs
}

// defaultPushMin is the smallest broadcast that pushes. On 4 GPUs (docs/perf.md
// runs 48-49) the push ran 6-10% faster than the sliced broadcast from
// 256 MiB to 1 GiB, 3% slower at 128 MiB, and 8-30% slower from 128 KiB
// to 32 MiB, where a block a 32 KiB piece gives fewer blocks than the
// sliced kernel's grid.
const defaultPushMin = 256 << 20

// pushGrid is the push broadcast's grid for n bytes: a block a piece
// (BlockThreads x PushVecs vectors) of the largest slice, from 1 to
// maxGrid; the min grid does not apply, as a piece is the unit a block
// flags.
func (c *Comm) pushGrid(n uint64) uint64 {
	slices := uint64(c.size - 1)
	vecs := n/kabi.VecBytes/slices + n/kabi.VecBytes%slices
	piece := uint64(kabi.BlockThreads * kabi.PushVecs)
	return min(max((vecs+piece-1)/piece, 1), c.maxGrid)
}
