package collectives

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// capture records what enqueue enqueues on every rank's stream into one
// graph per rank and instantiates it.
func (f *fixture) capture(enqueue func()) []cuda.GraphExec {
	f.tb.Helper()
	return captureGraphs(f.tb, f.t, f.node, f.streams, enqueue)
}

// captureGraphs records what enqueue enqueues on team t's streams (one per
// local rank) into one graph per rank and instantiates it; the graphs go
// at once, the instances at cleanup.
func captureGraphs(tb testing.TB, t *team.Team, d cuda.Driver, streams []cuda.Stream, enqueue func()) []cuda.GraphExec {
	tb.Helper()
	require.NoError(tb, t.Run(team.JobFunc(func(l int) error {
		return d.StreamBeginCapture(streams[l], cuda.CaptureModeThreadLocal)
	})))
	enqueue()
	execs := make([]cuda.GraphExec, len(streams))
	require.NoError(tb, t.Run(team.JobFunc(func(l int) error {
		g, err := d.StreamEndCapture(streams[l])
		if err != nil {
			return err
		}
		defer func() { _ = d.GraphDestroy(g) }()
		execs[l], err = d.GraphInstantiate(g)
		return err
	})))
	tb.Cleanup(func() {
		for l, x := range execs {
			_ = onContext(d, t.Context(l), func() error { return d.GraphExecDestroy(x) })
		}
	})
	return execs
}

// TestGraphReplay captures two all-reduces per rank into a graph (one
// through the staging areas in chunks, both algorithms; one in place,
// one-shot with the stage) and replays it 10,000 times, with fresh inputs
// after every 500 replays: the device-side epochs keep every replay in
// step and every result right.
func TestGraphReplay(t *testing.T) {
	const (
		ranks  = 4
		batch  = 500
		countA = 1500 // u32: 6000 bytes, chunks of 4096 (two-shot) and 1904 (one-shot)
		countB = 900  // f16: 1800 bytes, one-shot in place
	)
	for _, tc := range []struct {
		tr      team.Transport
		replays int
	}{{team.Unicast, 10000}, {team.Multicast, 2000}} {
		tr, replays := tc.tr, tc.replays
		t.Run(tr.String(), func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: ranks, transport: tr, dataBytes: 1 << 20, foreign: 8192, opts: matrixOpts()})
			rng := newRNG(t)
			recvA, bufB := f.alloc(countA*4), f.alloc(countB*2)
			sendA := append([]cuda.DevicePtr(nil), f.foreign...)
			insA, insB := make([][]byte, ranks), make([][]byte, ranks)
			fresh := func() {
				for l := range ranks {
					insA[l], insB[l] = input(rng, U32, countA), input(rng, F16, countB)
					f.write(sendA[l], insA[l])
					f.write(bufB.Ptr(l), insB[l])
					f.write(recvA.Ptr(l), randomBytes(rng, countA*4))
				}
			}
			fresh()
			execs := f.capture(func() {
				require.NoError(t, f.c.AllReduce(context.Background(), sendA, f.ptrs(recvA), countA, U32, Sum, f.streams))
				require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(bufB), f.ptrs(bufB), countB, F16, Max, f.streams))
			})
			replay := team.JobFunc(func(l int) error {
				for range batch {
					if err := f.node.GraphLaunch(execs[l], f.streams[l]); err != nil {
						return err
					}
				}
				return nil
			})
			for done := 0; done < replays; done += batch {
				require.NoError(t, f.t.Run(replay))
				f.sync()
				gotA, gotB := make([][]byte, ranks), make([][]byte, ranks)
				for l := range ranks {
					gotA[l], gotB[l] = f.read(recvA.Ptr(l), countA*4), f.read(bufB.Ptr(l), countB*2)
				}
				msg, bad := checkAllReduce(U32, Sum, insA, gotA, countA)
				require.Zero(t, bad, "after %d replays: %s", done+batch, msg)
				msg, bad = checkAllReduce(F16, Max, insB, gotB, countB)
				require.Zero(t, bad, "after %d replays: %s", done+batch, msg)
				fresh()
			}
			t.Logf("%d replays (%v), results checked and inputs renewed every %d", replays, tr, batch)
		})
	}
}
