//go:build mpi

package rankkill

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The soak of one-process-per-GPU teams (issue 24 item 4): every rank
// runs the same random sequence of the six collectives (from a seed they
// share), each with a random element type, operator, size, root, in or
// out of place, enqueued eagerly or captured into a graph and replayed
// (out of place 1-3 times, in place once), and checks its own result
// against a reference computed on the host from every rank's input. The
// inputs make every reduction exact whatever the order the kernels sum
// in: small integers (|x| <= 8) for the float types, any bits for the
// integer types (sums wrap), so a result is right or wrong, bit for bit.

// soakSetup is one rank's part.
type soakSetup struct {
	d    cuda.Driver
	dev  cuda.Device
	boot team.Bootstrap
	seed [32]byte
	// bufBytes is each of the two buffers; the largest side of an
	// operation (a reduce-scatter's send, an all-gather's recv) fits it.
	bufBytes uint64
	// ops and dur bound the run (whichever comes first; 0: no bound).
	ops int
	dur time.Duration
	log *slog.Logger
	// progress, when set, is called with a line every 30 s.
	progress func(string)
}

// soakResult is one rank's count of operations, by collective and
// mode, and of wrong results.
type soakResult struct {
	ops, graphs, inPlace, wrong int
	byColl                      map[string]int
	err                         error // what stopped the run (not a wrong result)
	firstWrong                  []string
	took                        time.Duration
}

func (r soakResult) String() string {
	return fmt.Sprintf("%d ops (%v; %d from graphs, %d in place), #wrong %d, %v", r.ops, r.byColl, r.graphs, r.inPlace, r.wrong, r.took.Round(time.Second))
}

// soakOp is one operation, the same on every rank.
type soakOp struct {
	coll    kernels.Coll
	dt      kernels.DType
	op      kernels.RedOp
	count   uint64 // per-rank elements (a reduce-scatter's recv, an all-gather's send)
	root    int
	inPlace bool
	replays int // 0: eager; else replays of a captured graph
}

var soakColls = []kernels.Coll{kernels.CollAllReduce, kernels.CollBroadcast, kernels.CollReduce,
	kernels.CollReduceScatter, kernels.CollAllGather, kernels.CollBarrier}

// nextOp draws operation k from the shared stream.
func nextOp(rng *mrand.Rand, n int, bufBytes uint64) soakOp {
	o := soakOp{coll: soakColls[rng.IntN(len(soakColls))], dt: kernels.DTypes[rng.IntN(len(kernels.DTypes))],
		op: kernels.RedOps[rng.IntN(len(kernels.RedOps))], root: rng.IntN(n), inPlace: rng.IntN(2) == 0}
	maxBytes := min(bufBytes, 1<<20)
	if rng.IntN(30) == 0 {
		maxBytes = bufBytes
	}
	if o.coll == kernels.CollReduceScatter || o.coll == kernels.CollAllGather {
		maxBytes /= uint64(n)
	}
	maxCount := max(1, maxBytes/uint64(o.dt.Size()))
	o.count = max(1, uint64(math.Exp(rng.Float64()*math.Log(float64(maxCount)))))
	if rng.IntN(3) == 0 {
		o.replays = 1
		if !o.inPlace {
			o.replays += rng.IntN(3)
		}
	}
	return o
}

// input is rank q's input of operation k: count elements.
func input(seed [32]byte, q, k int, dt kernels.DType, count uint64) []byte {
	var key [32]byte
	copy(key[:], seed[:])
	binary.LittleEndian.PutUint32(key[20:], 0x50414b) // "soak": not the rank-kill's stream
	binary.LittleEndian.PutUint32(key[24:], uint32(q))
	binary.LittleEndian.PutUint32(key[28:], uint32(k))
	rng := mrand.New(mrand.NewChaCha8(key))
	b := make([]byte, int(count)*dt.Size())
	for i := range int(count) {
		if dt.Kind() == kernels.Float {
			dt.PutBits(b, i, dt.FromFloat32(float32(rng.IntN(17)-8)))
		} else {
			dt.PutBits(b, i, rng.Uint64())
		}
	}
	return b
}

// reduce2 is a op b of type dt (exact: see the package comment above).
func reduce2(dt kernels.DType, op kernels.RedOp, a, b uint64) uint64 {
	switch dt.Kind() {
	case kernels.Float:
		x, y := dt.Float64(a), dt.Float64(b)
		switch op {
		case kernels.Min:
			x = math.Min(x, y)
		case kernels.Max:
			x = math.Max(x, y)
		default:
			x += y
		}
		return dt.FromFloat32(float32(x))
	case kernels.Signed:
		bits := uint(8 * dt.Size())
		sx, sy := int64(a<<(64-bits))>>(64-bits), int64(b<<(64-bits))>>(64-bits)
		switch op {
		case kernels.Min:
			sx = min(sx, sy)
		case kernels.Max:
			sx = max(sx, sy)
		default:
			sx += sy
		}
		return uint64(sx) & (1<<bits - 1)
	default:
		mask := ^uint64(0)
		if dt.Size() < 8 {
			mask = 1<<(8*uint(dt.Size())) - 1
		}
		switch op {
		case kernels.Min:
			return min(a, b)
		case kernels.Max:
			return max(a, b)
		}
		return (a + b) & mask
	}
}

// want is rank me's expected recv of operation k (nil: nothing to check).
func (o soakOp) want(seed [32]byte, k, me, n int) []byte {
	es := o.dt.Size()
	in := func(q int, count uint64) []byte { return input(seed, q, k, o.dt, count) }
	fold := func(count uint64, off int) []byte {
		out := make([]byte, int(count)*es)
		ins := make([][]byte, n)
		for q := range n {
			ins[q] = in(q, uint64(off)+count)
		}
		for i := range int(count) {
			acc := o.dt.Bits(ins[0], off+i)
			for q := 1; q < n; q++ {
				acc = reduce2(o.dt, o.op, acc, o.dt.Bits(ins[q], off+i))
			}
			o.dt.PutBits(out, i, acc)
		}
		return out
	}
	switch o.coll {
	case kernels.CollAllReduce:
		return fold(o.count, 0)
	case kernels.CollReduce:
		if me != o.root {
			return nil
		}
		return fold(o.count, 0)
	case kernels.CollBroadcast:
		return in(o.root, o.count)
	case kernels.CollReduceScatter:
		return fold(o.count, me*int(o.count))
	case kernels.CollAllGather:
		out := make([]byte, 0, n*int(o.count)*es)
		for q := range n {
			out = append(out, in(q, o.count)...)
		}
		return out
	}
	return nil
}

// soakRun is one rank's soak.
func soakRun(s soakSetup) (res soakResult) {
	start := time.Now()
	res.byColl = map[string]int{}
	defer func() { res.took = time.Since(start) }()
	d, rank, n := s.d, s.boot.Rank(), s.boot.Size()
	// The bring-up is bounded; the operations by the kernels' timeout
	// (Sync's default deadline).
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx := context.Background()
	pc, err := d.PrimaryCtxRetain(s.dev)
	if err != nil {
		res.err = err
		return res
	}
	defer func() { res.err = errors.Join(res.err, d.PrimaryCtxRelease(s.dev)) }()
	tm, err := team.NewRank(sctx, d, s.dev, s.boot, team.WithTransport(team.Unicast), team.WithWorkspaceSize(2*s.bufBytes+16<<20), team.WithLogger(s.log))
	if err != nil {
		res.err = err
		return res
	}
	defer func() { res.err = errors.Join(res.err, tm.Close()) }()
	comm, err := collectives.NewContext(sctx, tm)
	if err != nil {
		res.err = err
		return res
	}
	defer func() { res.err = errors.Join(res.err, comm.Close()) }()
	ss, err := collectives.NewStreams(tm)
	if err != nil {
		res.err = err
		return res
	}
	defer func() { res.err = errors.Join(res.err, ss.Close()) }()
	a, err1 := tm.Alloc(s.bufBytes)
	b, err2 := tm.Alloc(s.bufBytes)
	if res.err = errors.Join(err1, err2); res.err != nil {
		return res
	}
	streams := []cuda.Stream{ss.Stream(0)}
	shared := mrand.New(mrand.NewChaCha8(s.seed))
	onDev := func(fn func() error) error { return onCtx(d, pc, fn) }
	// What an out-of-place recv holds before the operation: a result
	// left unwritten shows.
	poison := make([]byte, s.bufBytes)
	for i := range poison {
		poison[i] = 0xa5
	}
	last := time.Now()
	for k := 0; s.ops == 0 || k < s.ops; k++ {
		if s.dur != 0 && k%32 == 0 {
			// The ranks stop together: each started its clock at its own
			// time, and a rank that began one more op than the others
			// would wait for them until the timeout (run 26).
			actx, acancel := context.WithTimeout(ctx, time.Minute)
			up, err := timeIsUp(actx, s.boot, time.Since(start) >= s.dur)
			acancel()
			if err != nil {
				res.err = fmt.Errorf("op %d: agreeing to stop: %w", k, err)
				return res
			}
			if up {
				break
			}
		}
		o := nextOp(shared, n, s.bufBytes)
		es := uint64(o.dt.Size())
		// The layout: send and recv, and where this rank's input goes.
		send, recv, inAt := a.Ptr(0), b.Ptr(0), a.Ptr(0)
		if o.inPlace {
			recv = a.Ptr(0)
			switch o.coll {
			case kernels.CollReduceScatter:
				recv = a.Ptr(0) + cuda.DevicePtr(uint64(rank)*o.count*es)
			case kernels.CollAllGather:
				send = a.Ptr(0) + cuda.DevicePtr(uint64(rank)*o.count*es)
				inAt = send
			}
		}
		inCount := o.count
		if o.coll == kernels.CollReduceScatter {
			inCount = uint64(n) * o.count
		}
		if o.coll != kernels.CollBarrier {
			in := input(s.seed, rank, k, o.dt, inCount)
			err := onDev(func() error {
				if !o.inPlace {
					if err := cuda.CopyHtoD(d, recv, poison[:min(uint64(len(poison)), uint64(n)*o.count*es)]); err != nil {
						return err
					}
				}
				if err := cuda.CopyHtoD(d, inAt, in); err != nil {
					return err
				}
				// From pageable memory the copy may return before its DMA
				// landed, and the collectives' stream (non-blocking) does
				// not wait for the legacy stream that carries it: without
				// this, a peer read the previous op's data about once in a
				// thousand ops on 4 x H200 (run 24).
				return d.CtxSynchronize()
			})
			if err != nil {
				res.err = fmt.Errorf("op %d: upload: %w", k, err)
				return res
			}
		}
		enqueue := func() error {
			sp, rp := []cuda.DevicePtr{send}, []cuda.DevicePtr{recv}
			switch o.coll {
			case kernels.CollAllReduce:
				return comm.AllReduce(ctx, sp, rp, o.count, o.dt, o.op, streams)
			case kernels.CollBroadcast:
				return comm.Broadcast(ctx, sp, rp, o.count, o.dt, o.root, streams)
			case kernels.CollReduce:
				return comm.Reduce(ctx, sp, rp, o.count, o.dt, o.op, o.root, streams)
			case kernels.CollReduceScatter:
				return comm.ReduceScatter(ctx, sp, rp, o.count, o.dt, o.op, streams)
			case kernels.CollAllGather:
				return comm.AllGather(ctx, sp, rp, o.count, o.dt, streams)
			}
			return comm.Barrier(ctx, streams)
		}
		if o.replays == 0 {
			err = enqueue()
		} else {
			var g *collectives.Graph
			if g, err = ss.Capture(enqueue); err == nil {
				for range o.replays {
					if err = g.Launch(ss); err != nil {
						break
					}
				}
				err = errors.Join(err, comm.Sync(ctx, streams), g.Close())
			}
			res.graphs++
		}
		if err == nil {
			err = comm.Sync(ctx, streams)
		}
		if err != nil {
			res.err = fmt.Errorf("op %d (%+v): %w", k, o, err)
			return res
		}
		res.ops++
		res.byColl[o.coll.String()]++
		if o.inPlace {
			res.inPlace++
		}
		if want := o.want(s.seed, k, rank, n); want != nil {
			got := make([]byte, len(want))
			if err := onDev(func() error { return cuda.CopyDtoH(d, got, recv) }); err != nil {
				res.err = fmt.Errorf("op %d: download: %w", k, err)
				return res
			}
			for i := range len(want) / int(es) {
				if o.dt.Bits(got, i) != o.dt.Bits(want, i) {
					res.wrong++
					if len(res.firstWrong) < 5 {
						res.firstWrong = append(res.firstWrong, fmt.Sprintf("op %d %v %v %v count %d root %d in place %v replays %d: element %d is %#x, want %#x",
							k, o.coll, o.dt, o.op, o.count, o.root, o.inPlace, o.replays, i, o.dt.Bits(got, i), o.dt.Bits(want, i)))
					}
					break
				}
			}
		}
		if s.progress != nil && time.Since(last) >= 30*time.Second {
			s.progress(res.String())
			last = time.Now()
		}
	}
	return res
}

// simRanks is a simulated node of n GPUs and the in-process bootstraps of
// n ranks, closed (and checked) when the test ends.
func simRanks(t *testing.T, n int) (*sim.Node, []team.Bootstrap) {
	t.Helper()
	node := simnode.New(sim.Config{Devices: n})
	require.NoError(t, node.Init())
	boots := team.NewInProcess(n)
	t.Cleanup(func() {
		for _, b := range boots {
			assert.NoError(t, b.Close())
		}
		assert.NoError(t, node.Close())
	})
	return node, boots
}

// timeIsUp reports whether any rank's time is up (mine is this rank's
// answer): every rank gets the same answer.
func timeIsUp(ctx context.Context, boot team.Bootstrap, mine bool) (bool, error) {
	b := []byte{0}
	if mine {
		b[0] = 1
	}
	all, err := boot.AllGather(ctx, b)
	if err != nil {
		return false, err
	}
	for _, a := range all {
		if len(a) == 1 && a[0] == 1 {
			return true, nil
		}
	}
	return false, nil
}

// TestSimSoak: the soak on the simulated node, 4 ranks in one process,
// 300 operations of up to 64 KiB.
func TestSimSoak(t *testing.T) {
	const ranks = 4
	node, boots := simRanks(t, ranks)
	var seed [32]byte
	_, err := rand.Read(seed[:])
	require.NoError(t, err)
	ops := 300
	if testing.Short() {
		ops = 100
	}
	results := make([]soakResult, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			results[r] = soakRun(soakSetup{d: node, dev: cuda.Device(r), boot: boots[r], seed: seed,
				bufBytes: 64 << 10, ops: ops, log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		})
	}
	wg.Wait()
	for r, res := range results {
		t.Logf("soak: rank %d: %v", r, res)
		require.NoError(t, res.err, "rank %d", r)
		assert.Equal(t, ops, res.ops)
		assert.Zero(t, res.wrong, "rank %d: %v", r, res.firstWrong)
		assert.Len(t, res.byColl, len(soakColls), "rank %d: every collective ran", r)
		assert.NotZero(t, res.graphs)
		assert.NotZero(t, res.inPlace)
	}
	assert.NoError(t, node.CheckNoLeaks())
}

// TestSimSoakStopsTogether: ranks whose clocks run out at different
// times (rank 0 first) stop after the same op, none waiting for the
// others' next collective.
func TestSimSoakStopsTogether(t *testing.T) {
	const ranks = 3
	node, boots := simRanks(t, ranks)
	var seed [32]byte
	_, err := rand.Read(seed[:])
	require.NoError(t, err)
	results := make([]soakResult, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			results[r] = soakRun(soakSetup{d: node, dev: cuda.Device(r), boot: boots[r], seed: seed,
				bufBytes: 16 << 10, dur: time.Duration(1+4*r) * 100 * time.Millisecond,
				log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		})
	}
	wg.Wait()
	for r, res := range results {
		require.NoError(t, res.err, "rank %d", r)
		assert.Equal(t, results[0].ops, res.ops, "rank %d", r)
		assert.Zero(t, res.wrong, "rank %d: %v", r, res.firstWrong)
	}
	assert.Less(t, results[ranks-1].took, 800*time.Millisecond+5*time.Second, "the last rank stopped with the first")
}
