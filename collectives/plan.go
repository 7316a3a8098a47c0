package collectives

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// The checks and the plan of a call, before anything is launched. Nothing
// here allocates unless it returns an error.

// begin checks what every call checks: the Comm is open, the team is not
// broken, and the streams (checkStreams); it gives each of cl's parts its
// stream.
func (c *Comm) begin(cl *call, streams []cuda.Stream) error {
	name := cl.name
	if c.closed {
		return ErrClosed
	}
	if c.t.Closed() {
		return fmt.Errorf("collectives: %s: the Comm's team is closed (close a Comm before its team): %w", name, team.ErrClosed)
	}
	if err := c.t.Err(); err != nil {
		return err
	}
	if err := c.checkStreams(name, streams); err != nil {
		return err
	}
	for l := range cl.parts {
		cl.parts[l].stream = streams[l]
	}
	return nil
}

// checkStreams checks the streams of a call: one per local rank, no stream
// given for two ranks, and each of its rank's context (so of its device),
// before anything is launched.
//
// 0, 1 and 2 are the legacy and per-thread default streams (CU_STREAM_LEGACY
// and CU_STREAM_PER_THREAD are 1 and 2): each means the default stream of
// the context current on the thread that uses it. They are not asked about
// here (on the caller's thread, whose current context is anybody's) and
// need not be: with a default stream the launches, copies and queries run
// on each rank's worker (never from the caller: onCaller), with the
// rank's context current, so there they are the rank's own
// device's default stream, and they may repeat across ranks.
//
// Asking the driver (cuStreamGetCtx) costs a call per rank, so each rank
// remembers the last stream that passed (rankState.streamOK) and only a
// changed handle is asked again: the launch path of a caller that keeps
// its streams makes no driver call for this. That is safe enough: a handle
// that passed stays of that context for as long as the stream lives; only a
// stream destroyed and another created with the same handle value in
// another context would slip through, and the driver itself refuses a
// kernel launch on a stream that is not of the current context (the sim:
// CUDA_ERROR_INVALID_HANDLE), so nothing collective runs on the wrong
// device then either: the call fails at its launch instead of here (at
// worst after a staging copy, which writes only the rank's own staging
// area, was enqueued on that stream), as every call did before this check.
func (c *Comm) checkStreams(name string, streams []cuda.Stream) error {
	if len(streams) != c.nlocal {
		return argErr(name, "streams", -1, "%d streams for %d local ranks (one per local rank)", len(streams), c.nlocal)
	}
	for l, s := range streams {
		if s <= 2 && c.sharedDevs {
			// The legacy default stream waits for, and is waited for by,
			// every blocking stream of its context: on a device that
			// several local ranks share, the ranks' kernels would run
			// one after the other while each spins for the other. The
			// per-thread one (2) is one stream per host thread, which
			// only holds while each rank's worker keeps its own thread:
			// not relied upon.
			rs := c.ranks[l]
			for _, o := range c.ranks {
				if o != rs && o.dev == rs.dev {
					return argErr(name, argName("streams", rs), rs.rank, "a default stream (%d) on device %d, which ranks %d and %d share: their kernels would wait for each other there; give each rank a stream of its own (cuStreamCreate, CU_STREAM_NON_BLOCKING)", uint64(s), rs.dev, rs.rank, o.rank)
				}
			}
		}
		if s <= 2 {
			continue
		}
		for k := range l {
			if streams[k] == s {
				return argErr(name, "streams", c.ranks[l].rank, "stream %#x is also given for rank %d: a stream belongs to one device", uint64(s), c.ranks[k].rank)
			}
		}
		rs := c.ranks[l]
		if s == rs.streamOK {
			continue
		}
		ctx, err := c.d.StreamGetCtx(s)
		if err != nil {
			return &ArgError{Op: name, Arg: argName("streams", rs), Rank: rs.rank,
				Msg: fmt.Sprintf("stream %#x: cannot tell which context it belongs to (destroyed, or not a stream?)", uint64(s)), Err: err}
		}
		if ctx != rs.ctx {
			return c.wrongStream(name, rs, s, ctx)
		}
		rs.streamOK = s
	}
	return nil
}

// wrongStream is the error for stream s, of context ctx, given for rank rs
// (the error path only: it allocates).
func (c *Comm) wrongStream(name string, rs *rankState, s cuda.Stream, ctx cuda.Context) error {
	want := fmt.Sprintf("rank %d runs on device %d (context %#x)", rs.rank, rs.dev, uint64(rs.ctx))
	for _, o := range c.ranks {
		if o.ctx == ctx {
			return argErr(name, argName("streams", rs), rs.rank, "stream %#x belongs to device %d (context %#x, rank %d's); %s", uint64(s), o.dev, uint64(ctx), o.rank, want)
		}
	}
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	for _, oc := range registry.comms {
		for _, o := range oc.ranks {
			if o.ctx == ctx {
				return argErr(name, argName("streams", rs), rs.rank, "stream %#x belongs to device %d (context %#x); %s", uint64(s), o.dev, uint64(ctx), want)
			}
		}
	}
	return argErr(name, argName("streams", rs), rs.rank, "stream %#x belongs to context %#x, not the context of any device this process's teams run on; %s", uint64(s), uint64(ctx), want)
}

// classify checks pointer p of n bytes passed for local rank rs: inside
// the rank's own workspace data area (in, at workspace offset off; 16-byte
// aligned unless ownOnly: an operand only its own rank touches, which the
// kernels take as an address), or nowhere the team or another Comm's team
// maps (chk: the driver must check it). Anything else is an error.
func (c *Comm) classify(cl *call, arg string, rs *rankState, p cuda.DevicePtr, n uint64, ownOnly bool) (in bool, off uint64, chk bool, err error) {
	name := cl.name
	a := uint64(p)
	if a == 0 {
		return false, 0, false, &ArgError{Op: name, Arg: argName(arg, rs), Rank: rs.rank, Msg: "nil pointer"}
	}
	lay, ws := c.lay, c.lay.Size()
	if a >= rs.own && a-rs.own < ws {
		off = a - rs.own
		start, end := lay.DataStart(), lay.DataEnd()
		switch where := lay.Where(off); {
		case where == kabi.InSignal:
			return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%#x points into the team workspace's signal area (offset %d; the data area starts at %d)", a, off, start)
		case where != kabi.InData:
			return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%#x is in the team workspace's padding, past the data area (offset %d, data area [%d, %d))", a, off, start, end)
		case n > end-off:
			return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%d bytes at workspace offset %d run past the team's data area [%d, %d) by %d bytes", n, off, start, end, n-(end-off))
		case cl.esize != 0 && a%cl.esize != 0:
			return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%#x (data offset %d) is not aligned to its %d-byte elements", a, off-start, cl.esize)
		case off < c.stageA+2*c.stageBytes && c.stageA < off+n:
			return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%d bytes at data offset %d overlap the collectives' own staging area [%d, +%d)", n, off-start, c.stageA-start, 2*c.stageBytes)
		case c.llBytes != 0 && off < c.llOff+c.llBytes && c.llOff < off+n:
			return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%d bytes at data offset %d overlap the collectives' own LL area [%d, +%d)", n, off-start, c.llOff-start, c.llBytes)
		}
		if _, _, ok := c.tl.BufferAt(off-start, n); !ok {
			return false, 0, false, c.outsideBuffer(name, arg, rs, off-start, n)
		}
		if off%kabi.VecBytes != 0 && !ownOnly {
			// The kernels access a team buffer in 16-byte vectors: a
			// pointer off that grid runs staged, as memory of the rank's
			// device outside the workspace does (no driver check needed:
			// it is the rank's own workspace).
			return false, 0, false, nil
		}
		return true, off, false, nil
	}
	for q := range c.size {
		if q != rs.rank && a >= rs.peer[q] && a-rs.peer[q] < ws {
			return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%#x is rank %d's workspace as device %d maps it (a peer mapping): pass rank %d's own pointer", a, q, rs.dev, rs.rank)
		}
	}
	if rs.mc != 0 && a >= rs.mc && a-rs.mc < ws {
		return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%#x is the team's multicast alias (multimem instructions only)", a)
	}
	if c.otherTeam(a) {
		return false, 0, false, argErr(name, argName(arg, rs), rs.rank, "%#x belongs to another team's workspace", a)
	}
	return false, 0, true, nil
}

// outsideBuffer is the error for n bytes at data offset off of rank rs's
// workspace that no live buffer of the team's Alloc holds whole: they run
// past the end of the buffer they start in (naming its bounds), or start
// in none (freed, or never allocated). Writing there would overwrite
// whatever lies next in the data area (another buffer), so it is refused
// like any other bad pointer (the error path only: it allocates).
func (c *Comm) outsideBuffer(name, arg string, rs *rankState, off, n uint64) error {
	if bOff, bSize, ok := c.tl.BufferAt(off, 1); ok {
		end := bOff + bSize
		base := rs.own + c.lay.DataStart()
		return argErr(name, argName(arg, rs), rs.rank, "%d bytes at data offset %d run past the end of their team buffer [%d, %d) (%d bytes from Alloc; on this rank [%#x, %#x)) by %d bytes", n, off, bOff, end, bSize, base+bOff, base+end, n-(end-off))
	}
	return argErr(name, argName(arg, rs), rs.rank, "%d bytes at data offset %d are in the team's workspace but in no live buffer of its Alloc (freed, or never allocated): pass a pointer of a live team.Buffer", n, off)
}

// argName is "send[2]": the argument and the local index (the error path
// only, it allocates).
func argName(arg string, rs *rankState) string {
	return arg + "[" + strconv.Itoa(rs.local) + "]"
}

// overlap reports whether [a, a+n) and [b, b+n) overlap without being the
// same range.
func overlap(a, b cuda.DevicePtr, n uint64) bool {
	if a == b {
		return false
	}
	x, y := uint64(a), uint64(b)
	return x < y+n && y < x+n && y+n >= y && x+n >= x
}

// checkBytes returns count*size, or an error when it overflows.
func checkBytes(name string, count uint64, size uint64) (uint64, error) {
	if count > math.MaxUint64/size {
		return 0, argErr(name, "count", -1, "%d elements of %d bytes overflow 64 bits", count, size)
	}
	return count * size, nil
}

// start checks what every call with buffers checks before its count:
// begin, a send and a recv pointer per local rank, and the element type
// (with the operator, when reduces: one the flavor has kernels for).
func (c *Comm) start(cl *call, send, recv []cuda.DevicePtr, streams []cuda.Stream, dt DType, op Op, reduces bool) error {
	name := cl.name
	if err := c.begin(cl, streams); err != nil {
		return err
	}
	if len(send) != c.nlocal || len(recv) != c.nlocal {
		return argErr(name, "send/recv", -1, "%d send and %d recv pointers for %d local ranks (one each per local rank)", len(send), len(recv), c.nlocal)
	}
	if reduces {
		// Every valid type and operator runs: the unicast flavor has them
		// all, and a multicast Comm runs it where multimem cannot.
		if err := kernels.CheckSupported(kernels.Unicast, dt, op); err != nil {
			return &ArgError{Op: name, Arg: "dtype/op", Rank: -1, Err: err}
		}
		if log := c.t.Logger(); !Supported(c.flavor, dt, op) && log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("collectives: multimem cannot reduce this type with this operator: the unicast kernel runs over the UC aliases",
				"op", name, "dtype", dt.String(), "redop", op.String())
		}
	}
	if !dt.Valid() {
		return argErr(name, "dtype", -1, "invalid element type %v (want one of %s)", dt, dtypeNames)
	}
	return nil
}

// dtypeNames lists the element types' names, for errors: "f32, f16, ...".
var dtypeNames = func() string {
	names := make([]string, len(DTypes))
	for i, dt := range DTypes {
		names[i] = dt.String()
	}
	return strings.Join(names, ", ")
}()

// checkRoot checks a root rank.
func (c *Comm) checkRoot(name string, root int) error {
	if root < 0 || root >= c.size {
		return argErr(name, "root", -1, "%d is out of range: the team has ranks 0 to %d", root, c.size-1)
	}
	return nil
}

// plan plans cl as a call of coll over count elements of dt whose send
// and recv are sendN and recvN times count elements on each rank (checked
// for overflow), zero-copy until a pointer says otherwise.
func (c *Comm) plan(cl *call, coll kernels.Coll, count uint64, dt DType, op Op, sendN, recvN uint64) error {
	name := cl.name
	esize := uint64(dt.Size())
	bytes, err := checkBytes(name, count, esize)
	if err != nil {
		return err
	}
	sb, err := checkBytes(name, bytes, sendN)
	if err != nil {
		return err
	}
	rb, err := checkBytes(name, bytes, recvN)
	if err != nil {
		return err
	}
	cl.coll, cl.dt, cl.op, cl.count, cl.esize, cl.bytes = coll, dt, op, count, esize, bytes
	cl.sendBytes, cl.recvBytes, cl.sendZC, cl.recvZC = sb, rb, true, true
	return nil
}

// prepareAllReduce checks an all-reduce and plans it into cl (from
// getCall("AllReduce")). skip is true when there is nothing to launch
// (count 0).
func (c *Comm) prepareAllReduce(cl *call, send, recv []cuda.DevicePtr, count uint64, dt DType, op Op, streams []cuda.Stream) (skip bool, err error) {
	name := cl.name
	if err := c.start(cl, send, recv, streams, dt, op, true); err != nil || count == 0 {
		return err == nil, err
	}
	if err := c.plan(cl, kernels.CollAllReduce, count, dt, op, 1, 1); err != nil {
		return false, err
	}
	bytes := cl.bytes
	r0 := &cl.parts[0]
	for l := range cl.parts {
		rs := &cl.parts[l]
		rs.send, rs.recv = send[l], recv[l]
		if overlap(rs.send, rs.recv, bytes) {
			return false, argErr(name, argName("send", rs.rankState), rs.rank, "send %#x and recv %#x overlap without being the same buffer (%d bytes each)", uint64(rs.send), uint64(rs.recv), bytes)
		}
		if rs.sendIn, rs.sendOff, rs.sendChk, err = c.classify(cl, "send", rs.rankState, rs.send, bytes, false); err != nil {
			return false, err
		}
		if rs.recvIn, rs.recvOff, rs.recvChk, err = c.classify(cl, "recv", rs.rankState, rs.recv, bytes, false); err != nil {
			return false, err
		}
		cl.foreign = cl.foreign || rs.sendChk || rs.recvChk
		cl.sendZC = cl.sendZC && rs.sendIn && rs.sendOff == r0.sendOff
		cl.recvZC = cl.recvZC && rs.recvIn && rs.recvOff == r0.recvOff
	}
	cl.sendOff, cl.recvOff = r0.sendOff, r0.recvOff
	cl.inPlace = cl.sendZC && cl.recvZC && cl.sendOff == cl.recvOff
	cl.chunked = !cl.sendZC || !cl.recvZC || (cl.inPlace && bytes <= c.cfg.oneShotMax)
	return false, nil
}

// prepareBroadcast checks a broadcast and plans it into cl.
func (c *Comm) prepareBroadcast(cl *call, send, recv []cuda.DevicePtr, count uint64, dt DType, root int, streams []cuda.Stream) (skip bool, err error) {
	name := cl.name
	if err := c.start(cl, send, recv, streams, dt, 0, false); err != nil {
		return false, err
	}
	if err := c.checkRoot(name, root); err != nil || count == 0 {
		return err == nil, err
	}
	if err := c.plan(cl, kernels.CollBroadcast, count, dt, 0, 1, 1); err != nil {
		return false, err
	}
	bytes := cl.bytes
	cl.root, cl.sendZC = root, false
	for l := range cl.parts {
		rs := &cl.parts[l]
		rs.send, rs.recv = send[l], recv[l]
		if rs.rank == root {
			cl.rootLocal = l
			if overlap(rs.send, rs.recv, bytes) {
				return false, argErr(name, argName("send", rs.rankState), rs.rank, "send %#x and recv %#x overlap without being the same buffer (%d bytes each)", uint64(rs.send), uint64(rs.recv), bytes)
			}
			if rs.sendIn, rs.sendOff, rs.sendChk, err = c.classify(cl, "send", rs.rankState, rs.send, bytes, false); err != nil {
				return false, err
			}
		}
		if rs.recvIn, rs.recvOff, rs.recvChk, err = c.classify(cl, "recv", rs.rankState, rs.recv, bytes, false); err != nil {
			return false, err
		}
		cl.foreign = cl.foreign || rs.sendChk || rs.recvChk
		cl.recvZC = cl.recvZC && rs.recvIn && rs.recvOff == cl.parts[0].recvOff
	}
	cl.recvOff = cl.parts[0].recvOff
	if cl.rootLocal >= 0 {
		rs := &cl.parts[cl.rootLocal]
		cl.sendZC, cl.sendOff = rs.sendIn, rs.sendOff
	}
	cl.chunked = !cl.recvZC
	return false, nil
}

// checkRank runs on local rank l's worker (its context current) before
// anything of call cl is launched: the driver's word on pointers outside
// the team.
func (c *Comm) checkRank(cl *call, l int) error {
	rs := &cl.parts[l]
	if rs.sendChk {
		if err := c.checkForeign(cl.name, "send", rs.rankState, rs.send, cl.sendBytes); err != nil {
			return err
		}
	}
	if rs.recvChk {
		return c.checkForeign(cl.name, "recv", rs.rankState, rs.recv, cl.recvBytes)
	}
	return nil
}

// checkForeign checks that the n bytes at p are device memory of the
// rank's device, inside one allocation. The driver's range of a cuMemAlloc
// address is its allocation; that of a cuMemMap address is the whole
// reservation (docs/sim.md, run 12), which may hold unmapped addresses
// and mappings of other devices' memory: the last byte must then be
// mapped memory of the rank's device too. A hole between two mappings
// inside [p, p+n) is not seen (no driver call lists a reservation's
// mappings; probing every granule would cost a call per 2 MiB).
func (c *Comm) checkForeign(name, arg string, rs *rankState, p cuda.DevicePtr, n uint64) error {
	if err := c.checkDevice(name, arg, rs, p, p); err != nil {
		return err
	}
	start, err := c.d.PointerGetAttribute(cuda.PointerAttrRangeStart, p)
	if err != nil {
		return &ArgError{Op: name, Arg: argName(arg, rs), Rank: rs.rank, Msg: "reading the allocation's range", Err: err}
	}
	size, err := c.d.PointerGetAttribute(cuda.PointerAttrRangeSize, p)
	if err != nil {
		return &ArgError{Op: name, Arg: argName(arg, rs), Rank: rs.rank, Msg: "reading the allocation's range", Err: err}
	}
	if end := start + size; uint64(p) > end || n > end-uint64(p) {
		return argErr(name, argName(arg, rs), rs.rank, "%d bytes at %#x run past the end of the allocation [%#x, %#x)", n, uint64(p), start, end)
	}
	if n > 1 {
		return c.checkDevice(name, arg, rs, p, p+cuda.DevicePtr(n-1))
	}
	return nil
}

// checkDevice checks that address at, a byte of the argument at p, is
// device memory of the rank's device (the error path only allocates).
func (c *Comm) checkDevice(name, arg string, rs *rankState, p, at cuda.DevicePtr) error {
	ord, err := c.d.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, at)
	if err == nil && cuda.Device(ord) == rs.dev {
		return nil
	}
	what := fmt.Sprintf("%#x", uint64(at))
	if at != p {
		what = fmt.Sprintf("%#x (byte %d of %#x)", uint64(at), at-p, uint64(p))
	}
	if err != nil {
		return &ArgError{Op: name, Arg: argName(arg, rs), Rank: rs.rank, Msg: what + " is not device memory", Err: err}
	}
	return argErr(name, argName(arg, rs), rs.rank, "%s is memory of device %d; rank %d runs on device %d", what, ord, rs.rank, rs.dev)
}
