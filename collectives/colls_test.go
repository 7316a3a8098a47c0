package collectives

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// The reduce-scatter, all-gather and reduce tests reuse the all-reduce's
// fixtures (matrixOpts, newMatrixFixture, newLLFixture), oracle (input,
// checkAllReduce) and buffer modes (bufModes); what differs is the layout
// of the buffers (a reduce-scatter's send and an all-gather's recv hold
// nranks slices) and what each rank must get.

// collOp is one of the three, as the tests drive it.
type collOp struct {
	coll  kernels.Coll
	dt    DType
	op    Op
	count int // per slice (reduce-scatter, all-gather), or in all (reduce)
	root  int
}

// bytesOf are the sizes of each rank's send and recv.
func (o collOp) bytesOf(ranks int) (send, recv int) {
	b := o.count * o.dt.Size()
	switch o.coll {
	case kernels.CollReduceScatter:
		return ranks * b, b
	case kernels.CollAllGather:
		return b, ranks * b
	}
	return b, b
}

// enqueue issues o on c.
func (o collOp) enqueue(c *Comm, send, recv []cuda.DevicePtr, streams []cuda.Stream) error {
	ctx, n := context.Background(), uint64(o.count)
	switch o.coll {
	case kernels.CollReduceScatter:
		return c.ReduceScatter(ctx, send, recv, n, o.dt, o.op, streams)
	case kernels.CollAllGather:
		return c.AllGather(ctx, send, recv, n, o.dt, streams)
	case kernels.CollAllReduce:
		return c.AllReduce(ctx, send, recv, n, o.dt, o.op, streams)
	case kernels.CollBroadcast:
		return c.Broadcast(ctx, send, recv, n, o.dt, o.root, streams)
	}
	return c.Reduce(ctx, send, recv, n, o.dt, o.op, o.root, streams)
}

// layout is send and recv for o, or, inPlace, o's in-place pointers over
// the buffer of the sliced side (recv for all-gather, else send).
func (o collOp) layout(send, recv []cuda.DevicePtr, inPlace bool) ([]cuda.DevicePtr, []cuda.DevicePtr) {
	switch {
	case !inPlace:
		return send, recv
	case o.coll == kernels.CollAllGather:
		return o.inPlace(recv)
	}
	return o.inPlace(send)
}

// inPlace returns the in-place pointers of o over buffer base (one per
// rank, each holding the larger of send and recv): reduce-scatter: recv
// is the rank's slice of send; all-gather: send is the rank's slot of
// recv; reduce: the same buffer.
func (o collOp) inPlace(base []cuda.DevicePtr) (send, recv []cuda.DevicePtr) {
	send, recv = append([]cuda.DevicePtr(nil), base...), append([]cuda.DevicePtr(nil), base...)
	slot := cuda.DevicePtr(o.count * o.dt.Size())
	for r := range base {
		switch o.coll {
		case kernels.CollReduceScatter:
			recv[r] += cuda.DevicePtr(r) * slot
		case kernels.CollAllGather:
			send[r] += cuda.DevicePtr(r) * slot
		}
	}
	return send, recv
}

// runColl writes fresh inputs, poisons the outputs, guards the byte after
// every rank's recv (not in place for reduce-scatter, where that is the
// next slice of send), runs o, and checks every rank's result against the
// reference, the guards, and that other ranks' recv of a reduce is
// untouched.
func runColl(t testing.TB, r rig, c *Comm, rng *rand.Rand, o collOp, send, recv []cuda.DevicePtr) {
	t.Helper()
	require.NoError(t, collChecked(r, c, rng, o, send, recv))
}

func collChecked(r rig, c *Comm, rng *rand.Rand, o collOp, send, recv []cuda.DevicePtr) error {
	pc := fillColl(r, rng, o, send, recv)
	if err := o.enqueue(c, send, recv, r.streamList()); err != nil {
		return err
	}
	if err := c.Sync(context.Background(), r.streamList()); err != nil {
		return err
	}
	return pc.verify(r)
}

// pendingColl is a collective's inputs, written, and what its check needs.
type pendingColl struct {
	o                  collOp
	send, recv         []cuda.DevicePtr
	ins, before, guard [][]byte
}

// fillColl writes fresh inputs and poison, and guards after recv.
func fillColl(r rig, rng *rand.Rand, o collOp, send, recv []cuda.DevicePtr) *pendingColl {
	n := r.size()
	sb, rb := o.bytesOf(n)
	ins, before, guards := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for l := range n {
		ins[l] = input(rng, o.dt, sb/o.dt.Size())
		if recv[l] == 0 { // a reduce's non-root may pass none
			r.put(l, send[l], ins[l])
			continue
		}
		r.put(l, recv[l], randomBytes(rng, rb))
		r.put(l, send[l], ins[l])
		before[l] = r.get(l, recv[l], rb)
		if o.coll != kernels.CollReduceScatter || !overlapIn(send[l], uint64(sb), recv[l], uint64(rb)) {
			guards[l] = randomBytes(rng, guardBytes)
			r.put(l, recv[l]+cuda.DevicePtr(rb), guards[l])
		}
	}
	return &pendingColl{o: o, send: send, recv: recv, ins: ins, before: before, guard: guards}
}

// verify checks every rank's recv and guard (the streams idle).
func (pc *pendingColl) verify(r rig) error {
	_, rb := pc.o.bytesOf(r.size())
	for l := range r.size() {
		if pc.recv[l] == 0 {
			continue
		}
		got := r.get(l, pc.recv[l], rb)
		if err := pc.o.check(l, pc.ins, got, pc.before[l]); err != nil {
			return err
		}
		if g := pc.guard[l]; g != nil && !bytes.Equal(g, r.get(l, pc.recv[l]+cuda.DevicePtr(rb), guardBytes)) {
			return fmt.Errorf("%w: rank %d: the %d bytes after recv were overwritten", errWrong, l, guardBytes)
		}
	}
	return nil
}

// check compares rank l's recv (got) with the reference: its slice of the
// reduction, every rank's send in rank order, or (the root) the reduction;
// a reduce's other ranks' recv must still be what it was (before).
func (o collOp) check(l int, ins [][]byte, got, before []byte) error {
	srcs := ins
	switch {
	case o.coll == kernels.CollAllGather:
		if want := bytes.Join(ins, nil); !bytes.Equal(want, got) {
			return fmt.Errorf("%w: rank %d: recv is not every rank's send in rank order (%d bytes)", errWrong, l, len(want))
		}
		return nil
	case o.coll == kernels.CollReduce && l != o.root:
		if !bytes.Equal(before, got) {
			return fmt.Errorf("%w: rank %d: a reduce to root %d wrote its recv", errWrong, l, o.root)
		}
		return nil
	case o.coll == kernels.CollReduceScatter:
		b := len(got)
		srcs = make([][]byte, len(ins))
		for q := range ins {
			srcs[q] = ins[q][l*b : (l+1)*b]
		}
	}
	if msg, bad := checkAllReduce(o.dt, o.op, srcs, [][]byte{got}, o.count); bad > 0 {
		return fmt.Errorf("%w: rank %d: %v %v x %d: %d wrong:\n%s", errWrong, l, o.dt, o.op, o.count, bad, msg)
	}
	return nil
}

// collSizes are the size classes of the three, in elements per slice
// (reduce: in all): 1 element, a scalar tail, one vector, ragged slices
// (not a whole number of vectors, so that slices after the first start
// off a vector), several blocks with a grid-stride wrap and several
// staging chunks, and (reduce) the two-shot range.
var collSizes = []sizeClass{
	{"one element", func(e, r int) int { return 1 }},
	{"a tail", func(e, r int) int { return 2*(16/e) + 16/e - 1 }},
	{"one vector", func(e, r int) int { return 16 / e }},
	{"ragged slices", func(e, r int) int { return 3*(16/e) + 1 }},
	{"blocks and chunks", func(e, r int) int { return (2*matrixGrid*matrixBlock*16+40)/e + 1 }},
	{"two-shot range", func(e, r int) int { return (3*matrixOneShot+16*r)/e + 16/e - 1 }},
}

// collMax bounds every buffer of the matrix: 8 slices of the largest size.
const collMax = 8*(2*matrixGrid*matrixBlock*16+64) + guardBytes

// collBuffers: zero-copy or copy-in (cuMemAlloc memory), in place or not.
// For a reduce-scatter or an all-gather the own-only side is used in place
// either way; copy-in moves the symmetric side. A reduce's mixed modes
// (reduceModes) move one side only.
func (f *fixture) collBuffers(m bufMode, o collOp, a, b team.Buffer) (send, recv []cuda.DevicePtr) {
	send, recv = f.ptrs(a), f.ptrs(b)
	switch m.name {
	case sendOutside:
		copy(send, f.foreign)
	case rootRecvOutside:
		recv[o.root] = f.foreign[o.root] + collMax
	case rootRecvOff:
		for l := range recv {
			recv[l] += cuda.DevicePtr(o.dt.Size())
		}
	}
	if m.foreign {
		for l := range f.n {
			send[l], recv[l] = f.foreign[l], f.foreign[l]+collMax
		}
	}
	return o.layout(send, recv, m.inPlace)
}

// The reduce's mixed modes: the send copied in and the result stored
// straight into the root's recv (a team buffer); the send symmetric and
// the result through the root's staging area (its recv cuMemAlloc memory,
// or a team buffer off the 16-byte alignment, every rank passing the
// same).
const (
	sendOutside     = "send outside, root's recv symmetric"
	rootRecvOutside = "send symmetric, root's recv outside"
	rootRecvOff     = "send symmetric, root's recv symmetric one element off"
)

var reduceModes = []bufMode{{name: sendOutside}, {name: rootRecvOutside}, {name: rootRecvOff}}

// modes are o's buffer modes: bufModes, and reduceModes for a reduce.
func (o collOp) modes() []bufMode {
	if o.coll != kernels.CollReduce {
		return bufModes
	}
	return append(append([]bufMode(nil), bufModes...), reduceModes...)
}

// TestCollsMatrix: reduce-scatter, all-gather and reduce, every dtype x op
// the flavor has (all-gather: every dtype) x size class x buffer mode, for
// 2, 3, 4 and 8 ranks and both transports; the reduce from a root that
// moves with the case.
func TestCollsMatrix(t *testing.T) {
	forEachTeam(t, func(t *testing.T, ranks int, tr team.Transport) {
		f := newFixture(t, fixtureConfig{ranks: ranks, transport: tr, dataBytes: 1 << 20, foreign: 2 * collMax, opts: matrixOpts()})
		f.c.blockVecs = matrixBlock
		rng := newRNG(t)
		runCollCases(t, f, rng, ranks)
	})
}

// runCollCases runs every case of collCases in every buffer mode on f's
// Comm, each as a subtest, the roots in turn.
func runCollCases(t *testing.T, f *fixture, rng *rand.Rand, ranks int) {
	a, b := f.alloc(collMax), f.alloc(collMax)
	for i, o := range collCases(f.c.Flavor(), ranks) {
		o.root = i % ranks
		for _, m := range o.modes() {
			send, recv := f.collBuffers(m, o, a, b)
			t.Run(fmt.Sprintf("%v %v %v %d %s", o.coll, o.dt, o.op, o.count, m.name), func(t *testing.T) {
				runColl(t, f, f.c, rng, o, send, recv)
			})
		}
	}
}

// collCases are the matrix's collectives: every type x operator for the
// reducing ones (fl's or, where multimem cannot, the unicast kernel) (every type for all-gather) x size class (the
// two-shot range for reduce only).
func collCases(fl kernels.Flavor, ranks int) []collOp {
	var cs []collOp
	for _, coll := range []kernels.Coll{kernels.CollReduceScatter, kernels.CollAllGather, kernels.CollReduce} {
		for _, dt := range DTypes {
			for _, op := range Ops {
				if coll == kernels.CollAllGather && op != Sum {
					continue
				}
				for _, sc := range collSizes {
					if sc.name == "two-shot range" && coll != kernels.CollReduce {
						continue
					}
					cs = append(cs, collOp{coll: coll, dt: dt, op: op, count: sc.count(dt.Size(), ranks)})
				}
			}
		}
	}
	return cs
}
