//go:build cgo

package main

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
)

// collKind is a collective nvls runs.
type collKind int

const (
	kAllReduce collKind = iota
	kBroadcast
	kReduce
	kAllGather
	kReduceScatter
)

var collNames = [...]string{"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter"}

func (k collKind) String() string { return collNames[k] }

// reduces reports whether the collective applies an operator.
func (k collKind) reduces() bool { return k == kAllReduce || k == kReduce || k == kReduceScatter }

// call is one rank's collective call, as the C caller made it.
type call struct {
	kind       collKind
	send, recv cuda.DevicePtr
	// The caller's pointers and stream, as given, for forwarding.
	sendp, recvp, streamp unsafe.Pointer
	count                 uint64
	dt                    nccl.DataType
	op                    nccl.RedOp
	root                  int
	stream                cuda.Stream
}

// plan is how nvls runs a call: its element type, count and operator.
type plan struct {
	dt    collectives.DType
	count uint64
	op    collectives.Op
	note  string
}

// reduceTypes are NCCL's types that nvls reduces, as its own.
var reduceTypes = map[nccl.DataType]collectives.DType{
	nccl.Float32: collectives.F32, nccl.Float16: collectives.F16, nccl.Bfloat16: collectives.BF16,
	nccl.Int32: collectives.S32, nccl.Uint32: collectives.U32, nccl.Uint64: collectives.U64,
}

// planFor says how nvls runs c, or why it does not ("" and a reason).
func planFor(c *call) (plan, string) {
	if c.kind.reduces() {
		var op collectives.Op
		switch c.op {
		case nccl.Sum:
			op = collectives.Sum
		case nccl.Min:
			op = collectives.Min
		case nccl.Max:
			op = collectives.Max
		case nccl.Prod, nccl.Avg:
			return plan{}, fmt.Sprintf("operator %v has no nvls kernel", c.op)
		default:
			// One why for every such operator: each has its own number.
			return plan{}, "an operator of ncclRedOpCreatePreMulSum has no nvls kernel"
		}
		if dt, ok := reduceTypes[c.dt]; ok {
			return plan{dt: dt, count: c.count, op: op}, ""
		}
		if c.dt == nccl.Int64 && op == collectives.Sum {
			return plan{dt: collectives.U64, count: c.count, op: op, note: "int64 sum as uint64 (two's complement)"}, ""
		}
		return plan{}, fmt.Sprintf("%v %v has no nvls kernel", dtName(c.dt), c.op)
	}
	// Nothing is reduced: any type runs as bits of its size.
	size := dtSize(c.dt)
	switch {
	case size == 0:
		return plan{}, fmt.Sprintf("unknown data type %d", int32(c.dt))
	case size == 8:
		return plan{dt: collectives.U64, count: c.count}, ""
	case size == 4:
		return plan{dt: collectives.U32, count: c.count}, ""
	case size == 2:
		return plan{dt: collectives.F16, count: c.count, note: "as 16-bit words"}, ""
	case c.count%2 == 0 && c.send%2 == 0 && c.recv%2 == 0:
		return plan{dt: collectives.F16, count: c.count / 2, note: "bytes as 16-bit words"}, ""
	}
	return plan{}, fmt.Sprintf("%v: an odd byte count or address (nvls moves 16-bit words at least)", dtName(c.dt))
}

// dtSize is the size of a data type's element (0: unknown).
func dtSize(dt nccl.DataType) int {
	switch dt {
	case nccl.Int8, nccl.Uint8, float8e4m3, float8e5m2:
		return 1
	}
	return dt.Size()
}

// The fp8 types of NCCL 2.24 and later.
const (
	float8e4m3 nccl.DataType = 10
	float8e5m2 nccl.DataType = 11
)

func dtName(dt nccl.DataType) string {
	switch dt {
	case float8e4m3:
		return "ncclFloat8e4m3"
	case float8e5m2:
		return "ncclFloat8e5m2"
	}
	return dt.String()
}

// round is one collective call whose local ranks' parts are coming in
// (a job with several local ranks: ncclCommInitAll).
type round struct {
	key   string
	parts []*call
	n     int
	plan  plan
	done  chan struct{}
	err   error
}

// collective runs c here or forwards it. Inside a group (ncclGroupStart
// on this thread) a call nvls runs is checked and planned now, its errors
// returned now as NCCL's are, and issued at the outermost ncclGroupEnd,
// where NCCL launches a group's calls ("nothing will be started on the
// CUDA stream until ncclGroupEnd"); ncclGroupSimulateEnd issues nothing.
func (rc *rankComm) collective(c *call) error {
	if err := rc.waitReady(); err != nil {
		return err
	}
	if err := rc.checkArgs(c); err != nil {
		return err
	}
	p, why := planFor(c)
	if rc.j == nil {
		why = "a communicator of ncclCommSplit is the real NCCL's"
	}
	if why != "" {
		return rc.forward(c, why)
	}
	g := myGroup()
	if shim.log.Enabled(context.Background(), levelInfo) {
		shim.log.Info("libnccl-nvls: "+c.kind.String()+": run here", "rank", rc.rank, "count", c.count,
			"dtype", dtName(c.dt), "op", c.op.String(), "root", c.root, "as", p.dt.String(), "note", p.note,
			"at_group_end", g != nil)
	}
	rc.noteStream(c.stream)
	if g != nil {
		g.calls = append(g.calls, deferred{rc: rc, c: c, p: p})
		return nil
	}
	r, err := rc.start(c, p)
	if err != nil || r == nil {
		return err
	}
	return waitRound(r)
}

// checkArgs is NCCL's check of a collective's arguments at its call
// (ArgsCheck): the root is a rank, the data type one of NCCL's.
func (rc *rankComm) checkArgs(c *call) error {
	if (c.kind == kBroadcast || c.kind == kReduce) && rc.nranks > 0 && (c.root < 0 || c.root >= rc.nranks) {
		return fail(nccl.InvalidArgument, "libnccl-nvls: %v: invalid root %d (a rank, 0 to %d)", c.kind, c.root, rc.nranks-1)
	}
	if c.dt < 0 || c.dt >= numTypes {
		return fail(nccl.InvalidArgument, "libnccl-nvls: %v: invalid data type %d", c.kind, int32(c.dt))
	}
	return nil
}

// numTypes is ncclNumTypes of NCCL 2.28.
const numTypes nccl.DataType = 12

// start issues c: at once in a job of one local rank, else as this local
// rank's part of its round (issued with the last part), which it returns.
func (rc *rankComm) start(c *call, p plan) (*round, error) {
	rc.count(false, "")
	j := rc.j
	if len(j.ranks) == 1 {
		return nil, j.issue([]*call{c}, p)
	}
	return j.addPart(rc.local, c, p)
}

func (rc *rankComm) noteStream(s cuda.Stream) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.streams == nil {
		rc.streams = map[cuda.Stream]bool{}
	}
	rc.streams[s] = true
}

// addPart adds local rank l's part of its next call; the last part
// issues the round.
func (j *job) addPart(l int, c *call, p plan) (*round, error) {
	key := fmt.Sprintf("%v of %d %v, op %v, root %d", c.kind, c.count, dtName(c.dt), c.op, c.root)
	j.mu.Lock()
	seq := j.parts[l]
	j.parts[l]++
	r := j.rounds[seq]
	if r == nil {
		r = &round{key: key, parts: make([]*call, len(j.ranks)), plan: p, done: make(chan struct{})}
		j.rounds[seq] = r
	}
	r.parts[l] = c
	r.n++
	if r.key != key && r.err == nil {
		r.err = fail(nccl.InvalidUsage, "libnccl-nvls: local rank %d's call #%d (%s) differs from the other local ranks' (%s): every rank makes the same calls in the same order", l, seq, key, r.key)
	}
	last := r.n == len(j.ranks)
	if last {
		delete(j.rounds, seq)
	}
	j.mu.Unlock()
	if last {
		if r.err == nil {
			r.err = j.issue(r.parts, r.plan)
		}
		close(r.done)
	}
	return r, nil
}

// waitRound waits until every local rank's part came and the round was
// issued, up to the setup deadline.
func waitRound(r *round) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	ctx, cancel, _, err := setupContext()
	if err != nil {
		return err
	}
	defer cancel()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fail(nccl.InvalidUsage, "libnccl-nvls: %s: not every local rank made its call by the setup deadline (one thread driving several GPUs issues their calls between ncclGroupStart and ncclGroupEnd)", r.key)
	}
}

// issue runs one call with every local rank's part.
func (j *job) issue(parts []*call, p plan) error {
	n := len(parts)
	send, recv, streams := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n), make([]cuda.Stream, n)
	for l, c := range parts {
		send[l], recv[l], streams[l] = c.send, c.recv, c.stream
	}
	c0 := parts[0]
	ctx := context.Background()
	var err error
	switch c0.kind {
	case kAllReduce:
		err = j.c.AllReduce(ctx, send, recv, p.count, p.dt, p.op, streams)
	case kBroadcast:
		err = j.c.Broadcast(ctx, send, recv, p.count, p.dt, c0.root, streams)
	case kReduce:
		err = j.c.Reduce(ctx, send, recv, p.count, p.dt, p.op, c0.root, streams)
	case kAllGather:
		err = j.c.AllGather(ctx, send, recv, p.count, p.dt, streams)
	case kReduceScatter:
		err = j.c.ReduceScatter(ctx, send, recv, p.count, p.dt, p.op, streams)
	}
	if err != nil {
		return fmt.Errorf("libnccl-nvls: %v: %w", c0.kind, err)
	}
	return nil
}

// group is a thread's ncclGroupStart/ncclGroupEnd nesting.
type group struct {
	depth int
	calls []deferred  // the calls nvls runs, in call order, for the outermost end
	inits []*rankComm // blocking inits begun inside the group
}

// deferred is a call of a group that nvls runs, checked and planned.
type deferred struct {
	rc *rankComm
	c  *call
	p  plan
}

func myGroup() *group {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	return shim.groups[tid()]
}

func groupStart() error {
	shim.mu.Lock()
	g := shim.groups[tid()]
	if g == nil {
		g = &group{}
		shim.groups[tid()] = g
	}
	g.depth++
	shim.mu.Unlock()
	// The real NCCL is loaded (or found missing) before its first group,
	// so that its group starts and ends pair up however the calls go.
	loadReal()
	return realGroupStart()
}

// popGroup ends a nesting level of this thread's group: the group, and
// whether the level was the outermost.
func popGroup() (*group, bool, error) {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	g := shim.groups[tid()]
	if g == nil {
		return nil, false, fail(nccl.InvalidUsage, "libnccl-nvls: ncclGroupEnd without ncclGroupStart")
	}
	g.depth--
	if g.depth == 0 {
		delete(shim.groups, tid())
	}
	return g, g.depth == 0, nil
}

// groupEnd ends a nesting level; the outermost issues the group's calls
// that nvls runs, in call order on their streams, ends the real NCCL's
// group (its forwarded calls) and waits until every call was issued (the
// parts of every local rank came).
func groupEnd() error {
	g, outer, err := popGroup()
	if err != nil {
		return err
	}
	if !outer {
		return realGroupEnd()
	}
	// Inits first: each is bounded by the setup deadline (its bring-up's).
	err = g.waitInits()
	rounds, ierr := g.issue()
	err = firstErr(err, ierr)
	err = firstErr(err, realGroupEnd())
	for _, r := range rounds {
		err = firstErr(err, waitRound(r))
	}
	return err
}

func (g *group) waitInits() error {
	var err error
	for _, c := range g.inits {
		<-c.ready
		err = firstErr(err, c.initErr)
	}
	return err
}

// issue issues the group's calls in call order (on past an error: the
// other ranks wait for each) and returns the rounds to wait for.
func (g *group) issue() ([]*round, error) {
	var rounds []*round
	var err error
	for _, d := range g.calls {
		r, ierr := d.rc.start(d.c, d.p)
		err = firstErr(err, ierr)
		if r != nil {
			rounds = append(rounds, r)
		}
	}
	g.calls = nil
	return rounds, err
}

func firstErr(err, next error) error {
	if err != nil {
		return err
	}
	return next
}
