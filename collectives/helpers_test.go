package collectives

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team"
)

// fixture is a simulated node, a team over all its devices, a Comm and a
// non-blocking stream per rank.
type fixture struct {
	teamRig
	node   *sim.Node
	c      *Comm
	closed bool
}

// teamRig is what fixture and gpuRig (build tag gpu) share: a team of n
// local ranks, a non-blocking stream per rank and, where asked for,
// cuMemAlloc buffers outside the workspace.
type teamRig struct {
	tb      testing.TB
	t       *team.Team
	n       int
	streams []cuda.Stream
	// foreign are cuMemAlloc buffers per rank (outside the workspace).
	foreign []cuda.DevicePtr
}

func newTeamRig(tb testing.TB, tm *team.Team, n int) teamRig {
	return teamRig{tb: tb, t: tm, n: n, streams: make([]cuda.Stream, n), foreign: make([]cuda.DevicePtr, n)}
}

// open makes each rank's stream and, where foreign > 0, a cuMemAlloc
// buffer of foreign bytes, on the rank's thread.
func (r *teamRig) open(d cuda.Driver, foreign uint64) error {
	return r.t.Run(team.JobFunc(func(l int) error {
		s, err := d.StreamCreate(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		r.streams[l] = s
		if foreign > 0 {
			if r.foreign[l], err = d.MemAlloc(foreign); err != nil {
				return err
			}
		}
		return nil
	}))
}

type fixtureConfig struct {
	ranks     int
	transport team.Transport
	dataBytes uint64
	foreign   uint64 // bytes of cuMemAlloc memory per rank (0: none)
	opts      []Option
	exact     bool // dataBytes is the whole data area (no WorkspaceBytes added)
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// withRoom is a data area of bytes for a test's own buffers plus what New
// takes for a team of ranks with opts (WorkspaceBytes; its LL area grows
// with the team's LL limit).
func withRoom(tb testing.TB, ranks int, bytes uint64, opts ...Option) uint64 {
	tb.Helper()
	ws, err := WorkspaceBytes(ranks, opts...)
	require.NoError(tb, err)
	return bytes + ws
}

func newFixture(tb testing.TB, fc fixtureConfig) *fixture {
	tb.Helper()
	if fc.dataBytes == 0 {
		fc.dataBytes = 8 << 20
	}
	if !fc.exact {
		fc.dataBytes = withRoom(tb, fc.ranks, fc.dataBytes, fc.opts...)
	}
	node := newSimNode(sim.Config{Devices: fc.ranks, MemoryPerDevice: 2*fc.dataBytes + 2*fc.foreign + 256<<20})
	devs := make([]cuda.Device, fc.ranks)
	for i := range devs {
		devs[i] = cuda.Device(i)
	}
	tm, err := team.New(context.Background(), node, devs, team.WithTransport(fc.transport),
		team.WithWorkspaceSize(fc.dataBytes), team.WithLogger(quietLogger()))
	require.NoError(tb, err)
	f := &fixture{teamRig: newTeamRig(tb, tm, fc.ranks), node: node}
	require.NoError(tb, f.open(node, fc.foreign))
	f.c, err = New(tm, fc.opts...)
	require.NoError(tb, err)
	tb.Cleanup(f.close)
	return f
}

// close tears everything down and checks that nothing leaked.
func (f *fixture) close() {
	tb := f.tb
	tb.Helper()
	if f.closed {
		return
	}
	f.closed = true
	if f.c != nil {
		require.NoError(tb, f.c.Close())
	}
	// The team's Run refuses a broken team: drain and destroy on locked
	// threads. (Kernels still waiting after a failure end at their
	// timeout.)
	for l := range f.n {
		require.NoError(tb, onContext(f.node, f.t.Context(l), func() error {
			_ = f.node.StreamSynchronize(f.streams[l])
			if f.foreign[l] != 0 {
				if err := f.node.MemFree(f.foreign[l]); err != nil {
					return err
				}
			}
			return f.node.StreamDestroy(f.streams[l])
		}))
	}
	require.NoError(tb, f.t.Close())
	require.NoError(tb, f.node.CheckNoLeaks())
	require.NoError(tb, f.node.Close())
}

// sync waits for the collectives enqueued so far.
func (f *fixture) sync() {
	f.tb.Helper()
	require.NoError(f.tb, f.c.Sync(context.Background(), f.streams))
}

// alloc is a team buffer of n bytes, freed when the test ends.
func (r *teamRig) alloc(n uint64) team.Buffer {
	r.tb.Helper()
	b, err := r.t.Alloc(n)
	require.NoError(r.tb, err)
	r.tb.Cleanup(func() { _ = r.t.Free(b) })
	return b
}

// ptrs is b's address on each local rank.
func (r *teamRig) ptrs(b team.Buffer) []cuda.DevicePtr {
	p := make([]cuda.DevicePtr, r.n)
	for l := range p {
		p[l] = b.Ptr(l)
	}
	return p
}

// rig is what the run helpers need from a node: the simulated one
// (fixture) or real GPUs (gpuRig, build tag gpu).
type rig interface {
	size() int
	streamList() []cuda.Stream
	// put and get copy to and from device memory of local rank l while
	// its stream is idle.
	put(l int, p cuda.DevicePtr, b []byte)
	get(l int, p cuda.DevicePtr, n int) []byte
}

func (r *teamRig) size() int                                 { return r.n }
func (r *teamRig) streamList() []cuda.Stream                 { return r.streams }
func (f *fixture) put(_ int, p cuda.DevicePtr, b []byte)     { f.write(p, b) }
func (f *fixture) get(_ int, p cuda.DevicePtr, n int) []byte { return f.read(p, n) }

func (f *fixture) write(p cuda.DevicePtr, b []byte) {
	f.tb.Helper()
	require.NoError(f.tb, f.node.WriteDevice(p, b))
}

func (f *fixture) read(p cuda.DevicePtr, n int) []byte {
	f.tb.Helper()
	b, err := f.node.ReadDevice(p, n)
	require.NoError(f.tb, err)
	return b
}

// ---------------------------------------------------------------------------
// The oracle: inputs and a reference computed here, independently of the
// kernels (float64 sums, exact integers).

func newRNG(tb testing.TB) *rand.Rand {
	seed := rand.Uint64()
	tb.Logf("seed %#x", seed)
	return rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
}

// input is count random elements of dt: floats of both signs with
// magnitudes from 1/8 to 32 and random mantissas (never NaN, Inf or
// subnormal); integers over their whole range (so that sums wrap).
func input(rng *rand.Rand, dt DType, count int) []byte {
	b := make([]byte, count*dt.Size())
	switch dt {
	case S32, U32, U64:
		fill(rng, b)
		return b
	}
	for i := range count {
		r := rng.Uint64()
		sign, e := r&1, (r>>1)&7 // exponent 2^(e-3)
		switch dt {
		case F32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(sign<<31|(127+e-3)<<23|(r>>8)&(1<<23-1)))
		case F16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(sign<<15|(15+e-3)<<10|(r>>8)&(1<<10-1)))
		case BF16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(sign<<15|(127+e-3)<<7|(r>>8)&(1<<7-1)))
		}
	}
	return b
}

// fill fills b with random bytes.
func fill(rng *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	fill(rng, b)
	return b
}

func floatAt(dt DType, b []byte, i int) float64 {
	switch dt {
	case F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case F16:
		return float64(float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32())
	default:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	}
}

// ulp is the spacing of dt's values at |x|.
func ulp(dt DType, x float64) float64 {
	mant, emin := 23, -126
	switch dt {
	case F16:
		mant, emin = 10, -14
	case BF16:
		mant = 7
	}
	_, e := math.Frexp(math.Abs(x))
	return math.Ldexp(1, max(e-1, emin)-mant)
}

// checkAllReduce compares every rank's result (gots, count elements each)
// with op over ins, computing each reference element once, and returns a
// description of the first few wrong elements and their number over all
// ranks.
func checkAllReduce(dt DType, op Op, ins [][]byte, gots [][]byte, count int) (string, int) {
	var msg string
	bad := 0
	report := func(r, i int, have, want string) {
		bad++
		if bad <= 5 {
			msg += fmt.Sprintf("rank %d element %d: got %s, want %s\n", r, i, have, want)
		}
	}
	for i := range count {
		switch dt {
		case F32, F16, BF16:
			var s, abs float64
			m := floatAt(dt, ins[0], i)
			for _, in := range ins {
				x := floatAt(dt, in, i)
				s += x
				abs += math.Abs(x)
				if op == Min {
					m = math.Min(m, x)
				} else if op == Max {
					m = math.Max(m, x)
				}
			}
			// f32 accumulation over the ranks, plus one rounding to a
			// 16-bit type.
			tol := float64(len(ins)) * math.Ldexp(abs, -23)
			if dt != F32 {
				tol += ulp(dt, s) / 2
			}
			for r, got := range gots {
				g := floatAt(dt, got, i)
				if op == Sum {
					if !(math.Abs(g-s) <= tol) {
						report(r, i, fmt.Sprint(g), fmt.Sprintf("%g ± %g", s, tol))
					}
				} else if g != m {
					report(r, i, fmt.Sprint(g), fmt.Sprint(m))
				}
			}
		case S32, U32:
			var s, m int64
			for k, in := range ins {
				u := binary.LittleEndian.Uint32(in[4*i:])
				x := int64(u)
				if dt == S32 {
					x = int64(int32(u))
				}
				s += x
				if k == 0 || (op == Min && x < m) || (op == Max && x > m) {
					m = x
				}
			}
			w := uint32(m)
			if op == Sum {
				w = uint32(s)
			}
			for r, got := range gots {
				if g := binary.LittleEndian.Uint32(got[4*i:]); g != w {
					report(r, i, fmt.Sprint(g), fmt.Sprint(w))
				}
			}
		case U64:
			// The sum modulo 2^64 (uint64 addition wraps).
			var sum, m uint64
			for k, in := range ins {
				x := binary.LittleEndian.Uint64(in[8*i:])
				sum += x
				if k == 0 || (op == Min && x < m) || (op == Max && x > m) {
					m = x
				}
			}
			w := m
			if op == Sum {
				w = sum
			}
			for r, got := range gots {
				if g := binary.LittleEndian.Uint64(got[8*i:]); g != w {
					report(r, i, fmt.Sprint(g), fmt.Sprint(w))
				}
			}
		}
	}
	return msg, bad
}

// checkParallel is checkAllReduce over slices of the elements on every
// core.
func checkParallel(dt DType, op Op, ins, gots [][]byte, count int) (string, int) {
	const minPer = 1 << 16
	parts := min(runtime.NumCPU(), max(count/minPer, 1))
	if parts == 1 {
		return checkAllReduce(dt, op, ins, gots, count)
	}
	e := dt.Size()
	msgs, bads := make([]string, parts), make([]int, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := count*p/parts, count*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := func(bs [][]byte) [][]byte {
				out := make([][]byte, len(bs))
				for i, b := range bs {
					out[i] = b[lo*e : hi*e]
				}
				return out
			}
			msgs[p], bads[p] = checkAllReduce(dt, op, sub(ins), sub(gots), hi-lo)
			if bads[p] > 0 {
				msgs[p] = fmt.Sprintf("(elements from %d on, indices relative)\n", lo) + msgs[p]
			}
		}()
	}
	wg.Wait()
	msg, bad := "", 0
	for p := range parts {
		msg += msgs[p]
		bad += bads[p]
	}
	return msg, bad
}

// onContext runs fn on a locked OS thread with ctx current.
func onContext(d cuda.Driver, ctx cuda.Context, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.CtxSetCurrent(ctx); err != nil {
		return err
	}
	err := fn()
	if cerr := d.CtxSetCurrent(0); err == nil {
		err = cerr
	}
	return err
}

// newPerRankNode is a simulated node of gpus devices and in-process
// bootstraps for ranks ranks, for teams brought up rank by rank
// (team.NewRank, as under MPI). At cleanup the bootstraps close and the
// node must hold nothing: the test closes its teams first (in its body or
// in a cleanup registered after this one).
func newPerRankNode(t *testing.T, gpus, ranks int) (*sim.Node, []team.Bootstrap) {
	t.Helper()
	node := newSimNode(sim.Config{Devices: gpus})
	boots := team.NewInProcess(ranks)
	t.Cleanup(func() {
		for _, b := range boots {
			_ = b.Close()
		}
		assert.NoError(t, node.CheckNoLeaks())
		assert.NoError(t, node.Close())
	})
	return node, boots
}

// withRankComm is one rank's process on node: its own Team (team.NewRank
// on dev with boot and topts, a quiet logger), a Comm with copts and a
// non-blocking stream; it runs body with them and then destroys the
// stream and closes the Comm and the Team, returning the first error.
func withRankComm(node *sim.Node, dev cuda.Device, boot team.Bootstrap, topts []team.Option, copts []Option,
	body func(tm *team.Team, c *Comm, streams []cuda.Stream) error) (err error) {
	ctx := context.Background()
	tm, err := team.NewRank(ctx, node, dev, boot, append(topts, team.WithLogger(quietLogger()))...)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := tm.Close(); err == nil {
			err = cerr
		}
	}()
	c, err := New(tm, copts...)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}()
	var s cuda.Stream
	if err := tm.Run(team.JobFunc(func(int) error { s, err = node.StreamCreate(cuda.StreamNonBlocking); return err })); err != nil {
		return err
	}
	defer func() {
		if derr := tm.Run(team.JobFunc(func(int) error { return node.StreamDestroy(s) })); err == nil {
			err = derr
		}
	}()
	return body(tm, c, []cuda.Stream{s})
}
