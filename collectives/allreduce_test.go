package collectives

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// The matrix Comm: a small one-shot limit, small staging areas and small
// blocks, so that little data covers both algorithms, several chunks,
// several blocks and the grid-stride wrap (more blocks of work than the
// grid).
const (
	matrixOneShot = 2 << 10
	matrixStage   = 4 << 10
	matrixGrid    = 3
	matrixBlock   = 16 // vectors per block
	guardBytes    = 64
)

func matrixOpts() []Option {
	// LL off: this matrix is the one-shot and two-shot paths' (ll_test.go
	// has LL's).
	return []Option{WithLLMax(0), WithOneShotMax(matrixOneShot), WithStageBytes(matrixStage), WithMaxGrid(matrixGrid)}
}

// sizeClass is a count of elements for an element size and team size.
type sizeClass struct {
	name  string
	count func(esize, ranks int) int
}

var sizeClasses = []sizeClass{
	{"one element", func(e, r int) int { return 1 }},
	{"a tail", func(e, r int) int { return 2*(16/e) + 16/e - 1 }},
	{"one vector", func(e, r int) int { return 16 / e }},
	{"one-shot range", func(e, r int) int { return matrixOneShot/2/e + 16/e + 1 }},
	{"two-shot range", func(e, r int) int { return (3*matrixOneShot+16*r)/e + 16/e - 1 }},
}

// bufMode is where the buffers live.
type bufMode struct {
	name    string
	inPlace bool
	foreign bool
}

var bufModes = []bufMode{
	{"zero-copy out-of-place", false, false},
	{"zero-copy in-place", true, false},
	{"copy-in out-of-place", false, true},
	{"copy-in in-place", true, true},
}

func transports() []team.Transport { return []team.Transport{team.Multicast, team.Unicast} }

// forEachTeam runs fn as a subtest ("N ranks TRANSPORT") for the
// matrices' teams: 2, 3, 4 and 8 ranks on both transports.
func forEachTeam(t *testing.T, fn func(t *testing.T, ranks int, tr team.Transport)) {
	for _, ranks := range []int{2, 3, 4, 8} {
		for _, tr := range transports() {
			t.Run(fmt.Sprintf("%d ranks %v", ranks, tr), func(t *testing.T) { fn(t, ranks, tr) })
		}
	}
}

// matrixMax is the largest buffer the matrix needs.
const matrixMax = 3*matrixOneShot + 16*8 + 16

func newMatrixFixture(t *testing.T, ranks int, tr team.Transport) *fixture {
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: tr, dataBytes: 1 << 20, foreign: 2 * (matrixMax + guardBytes), opts: matrixOpts()})
	f.c.blockVecs = matrixBlock
	return f
}

// caseBuffers are the per-rank send and recv pointers of a mode.
func (f *fixture) caseBuffers(m bufMode, send, recv team.Buffer) (s, r []cuda.DevicePtr) {
	s, r = make([]cuda.DevicePtr, f.n), make([]cuda.DevicePtr, f.n)
	for l := range f.n {
		switch {
		case m.foreign:
			s[l] = f.foreign[l]
			r[l] = f.foreign[l] + matrixMax + guardBytes
		default:
			s[l], r[l] = send.Ptr(l), recv.Ptr(l)
		}
		if m.inPlace {
			r[l] = s[l]
		}
	}
	return s, r
}

// runAllReduce writes fresh inputs, poisons the outputs and guards, runs
// one all-reduce with c, and checks every rank's result against the
// reference, the guards, and (out of place, up to 1 MiB) that send is
// untouched.
func runAllReduce(t testing.TB, r rig, c *Comm, rng *rand.Rand, send, recv []cuda.DevicePtr, dt DType, op Op, count int) {
	t.Helper()
	require.NoError(t, enqueueAllReduce(r, c, rng, send, recv, dt, op, count).check(t, r, c))
}

// errWrong marks a result that is wrong (not an error of the call).
var errWrong = errors.New("wrong result")

// pendingAllReduce is an enqueued all-reduce and what its check needs.
type pendingAllReduce struct {
	send, recv  []cuda.DevicePtr
	dt          DType
	op          Op
	count       int
	ins, guards [][]byte
	err         error
}

func enqueueAllReduce(r rig, c *Comm, rng *rand.Rand, send, recv []cuda.DevicePtr, dt DType, op Op, count int) *pendingAllReduce {
	n := count * dt.Size()
	pa := &pendingAllReduce{send: send, recv: recv, dt: dt, op: op, count: count, ins: make([][]byte, r.size()), guards: make([][]byte, r.size())}
	for l := range r.size() {
		pa.ins[l] = input(rng, dt, count)
		pa.guards[l] = randomBytes(rng, guardBytes)
		if send[l] != recv[l] {
			r.put(l, recv[l], randomBytes(rng, n))
		}
		r.put(l, send[l], pa.ins[l])
		r.put(l, recv[l]+cuda.DevicePtr(n), pa.guards[l])
	}
	pa.err = c.AllReduce(context.Background(), send, recv, uint64(count), dt, op, r.streamList())
	return pa
}

// check syncs and checks; it returns what is wrong as an error.
func (pa *pendingAllReduce) check(t testing.TB, r rig, c *Comm) error {
	if pa.err != nil {
		return pa.err
	}
	if err := c.Sync(context.Background(), r.streamList()); err != nil {
		return err
	}
	n := pa.count * pa.dt.Size()
	gots := make([][]byte, r.size())
	for l := range r.size() {
		got := r.get(l, pa.recv[l], n+guardBytes)
		gots[l] = got[:n]
		if !bytes.Equal(pa.guards[l], got[n:]) {
			return fmt.Errorf("%w: rank %d: the %d bytes after recv were overwritten", errWrong, l, guardBytes)
		}
		if pa.send[l] != pa.recv[l] && n <= 1<<20 && !bytes.Equal(pa.ins[l], r.get(l, pa.send[l], n)) {
			return fmt.Errorf("%w: rank %d: send was modified by an out-of-place all-reduce", errWrong, l)
		}
	}
	if msg, bad := checkParallel(pa.dt, pa.op, pa.ins, gots, pa.count); bad > 0 {
		return fmt.Errorf("%w: %v %v x %d: %d wrong of %d x %d ranks:\n%s", errWrong, pa.dt, pa.op, pa.count, bad, pa.count, r.size(), msg)
	}
	return nil
}

// TestAllReduceMatrix: every dtype x op the flavor has x size class x
// buffer mode, for 2, 3, 4 and 8 ranks and both transports.
func TestAllReduceMatrix(t *testing.T) {
	forEachTeam(t, func(t *testing.T, ranks int, tr team.Transport) {
		f := newMatrixFixture(t, ranks, tr)
		rng := newRNG(t)
		sendB, recvB := f.alloc(matrixMax+guardBytes), f.alloc(matrixMax+guardBytes)
		runMatrix(t, f, rng, sendB, recvB)
	})
}

// runMatrix runs f.c's all-reduce for every dtype x op x
// size class x buffer mode, each a subtest checked against the reference.
func runMatrix(t *testing.T, f *fixture, rng *rand.Rand, sendB, recvB team.Buffer) {
	for _, dt := range DTypes {
		for _, op := range Ops { // every pair: what multimem cannot reduce runs the unicast kernel
			for _, sc := range sizeClasses {
				count := sc.count(dt.Size(), f.n)
				for _, m := range bufModes {
					send, recv := f.caseBuffers(m, sendB, recvB)
					t.Run(fmt.Sprintf("%v %v %s (%d) %s", dt, op, sc.name, count, m.name), func(t *testing.T) {
						runAllReduce(t, f, f.c, rng, send, recv, dt, op, count)
					})
				}
			}
		}
	}
}

// TestAllReduce64MiB: 64 MiB, zero-copy, with the default options (two-shot,
// the default grid), one dtype and op per team size.
func TestAllReduce64MiB(t *testing.T) {
	const size = 64 << 20
	for _, tc := range []struct {
		ranks int
		tr    team.Transport
		dt    DType
		op    Op
	}{
		{2, team.Multicast, F32, Sum},
		{3, team.Unicast, U64, Max},
		{4, team.Multicast, S32, Sum},
		{8, team.Unicast, U32, Min},
	} {
		t.Run(fmt.Sprintf("%d ranks %v %v %v", tc.ranks, tc.tr, tc.dt, tc.op), func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: tc.ranks, transport: tc.tr, dataBytes: 2*size + 12<<20})
			require.Equal(t, kernels.TwoShot, f.c.algo(size))
			sendB, recvB := f.alloc(size+guardBytes), f.alloc(size+guardBytes)
			runAllReduce(t, f, f.c, newRNG(t), f.ptrs(sendB), f.ptrs(recvB), tc.dt, tc.op, size/tc.dt.Size())
		})
	}
}

// TestAllReduceDefaults: the default options on sizes around the default
// crossover (LL, then two-shot at 4 ranks), in and out of place.
func TestAllReduceDefaults(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, dataBytes: 8 << 20, foreign: 1 << 20})
	rng := newRNG(t)
	sendB, recvB := f.alloc(1<<20), f.alloc(1<<20)
	for _, bytes := range []int{DefaultOneShotMax - 16, DefaultOneShotMax + 48} {
		for _, inPlace := range []bool{false, true} {
			recv := f.ptrs(recvB)
			if inPlace {
				recv = f.ptrs(sendB)
			}
			t.Run(fmt.Sprintf("%d bytes in-place %v", bytes, inPlace), func(t *testing.T) {
				runAllReduce(t, f, f.c, rng, f.ptrs(sendB), recv, BF16, Sum, bytes/2)
			})
		}
	}
}

// TestAllReduceInPlaceOneShotChunks: an in-place one-shot larger than the
// staging area goes in chunks, each with the staging area as its stage.
func TestAllReduceInPlaceOneShotChunks(t *testing.T) {
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: 3, transport: tr, dataBytes: 1 << 20, opts: []Option{WithLLMax(0), WithOneShotMax(64 << 10), WithStageBytes(4 << 10)}})
			b := f.alloc(40<<10 + guardBytes)
			f.node.ResetCalls()
			runAllReduce(t, f, f.c, newRNG(t), f.ptrs(b), f.ptrs(b), F16, Max, (40<<10-6)/2)
			assert.Len(t, f.node.CallsOf("cuLaunchKernelEx"), 3*10, "10 chunks of 4 KiB on each of 3 ranks")
		})
	}
}

// TestAllReduceMixedBuffers: one rank passes a team buffer, the others
// cuMemAlloc memory: every rank goes through the staging areas (the
// kernels need the same offsets on every rank). And team buffers at
// different offsets on different ranks likewise.
func TestAllReduceMixedBuffers(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, dataBytes: 1 << 20, foreign: 64 << 10, opts: []Option{WithLLMax(0), WithStageBytes(4 << 10)}})
	rng := newRNG(t)
	a, b := f.alloc(16<<10), f.alloc(16<<10)
	const count = 3000 // f32: 12000 bytes, three chunks
	send := f.ptrs(a)
	send[2] = f.foreign[2]
	recv := f.ptrs(b)
	f.node.ResetCalls()
	runAllReduce(t, f, f.c, rng, send, recv, F32, Sum, count)
	assert.Len(t, f.node.CallsOf("cuMemcpyDtoDAsync"), 4*3, "every rank copies its send in, in 3 chunks")

	// Team buffers, but rank 1's send at another offset.
	send = f.ptrs(a)
	send[1] = b.Ptr(1)
	recv = f.ptrs(b)
	recv[1] = a.Ptr(1)
	runAllReduce(t, f, f.c, rng, send, recv, S32, Max, count)

	// Send symmetric, recv cuMemAlloc memory: copy out only.
	recv = append([]cuda.DevicePtr(nil), f.foreign...)
	f.node.ResetCalls()
	runAllReduce(t, f, f.c, rng, f.ptrs(a), recv, U64, Sum, 1500)
	assert.Len(t, f.node.CallsOf("cuMemcpyDtoDAsync"), 4*3, "every rank copies its recv out, in 3 chunks")
}
