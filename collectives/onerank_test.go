package collectives

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// TestOneRank: a team of one rank launches no kernel (oneRank, as NCCL's
// one-rank path): every collective of every size, on team buffers and on
// cuMemAlloc memory, is one cuMemcpyDtoDAsync out of place and nothing in
// place, a barrier nothing; the results match the reference on fresh
// random inputs (special values included: the copy keeps every bit), on
// both transports.
func TestOneRank(t *testing.T) {
	for _, tr := range []team.Transport{team.Unicast, team.Multicast} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: 1, transport: tr, dataBytes: 4 << 20, foreign: 2 << 20,
				opts: []Option{WithLLMax(256), WithOneShotMax(4 << 10), WithStageBytes(16 << 10)}})
			a, b := f.alloc(1<<20), f.alloc(1<<20)
			ops := []collOp{
				{coll: kernels.CollAllReduce, dt: F32, op: Sum},
				{coll: kernels.CollAllReduce, dt: BF16, op: Max},
				{coll: kernels.CollBroadcast, dt: U64},
				{coll: kernels.CollReduceScatter, dt: F16, op: Sum},
				{coll: kernels.CollAllGather, dt: U32},
				{coll: kernels.CollReduce, dt: S32, op: Min},
			}
			for _, o := range ops {
				for _, count := range []int{3, 200, 5000, 60000} { // LL, one-shot, two-shot, chunked
					o.count = count
					for _, m := range llModes {
						send, recv := f.ptrs(a), f.ptrs(b)
						if m.foreign {
							send[0], recv[0] = f.foreign[0], f.foreign[0]+(1<<20)
						}
						if m.shift {
							send[0] += cuda.DevicePtr(o.dt.Size())
							recv[0] += cuda.DevicePtr(o.dt.Size())
						}
						send, recv = o.layout(send, recv, m.inPlace)
						t.Run(fmt.Sprintf("%v %v %v %d %s", o.coll, o.dt, o.op, count, m.name), func(t *testing.T) {
							f.node.ResetCalls()
							runOneRank(t, f, o, send, recv)
							assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), "one rank launches no kernel")
							copies := 1
							if m.inPlace {
								copies = 0
							}
							assert.Len(t, f.node.CallsOf("cuMemcpyDtoDAsync"), copies)
						})
					}
				}
			}
			f.node.ResetCalls()
			require.NoError(t, f.c.Barrier(context.Background(), f.streams))
			f.sync()
			assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), "a barrier of one rank")
			assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "a barrier of one rank")
		})
	}
}

// runOneRank runs o with the reference's check; the all-reduce through
// runAllReduce, whose reference draws the special values.
func runOneRank(t *testing.T, f *fixture, o collOp, send, recv []cuda.DevicePtr) {
	rng := newRNG(t)
	if o.coll == kernels.CollAllReduce {
		runAllReduce(t, f, f.c, rng, send, recv, o.dt, o.op, o.count)
		return
	}
	runColl(t, f, f.c, rng, o, send, recv)
}

// TestOneRankGraph: a one-rank all-reduce out of place (a copy node) and in
// place (no node) captured into a graph replay right on fresh inputs.
func TestOneRankGraph(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 1, transport: team.Unicast})
	rng := newRNG(t)
	const count = 3000
	a, o := f.alloc(16<<10), f.alloc(16<<10)
	execs := f.capture(func() {
		require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(a), f.ptrs(o), count, F32, Sum, f.streams))
		require.NoError(t, f.c.AllReduce(context.Background(), f.ptrs(o), f.ptrs(o), count, F32, Max, f.streams))
		require.NoError(t, f.c.Barrier(context.Background(), f.streams))
	})
	for round := range 3 {
		in := [][]byte{input(rng, F32, count)}
		f.write(a.Ptr(0), in[0])
		require.NoError(t, f.node.GraphLaunch(execs[0], f.streams[0]))
		f.sync()
		msg, bad := checkAllReduce(F32, Sum, in, f.readAll(f.ptrs(o), count*4), count)
		require.Zero(t, bad, "round %d: %s", round, msg)
	}
}

// TestClosedTeamNotAnotherTeam: a Comm left open after its team was
// closed (a misuse) no longer makes memory at its old workspace addresses
// "another team's": the simulated nodes here reuse the addresses, as a
// driver may.
func TestClosedTeamNotAnotherTeam(t *testing.T) {
	cfg := fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 8 << 20, foreign: 16 << 10}
	nodeA := newSimNode(sim.Config{Devices: 2, MemoryPerDevice: 2*cfg.dataBytes + 2*cfg.foreign + 256<<20})
	tmA, err := team.New(context.Background(), nodeA, []cuda.Device{0, 1}, team.WithTransport(team.Unicast),
		team.WithWorkspaceSize(withRoom(t, 2, cfg.dataBytes)), team.WithLogger(quietLogger()))
	require.NoError(t, err)
	cA, err := New(tmA)
	require.NoError(t, err)
	f := newFixture(t, cfg)
	var inA []cuda.DevicePtr // the fixture's pointers that fall in A's workspaces
	for _, p := range append(f.foreign, f.ptrs(f.alloc(4096))...) {
		if slices.ContainsFunc(cA.regions, func(s span) bool { return s.contains(uint64(p)) }) {
			inA = append(inA, p)
		}
	}
	require.NotEmpty(t, inA, "the two nodes' addresses overlap")
	for _, p := range inA {
		require.True(t, f.c.otherTeam(uint64(p)), "%#x: team A is alive", uint64(p))
	}
	_ = tmA.Close() // before its Comm: the misuse
	for _, p := range inA {
		assert.False(t, f.c.otherTeam(uint64(p)), "%#x: team A is closed", uint64(p))
	}
	runAllReduce(t, f, f.c, newRNG(t), f.foreign, f.foreign, F32, Sum, 1000)
	_ = cA.Close()
}
