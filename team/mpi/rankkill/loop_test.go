//go:build mpi

package rankkill

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The loop of the team variants (TestGPURankKill on GPUs under mpirun,
// TestSimRankKill on the simulated node in one process): a unicast team of
// one rank per device (team.NewRank), checked all-reduces through package
// collectives until the victim is gone, then the survivor's error, the
// team's broken state, Close and cuMemGetInfo.

// killSetup is one rank's part in a team variant.
type killSetup struct {
	d    cuda.Driver
	dev  cuda.Device
	boot team.Bootstrap
	plan Plan
	// seed is rank 0's, the same on every rank: every rank computes every
	// rank's inputs from it.
	seed [32]byte
	// kernelTimeout is the kernels' barrier deadline (collectives.WithTimeout).
	kernelTimeout time.Duration
	// slack is how much later than kernelTimeout after the kill a
	// survivor's error may come (Sync's polling, a loaded host).
	slack time.Duration
	// counts are the all-reduce sizes (uint32 elements), taken in turn.
	counts []uint64
	// graph: each iteration replays a graph of graphLen all-reduces of
	// the largest count instead of one eager all-reduce, and the victim
	// dies with its replay of iteration After launched (in flight).
	graph    bool
	graphLen int
	// warm is the iterations of a first, clean cycle (team, Comm, graph,
	// all-reduces, Close, on every rank) before free memory is read: the
	// driver grows a context's own memory lazily (module and launch
	// resources, page tables of peer mappings, graph upload pools) and
	// keeps it until the context goes, which the test's own reference
	// keeps alive; after a clean cycle, a byte missing is ours.
	warm int
	log  *slog.Logger
}

// killResult is what a rank saw; the test goroutine checks it
// (checkSurvivor), since the ranks may run on goroutines of their own.
type killResult struct {
	rank int
	dev  cuda.Device
	// setupErr: the bring-up failed (nothing else is set).
	setupErr error
	o        Outcome
	// later is a collective called after the failure; teamErr the team's
	// error then.
	later, teamErr error
	// closeErr: closing the graph, the Comm, the stream and the team.
	closeErr error
	// warmBefore is cuMemGetInfo's free bytes before the warm-up cycle,
	// before and after those before the team of the kill and after Close;
	// memErr says why they could not be read.
	warmBefore, before, after uint64
	memErr                    error
	// live is what the counting driver says this rank still holds after
	// Close ("nothing"), held its count.
	live string
	held int
	// leftOpen closes what the victim left open (a process that dies
	// leaves nothing; a goroutine that stops leaves its team).
	leftOpen func() error
}

// rig is one rank's team, Comm, buffers and stream (and graph).
type rig struct {
	s          killSetup
	d          cuda.Driver
	pc         cuda.Context
	tm         *team.Team
	comm       *collectives.Comm
	send, recv team.Buffer
	stream     cuda.Stream
	ss         *collectives.Streams
	g          *collectives.Graph
	host       []byte
}

// openRig brings up a rank's team and Comm, its buffers and stream, and
// captures the graph in graph mode. On failure it closes what it opened.
func openRig(ctx context.Context, s killSetup, d cuda.Driver, pc cuda.Context) (*rig, error) {
	r := &rig{s: s, d: d, pc: pc}
	tm, err := team.NewRank(ctx, d, s.dev, s.boot, team.WithTransport(team.Unicast), team.WithWorkspaceSize(32<<20), team.WithLogger(s.log))
	if err != nil {
		return nil, err
	}
	r.tm = tm
	if tm.Transport() != team.Unicast {
		return nil, errors.Join(fmt.Errorf("transport %v, want unicast", tm.Transport()), r.close())
	}
	if r.comm, err = collectives.New(tm, collectives.WithTimeout(s.kernelTimeout)); err != nil {
		return nil, errors.Join(err, r.close())
	}
	maxCount := s.counts[len(s.counts)-1]
	var err1, err2 error
	r.send, err1 = tm.Alloc(4 * maxCount)
	r.recv, err2 = tm.Alloc(4 * maxCount)
	err3 := onCtx(d, pc, func() (err error) {
		r.stream, err = d.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, errors.Join(err, r.close())
	}
	if r.ss, err = collectives.WrapStreams(tm, []cuda.Stream{r.stream}); err != nil {
		return nil, errors.Join(err, r.close())
	}
	r.host = make([]byte, 4*maxCount)
	if s.graph {
		r.g, err = r.ss.Capture(func() error {
			for range s.graphLen {
				if err := r.comm.AllReduce(ctx, []cuda.DevicePtr{r.send.Ptr(0)}, []cuda.DevicePtr{r.recv.Ptr(0)}, maxCount, collectives.U32, collectives.Sum, r.streams()); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, errors.Join(err, r.close())
		}
	}
	return r, nil
}

func (r *rig) streams() []cuda.Stream { return []cuda.Stream{r.stream} }

// count is iteration i's all-reduce size.
func (r *rig) count(i int) uint64 {
	if r.s.graph {
		return r.s.counts[len(r.s.counts)-1]
	}
	return r.s.counts[i%len(r.s.counts)]
}

// launch uploads this rank's input of iteration i and enqueues its
// all-reduce (or replays the graph), without waiting.
func (r *rig) launch(ctx context.Context, rank, i int) error {
	count := r.count(i)
	b := r.host[:4*count]
	for k, v := range values(r.s.seed, rank, i, count) {
		binary.LittleEndian.PutUint32(b[4*k:], v)
	}
	// A synchronous copy: done before the all-reduce is enqueued.
	if err := onCtx(r.d, r.pc, func() error {
		if err := cuda.CopyHtoD(r.d, r.send.Ptr(0), b); err != nil {
			return err
		}
		return r.d.CtxSynchronize() // the DMA from pageable memory has landed (cuda.CopyHtoD)
	}); err != nil {
		return fmt.Errorf("iteration %d: upload: %w", i, err)
	}
	if r.g != nil {
		return r.g.Launch(r.ss)
	}
	return r.comm.AllReduce(ctx, []cuda.DevicePtr{r.send.Ptr(0)}, []cuda.DevicePtr{r.recv.Ptr(0)}, count, collectives.U32, collectives.Sum, r.streams())
}

// step is one checked iteration: launch, Sync, download, compare with the
// sum of every rank's input.
func (r *rig) step(ctx context.Context, rank, i int) error {
	if err := r.launch(ctx, rank, i); err != nil {
		return err
	}
	if err := r.comm.Sync(ctx, r.streams()); err != nil {
		return err
	}
	count := r.count(i)
	b := r.host[:4*count]
	if err := onCtx(r.d, r.pc, func() error { return cuda.CopyDtoH(r.d, b, r.recv.Ptr(0)) }); err != nil {
		return fmt.Errorf("iteration %d: download: %w", i, err)
	}
	want := make([]uint32, count)
	for q := range r.s.boot.Size() {
		for k, v := range values(r.s.seed, q, i, count) {
			want[k] += v // wraps, as the device's u32 sums do
		}
	}
	for k := range want {
		if got := binary.LittleEndian.Uint32(b[4*k:]); got != want[k] {
			return fmt.Errorf("iteration %d (%d elements): element %d is %d, want %d: %w", i, count, k, got, want[k], errWrong)
		}
	}
	return nil
}

// close closes the graph, the Comm, the stream and the team: the Comm
// first, which waits for work no Sync saw finish.
func (r *rig) close() error {
	var err error
	if r.g != nil {
		err = r.g.Close()
	}
	if r.comm != nil {
		err = errors.Join(err, r.comm.Close())
	}
	if r.stream != 0 {
		err = errors.Join(err, onCtx(r.d, r.pc, func() error { return r.d.StreamDestroy(r.stream) }))
	}
	if r.tm != nil {
		err = errors.Join(err, r.tm.Close())
	}
	return err
}

// values is rank r's input of iteration i, from the shared seed.
func values(seed [32]byte, r, i int, count uint64) []uint32 {
	var key [32]byte
	copy(key[:], seed[:])
	binary.LittleEndian.PutUint32(key[24:], uint32(r))
	binary.LittleEndian.PutUint32(key[28:], uint32(i))
	rng := mrand.New(mrand.NewChaCha8(key))
	out := make([]uint32, count)
	for k := range out {
		out[k] = rng.Uint32()
	}
	return out
}

// errWrong marks a wrong all-reduce result (as opposed to the timeout the
// test expects).
var errWrong = errors.New("wrong all-reduce result")

// onCtx runs fn on a locked thread with c current.
func onCtx(d cuda.Driver, c cuda.Context, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.CtxSetCurrent(c); err != nil {
		return err
	}
	err := fn()
	return errors.Join(err, d.CtxSetCurrent(0))
}

// freeMem is cuMemGetInfo's free bytes on the device of c.
func freeMem(d cuda.Driver, c cuda.Context) (free uint64, err error) {
	err = onCtx(d, c, func() (err error) {
		free, _, err = d.MemGetInfo()
		return err
	})
	return free, err
}

// killRun is one rank's run of a team variant.
func killRun(s killSetup) (res killResult) {
	rank := s.boot.Rank()
	cd := newCountDriver(s.d)
	d := cuda.Driver(cd)
	res.rank, res.dev = rank, s.dev
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A reference of our own to the primary context, so that the team's
	// retain and release neither create nor destroy it between the
	// readings of cuMemGetInfo.
	pc, err := d.PrimaryCtxRetain(s.dev)
	if err != nil {
		res.setupErr = err
		return res
	}
	release := func() error { return d.PrimaryCtxRelease(s.dev) }
	defer func() {
		if res.leftOpen == nil {
			res.closeErr = errors.Join(res.closeErr, release())
		}
	}()
	if res.warmBefore, res.memErr = freeMem(d, pc); res.memErr != nil {
		res.setupErr = res.memErr
		return res
	}
	if s.warm > 0 {
		if err := warmUp(ctx, s, d, pc, rank); err != nil {
			res.setupErr = fmt.Errorf("warm-up cycle: %w", err)
			return res
		}
	}
	if res.before, res.memErr = freeMem(d, pc); res.memErr != nil {
		res.setupErr = res.memErr
		return res
	}
	r, err := openRig(ctx, s, d, pc)
	if err != nil {
		res.setupErr = err
		return res
	}
	// Every rank is set up before the first collective.
	if err := s.boot.Barrier(ctx); err != nil {
		res.setupErr = errors.Join(err, r.close())
		return res
	}
	plan := s.plan
	if s.graph {
		// The victim dies with its replay launched and still running.
		plan.last = func(i int) {
			if err := r.launch(ctx, rank, i); err != nil {
				s.log.Error("rankkill: the victim's last launch", "err", err)
			}
		}
	}
	res.o = plan.Run(context.Background(), rank, func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, 3*s.kernelTimeout)
		defer cancel()
		return r.step(ctx, rank, i)
	})
	if errors.Is(res.o.Err, ErrVictim) {
		res.leftOpen = func() error { return errors.Join(r.close(), release()) }
		return res
	}
	res.later = r.comm.AllReduce(ctx, []cuda.DevicePtr{r.send.Ptr(0)}, []cuda.DevicePtr{r.recv.Ptr(0)}, 1024, collectives.U32, collectives.Sum, r.streams())
	res.teamErr = r.tm.Err()
	// Close frees everything: the graph, the kernels, the stream, the
	// workspace and the mappings of every peer's (the dead one's included).
	res.closeErr = r.close()
	res.live, res.held = cd.Live(), cd.Held()
	// A survivor's memory is free only once every other survivor has
	// unmapped it too.
	if err := s.plan.Meet("closed", rank, s.boot.Size(), 30*time.Second); err != nil {
		res.memErr = err
		return res
	}
	res.after, res.memErr = freeMem(d, pc)
	return res
}

// warmUp is the clean cycle before the kill's: every rank brings up a
// rig, runs s.warm checked iterations, closes, and waits for the others
// to have closed (their mappings of its memory gone).
func warmUp(ctx context.Context, s killSetup, d cuda.Driver, pc cuda.Context, rank int) error {
	r, err := openRig(ctx, s, d, pc)
	if err != nil {
		return err
	}
	if err := s.boot.Barrier(ctx); err != nil {
		return errors.Join(err, r.close())
	}
	for i := range s.warm {
		sctx, cancel := context.WithTimeout(ctx, 3*s.kernelTimeout)
		err := r.step(sctx, rank, i)
		cancel()
		if err != nil {
			return errors.Join(fmt.Errorf("iteration %d: %w", i, err), r.close())
		}
	}
	if err := r.close(); err != nil {
		return err
	}
	return s.boot.Barrier(ctx)
}

// report is a survivor's result in one line: the time from the kill to
// its error against the limit, the memory figures and what it held after
// Close.
func (res killResult) report(s killSetup) string {
	mode := "eager"
	if s.graph {
		mode = fmt.Sprintf("graph of %d all-reduces", s.graphLen)
	}
	return fmt.Sprintf("rankkill: rank %d (device %d, %s): %d iterations, error %v after the kill (limit %v); cuMemGetInfo free: warm-up cycle %+d bytes (not checked), kill cycle %+d bytes (want >= -2 MiB: the driver's own); driver objects held after Close: %s",
		res.rank, res.dev, mode, res.o.Iterations, res.o.SinceKill().Round(time.Millisecond), s.kernelTimeout+s.slack,
		int64(res.before)-int64(res.warmBefore), int64(res.after)-int64(res.before), res.live)
}

// checkSurvivor checks a survivor's result: every iteration before the
// kill right, none after; the kernel's barrier timed out after about the
// kernel timeout, naming this rank; the team broken with that error;
// Close clean and, once every survivor closed, cuMemGetInfo back where it
// was.
func checkSurvivor(t *testing.T, s killSetup, res killResult) {
	t.Helper()
	require.NoError(t, res.setupErr, "rank %d: setup", res.rank)
	o := res.o
	require.NoError(t, o.KillErr, "rank %d", res.rank)
	assert.NotErrorIs(t, o.Err, errWrong, "rank %d: every result before the kill is right", res.rank)
	if s.graph {
		// The replay the victim launched before it died may have finished
		// on every GPU before the driver tore its context down (on the
		// simulated node it always does: a stopped goroutine's device runs
		// on); the next one cannot.
		assert.Contains(t, []int{s.plan.After, s.plan.After + 1}, o.Iterations, "rank %d: every replay before the kill completes, none after the one in flight", res.rank)
	} else {
		assert.Equal(t, s.plan.After, o.Iterations, "rank %d: every iteration before the kill completes, none after", res.rank)
	}
	// Its own barrier timed out, or (where the survivors see each other's
	// status, as ranks of one process do) it gave up at once on another
	// survivor's timeout: either names this rank and its device.
	var te *collectives.TimeoutError
	var ae *collectives.AbortError
	switch {
	case errors.As(o.Err, &te):
		assert.Equal(t, res.rank, te.Rank)
		assert.Equal(t, res.dev, te.Device)
	case errors.As(o.Err, &ae):
		assert.Equal(t, res.rank, ae.Rank)
		assert.Equal(t, res.dev, ae.Device)
		assert.NotEqual(t, res.rank, ae.FailedRank, "rank %d: the failure it found was another's", res.rank)
	default:
		t.Errorf("rank %d: the kernel's barrier timed out or gave up on a peer's timeout: %v", res.rank, o.Err)
	}
	assert.ErrorIs(t, o.Err, collectives.ErrTimeout)
	assert.ErrorIs(t, o.Err, team.ErrBroken)
	assert.GreaterOrEqual(t, o.SinceKill(), s.kernelTimeout/2, "rank %d: the device-side deadline, not something sooner", res.rank)
	assert.Less(t, o.SinceKill(), s.kernelTimeout+s.slack, "rank %d: within the deadline (plus %v: Sync's polling, a loaded host)", res.rank, s.slack)
	assert.ErrorIs(t, res.later, team.ErrBroken, "rank %d: later calls fail", res.rank)
	assert.ErrorIs(t, res.later, collectives.ErrTimeout, "rank %d: with the same error", res.rank)
	assert.ErrorIs(t, res.teamErr, collectives.ErrTimeout)
	assert.NoError(t, res.closeErr, "rank %d: Close", res.rank)
	require.NoError(t, res.memErr)
	assert.Equal(t, "nothing", res.live, "rank %d: driver objects still held after Close", res.rank)
	checkFreeMem(t, res.rank, res.dev, res.before, res.after)
}

// checkFreeMem is the second leak check, after "nothing held":
// cuMemGetInfo's free bytes after Close may be at most one 2 MiB page
// below before (after a warm-up cycle, where the driver grows its own
// per-context memory, 8-10 MiB on 4 x H100). Run 23 (4 x H100,
// 2026-11-27) saw every survivor of a rank kill, and run 24a every rank
// of Close in flight, lose exactly 2 MiB with no object held and no
// descriptor open: the driver's own; a real leak (a workspace, a staging
// area) is tens of MiB and shows as a held object first.
func checkFreeMem(t *testing.T, rank int, dev cuda.Device, before, after uint64) {
	t.Helper()
	const driverPage = 2 << 20
	assert.LessOrEqual(t, int64(before)-int64(after), int64(driverPage), "rank %d (device %d): cuMemGetInfo free before the team %d, after Close %d", rank, dev, before, after)
}
