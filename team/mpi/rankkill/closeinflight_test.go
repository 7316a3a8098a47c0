//go:build mpi

package rankkill

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Close while work is in flight (issue 24 item 3): every rank enqueues a
// run of all-reduces and a replay of a graph of them, then closes at
// once (graph, Comm, stream, team), without Sync. By Comm.Close's
// contract it waits for the stream of the rank's last launch (the
// replay's) as long as Sync would, then frees: Close returns nil, in
// about the time the work takes, and nothing is held after it. With a
// straggler (the last rank enqueues nothing and closes at once) the
// others' kernels give up at the kernels' timeout: their Close returns
// nil after about that long, and nothing is held either.

// inflightResult is what one rank saw.
type inflightResult struct {
	rank     int
	dev      cuda.Device
	setupErr error
	// closeErr and closeTook: the Close right after the enqueue.
	closeErr  error
	closeTook time.Duration
	// before and after: cuMemGetInfo free bytes after the warm-up cycle
	// and once every rank closed; memErr says why they could not be read.
	before, after uint64
	memErr        error
	live          string
}

// inflightEager is how many all-reduces each rank enqueues before the
// replay.
const inflightEager = 50

// closeInFlight is one rank's run: s.graph must be set (the replay).
func closeInFlight(s killSetup, straggler bool) (res inflightResult) {
	rank := s.boot.Rank()
	cd := newCountDriver(s.d)
	d := cuda.Driver(cd)
	res.rank, res.dev = rank, s.dev
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pc, err := d.PrimaryCtxRetain(s.dev)
	if err != nil {
		res.setupErr = err
		return res
	}
	defer func() { res.setupErr = errors.Join(res.setupErr, d.PrimaryCtxRelease(s.dev)) }()
	if s.warm > 0 {
		if err := warmUp(ctx, s, d, pc, rank); err != nil {
			res.setupErr = fmt.Errorf("warm-up cycle: %w", err)
			return res
		}
	}
	if res.before, res.memErr = freeMem(d, pc); res.memErr != nil {
		return res
	}
	r, err := openRig(ctx, s, d, pc)
	if err != nil {
		res.setupErr = err
		return res
	}
	if err := s.boot.Barrier(ctx); err != nil {
		res.setupErr = errors.Join(err, r.close())
		return res
	}
	if !(straggler && rank == s.boot.Size()-1) {
		// Eager all-reduces of both sizes first, then the replay.
		g := r.g
		r.g, r.s.graph = nil, false
		for i := range inflightEager {
			if err := r.launch(ctx, rank, i); err != nil {
				r.g = g
				res.setupErr = errors.Join(fmt.Errorf("enqueueing: %w", err), r.close())
				return res
			}
		}
		r.g, r.s.graph = g, true
		if err := r.g.Launch(r.ss); err != nil {
			res.setupErr = errors.Join(fmt.Errorf("replaying: %w", err), r.close())
			return res
		}
	}
	start := time.Now()
	res.closeErr = r.close()
	res.closeTook = time.Since(start)
	res.live = cd.Live()
	// Every rank closed (so none maps another's memory any more).
	if err := s.boot.Barrier(ctx); err != nil {
		res.memErr = err
		return res
	}
	res.after, res.memErr = freeMem(d, pc)
	return res
}

// report is the result in one line.
func (res inflightResult) report(s killSetup, straggler bool) string {
	mode := "every rank"
	if straggler {
		mode = fmt.Sprintf("rank %d enqueues nothing", s.boot.Size()-1)
	}
	return fmt.Sprintf("closeinflight: rank %d (device %d, %s): Close after %d all-reduces and a replay of %d, no Sync: %v after %v (limit %v); cuMemGetInfo free %+d bytes (want >= -2 MiB: the driver's own); driver objects held after Close: %s",
		res.rank, res.dev, mode, inflightEager, s.graphLen, res.closeErr, res.closeTook.Round(time.Millisecond), closeLimit(s),
		int64(res.after)-int64(res.before), res.live)
}

// closeLimit bounds Close: the work drains within the kernels' timeout
// (a straggler's peers give up then), and Close waits at most as long as
// Sync would (the timeout plus up to a second); slack for a loaded host.
func closeLimit(s killSetup) time.Duration {
	return 2*s.kernelTimeout + s.slack
}

func checkInFlight(t *testing.T, s killSetup, res inflightResult) {
	t.Helper()
	require.NoError(t, res.setupErr, "rank %d", res.rank)
	assert.NoError(t, res.closeErr, "rank %d: Close with work in flight", res.rank)
	assert.Less(t, res.closeTook, closeLimit(s), "rank %d: Close returned in time", res.rank)
	assert.Equal(t, "nothing", res.live, "rank %d: driver objects still held after Close", res.rank)
	require.NoError(t, res.memErr, "rank %d", res.rank)
	checkFreeMem(t, res.rank, res.dev, res.before, res.after)
}

// TestSimCloseInFlight: the run on the simulated node, the ranks
// goroutines of one process.
func TestSimCloseInFlight(t *testing.T) {
	for _, straggler := range []bool{false, true} {
		t.Run(fmt.Sprintf("straggler=%v", straggler), func(t *testing.T) {
			const ranks = 4
			node := simnode.New(sim.Config{Devices: ranks})
			defer func() { assert.NoError(t, node.Close()) }()
			require.NoError(t, node.Init())
			fds, err := fdtest.Take()
			require.NoError(t, err)
			boots := team.NewInProcess(ranks)
			defer func() {
				for _, b := range boots {
					assert.NoError(t, b.Close())
				}
			}()
			var seed [32]byte
			_, err = rand.Read(seed[:])
			require.NoError(t, err)
			setups := make([]killSetup, ranks)
			results := make([]inflightResult, ranks)
			var wg sync.WaitGroup
			for r := range ranks {
				setups[r] = killSetup{d: node, dev: cuda.Device(r), boot: boots[r], seed: seed,
					kernelTimeout: 300 * time.Millisecond, slack: 3 * time.Second, counts: []uint64{1 << 10, 24 << 10},
					graph: true, graphLen: 3, warm: 2, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
				wg.Go(func() { results[r] = closeInFlight(setups[r], straggler) })
			}
			wg.Wait()
			for r := range ranks {
				t.Log(results[r].report(setups[r], straggler))
				checkInFlight(t, setups[r], results[r])
			}
			fds.NoneAdded(t, "after every rank closed")
			assert.NoError(t, node.CheckNoLeaks())
		})
	}
}
