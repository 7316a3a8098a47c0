//go:build gpu

package kernels_test

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// gpuHostOff is where these tests point params.host_status: a word of the
// rank's own workspace, standing for the mapped host memory (collectives
// tests the real thing).
const gpuHostOff = kabi.SignalBytes + 512<<10

// gpuShape is kref.SmallLaunch of k on rank r of g, with the host's copy
// of the status word at gpuHostOff.
func gpuShape(t *testing.T, g *gpuTeam, k kernels.Kernel, r int) (grid, block uint32, p kabi.Params) {
	p = g.params(r)
	p.HostStatus = g.uc[r] + gpuHostOff
	grid, block, p, err := kref.SmallLaunch(k, p, gpuSend)
	require.NoError(t, err)
	return grid, block, p
}

// TestGPUAbortAtEntry: every kernel of the unicast flavor, launched alone
// on a rank whose team-failed word is set (20 s timeout, no peer), returns
// at once with its abort in the status word and the host's copy, having
// passed no barrier.
func TestGPUAbortAtEntry(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := newGPUTeam(t, lib, devs, 2, kabi.SignalBytes+1<<20)
	failed := kabi.FailedWord(kabi.TimeoutStatus(kernels.OpBroadcast, 1, 3), 1)
	for _, k := range kernels.Kernels(kernels.Unicast) {
		g.write(t, 0, 0, make([]byte, kabi.SignalBytes)) // a fresh signal area
		g.write(t, 0, kabi.FailedOffset, binary.LittleEndian.AppendUint64(nil, failed))
		g.write(t, 0, gpuHostOff, make([]byte, 8))
		grid, block, _ := gpuShape(t, g, k, 0)
		start := time.Now()
		g.launch(t, func(m *kabi.Module) cuda.Function {
			f, _ := m.Func(k)
			return f
		}, grid, block, []int{0}, func(r int) kabi.Params {
			_, _, p := gpuShape(t, g, k, r)
			p.TimeoutNs = uint64(20 * time.Second)
			return p
		})
		took := time.Since(start)
		phase := uint32(kabi.PhaseEntry)
		if k.Algo != kernels.LL {
			phase = 0 // the start barrier is the entry check
		}
		s := g.status(t, 0)
		host := binary.LittleEndian.Uint64(g.read(t, 0, gpuHostOff, 8))
		assert.Less(t, took, 2*time.Second, "%s returned at its timeout, not at entry", k.Name())
		assert.True(t, s.Aborted() && s.Phase() == phase && s.FailedRank() == 1 && s.Opcode() == k.Coll.Opcode(), "%s: %v", k.Name(), s)
		assert.Equal(t, s.Word, host, "%s: the host's copy", k.Name())
		assert.Zero(t, binary.LittleEndian.Uint32(g.read(t, 0, kabi.EpochOffset, 4)), "%s passed its start barrier", k.Name())
	}
}

// TestGPUFailureDrains: the last GPU never launches; rank 0's one-shot
// all-reduce times out after 200 ms, the others' (20 s timeout) give up
// on seeing the team failed, and an LL all-reduce launched afterwards on
// every rank returns at entry; every status keeps its first code.
func TestGPUFailureDrains(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+1<<20)
	var ranks []int
	for r := range g.n - 1 {
		ranks = append(ranks, r)
	}
	oneShot := kernels.Kernel{Coll: kernels.CollAllReduce, Algo: kernels.OneShot, DType: kernels.F32, Op: kernels.Sum}
	ll := kernels.Kernel{Coll: kernels.CollAllReduce, Algo: kernels.LL, DType: kernels.F32, Op: kernels.Sum}
	run := func(k kernels.Kernel, ranks []int) time.Duration {
		grid, block, _ := gpuShape(t, g, k, 0)
		start := time.Now()
		g.launch(t, func(m *kabi.Module) cuda.Function {
			f, _ := m.Func(k)
			return f
		}, grid, block, ranks, func(r int) kabi.Params {
			_, _, p := gpuShape(t, g, k, r)
			p.TimeoutNs = uint64(20 * time.Second)
			if r == 0 {
				p.TimeoutNs = uint64(200 * time.Millisecond)
			}
			return p
		})
		return time.Since(start)
	}
	took := run(oneShot, ranks)
	t.Logf("%d ranks waiting, the last absent: returned after %v", len(ranks), took)
	assert.Less(t, took, 2*time.Second, "the ranks waited for their own 20 s deadline")
	code := g.status(t, 0)
	require.True(t, code.TimedOut(), "rank 0: %v", code)
	for _, r := range ranks[1:] {
		s := g.status(t, r)
		assert.True(t, s.Aborted() && s.FailedRank() == 0 && s.Phase() == 0, "rank %d: %v", r, s)
	}
	took = run(ll, nil)
	t.Logf("an LL all-reduce behind the failure, on every rank: returned after %v", took)
	assert.Less(t, took, time.Second)
	assert.Equal(t, code, g.status(t, 0), "the first failure's code stays")
	last := g.status(t, g.n-1)
	assert.True(t, last.Aborted() && last.Phase() == kabi.PhaseEntry, "rank %d: %v", g.n-1, last)
}
