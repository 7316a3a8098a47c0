//go:build gpu

package kernels_test

// The GPU tests that pin what the simulator's tests cannot: nvls.h's
// wrap-safe barrier compare, the rank order of float sums (the GPU's
// result bit for bit against the simulator's on the same inputs) and the
// special values (NaN, ±0, ±Inf, subnormals, integer extremes) against
// the exact oracle. Run with several ranks on one GPU, e.g.
//
//	NVLS_GPU_VRANKS=4 ./kernels.test -test.run 'GPUBarrierWrapLateRank|GPURankOrderMatchesSim|GPUSpecialValues' -test.v

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
	"github.com/nvls-go/nvls/kernels/internal/simrun"
)

// seqStart is where setSlots puts every start-barrier sequence: the next
// one wraps (to 2, skipping a zeroed slot's 0).
const seqStart = 1<<32 - 1

// setSlots writes v into every end-barrier counter and epoch (phase 1),
// seqStart into every start-barrier sequence (phase 0's epoch slots), and
// clears the arrival words (a sequence set back must not find the words it
// left), on every rank.
func (g *gpuTeam) setSlots(t *testing.T, v uint32) {
	t.Helper()
	words := make([]byte, kabi.Phases*kabi.MaxBlocks*4)
	for i := 0; i < len(words); i += 4 {
		binary.LittleEndian.PutUint32(words[i:], v)
		if i < kabi.MaxBlocks*4 {
			binary.LittleEndian.PutUint32(words[i:], seqStart)
		}
	}
	for r := range g.n {
		g.write(t, r, kabi.CounterOffset, words)
		g.write(t, r, kabi.EpochOffset, words)
		g.write(t, r, kabi.ArriveOffset, make([]byte, 2*kabi.MaxBlocks*kabi.MaxRanks*8))
	}
}

// seqAfter is the start-barrier sequence after n start barriers from s.
func seqAfter(s uint32, n int) uint32 {
	for range n {
		if s++; s == 0 {
			s = 2
		}
	}
	return s
}

func (g *gpuTeam) u32(t *testing.T, r int, off uint64) uint32 {
	return binary.LittleEndian.Uint32(g.read(t, r, off, 4))
}

// busy reports whether rank r's stream still has work (cuStreamQuery).
func (g *gpuTeam) busy(t *testing.T, r int) bool {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, g.lib.CtxSetCurrent(g.ctxs[r]))
	err := g.lib.StreamQuery(g.streams[r])
	if errors.Is(err, cuda.ErrNotReady) {
		return true
	}
	require.NoError(t, err)
	return false
}

// writeOnStream copies b to offset off of rank r's workspace on r's
// stream: ordered before what r launches next, whatever the other
// streams are doing.
func (g *gpuTeam) writeOnStream(t *testing.T, r int, off uint64, b []byte) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, g.lib.CtxSetCurrent(g.ctxs[r]))
	require.NoError(t, g.lib.MemcpyHtoDAsync(cuda.DevicePtr(g.uc[r]+off), unsafe.Pointer(&b[0]), uint64(len(b)), g.streams[r]))
}

// TestGPUBarrierWrapLateRank is kernels/simkern's TestBarrierWrapLateRank
// on hardware, and the only test that checks nvls.h's wrap-safe compare:
// every counter and epoch starts at 2^32 - nranks, so that a barrier's
// target (epoch + nranks) wraps to 0 while the counter, until the last
// rank arrives, is at most 2^32 - 1; a compare that is not wrap-safe
// (got >= target) lets the early ranks through. The last rank launches
// late. The barrier kernel: the others' kernels are still waiting
// (cuStreamQuery: not ready) until it does. One-shot and two-shot
// all-reduces whose last rank's input is copied in (on its stream) just
// before it launches: every rank's result is the reduction of the inputs,
// so no rank read that buffer before the last rank arrived.
func TestGPUBarrierWrapLateRank(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+4<<20)
	start := uint32(1<<32 - uint64(g.n))
	last := g.n - 1
	var early []int
	for r := range last {
		early = append(early, r)
	}
	const hold = 300 * time.Millisecond

	g.setSlots(t, start)
	bar := func(r int) kabi.Params {
		p := g.params(r)
		p.Opcode = kernels.OpBarrier
		return p
	}
	g.enqueue(t, (*kabi.Module).Barrier, 1, 32, early, bar)
	time.Sleep(hold)
	for _, r := range early {
		assert.True(t, g.busy(t, r), "barrier: rank %d left the barrier at the wrap before the last rank arrived", r)
	}
	g.launch(t, (*kabi.Module).Barrier, 1, 32, []int{last}, bar)
	g.wait(t, early)
	for r := range g.n {
		require.Equal(t, "ok", g.status(t, r).String(), "rank %d", r)
		assert.Equal(t, seqAfter(seqStart, 1), g.u32(t, r, kabi.EpochOffset), "rank %d sequence [0][0] (2^32 - 1, then 2)", r)
	}

	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	grid := uint32(min(g.sms, 8))
	count := int(grid)*kabi.BlockThreads*4*g.n + 7 // f32: every block and every rank's slice has work, and a tail
	nbytes := 4 * count
	send := uint64(gpuSend)
	recv := send + uint64(nbytes+4095)/4096*4096
	require.LessOrEqual(t, recv+uint64(nbytes), g.size)
	for _, algo := range []kernels.Algo{kernels.OneShot, kernels.TwoShot} {
		g.setSlots(t, start)
		ins := make([][]byte, g.n)
		for r := range g.n {
			ins[r] = kref.Input(rng, kernels.F32, count)
			if r == last {
				g.write(t, r, send, kref.Bytes(rng, nbytes)) // not its input yet
			} else {
				g.write(t, r, send, ins[r])
			}
			g.write(t, r, recv, kref.Bytes(rng, nbytes))
		}
		fn := func(m *kabi.Module) cuda.Function {
			f, _ := m.AllReduce(algo, kernels.F32, kernels.Sum)
			return f
		}
		mk := func(r int) kabi.Params {
			p := g.params(r)
			p.Send, p.Recv, p.Count, p.ElemBytes, p.Opcode = send, recv, uint64(count), 4, kernels.OpAllReduce
			return p
		}
		g.enqueue(t, fn, grid, kabi.BlockThreads, early, mk)
		time.Sleep(hold)
		for _, r := range early {
			assert.True(t, g.busy(t, r), "%v: rank %d finished before the last rank arrived", algo, r)
		}
		g.writeOnStream(t, last, send, ins[last])
		g.launch(t, fn, grid, kabi.BlockThreads, []int{last}, mk)
		runtime.KeepAlive(ins[last])
		g.wait(t, early)
		for r := range g.n {
			require.Equal(t, "ok", g.status(t, r).String(), "%v rank %d", algo, r)
			bad, n := kref.CheckAllReduce(kernels.F32, kernels.Sum, ins, g.read(t, r, recv, nbytes), count, 3)
			assert.Zero(t, n, "%v rank %d: %d of %d elements wrong (read the last rank's input before it arrived?): %v", algo, r, n, count, bad)
		}
	}
}

// tally is what a comparison with the simulator covered.
type tally struct {
	runs, elems, orderSensitive int
	nans, negZeros, infs, subs  int
	vsSim, vsExact, simVsExact  int
}

func (c *tally) String() string {
	return fmt.Sprintf("%d all-reduces, %d elements (%d float sums whose result depends on the rank order); results with NaN %d, -0 %d, ±Inf %d, subnormal %d; elements differing GPU vs simulator %d, GPU vs exact oracle %d, simulator vs exact oracle %d",
		c.runs, c.elems, c.orderSensitive, c.nans, c.negZeros, c.infs, c.subs, c.vsSim, c.vsExact, c.simVsExact)
}

// compareWithSim runs ins through the GPU (in place or not) and through
// the simulator (simrun, out of place) and compares every rank's result
// with the simulator's and with kref.Exact, bit for bit (any NaN matches
// any NaN).
func (g *gpuTeam) compareWithSim(t *testing.T, rng kref.RNG, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, ins [][]byte, grid uint32, inPlace bool, c *tally) {
	t.Helper()
	count := len(ins[0]) / dt.Size()
	outs := g.run(t, rng, algo, dt, op, ins, grid, inPlace)
	sims, err := simrun.AllReduce(algo, dt, op, ins, grid)
	require.NoError(t, err)
	want := kref.Exact(dt, op, ins, count)
	c.runs++
	c.elems += count
	if op == kernels.Sum {
		c.orderSensitive += kref.Differing(dt, want, kref.Exact(dt, op, kref.Reversed(ins), count), count)
	}
	nans, negz, infs, subs := kref.Tally(dt, want, count)
	c.nans, c.negZeros, c.infs, c.subs = c.nans+nans, c.negZeros+negz, c.infs+infs, c.subs+subs
	for r := range g.n {
		if n := kref.Differing(dt, outs[r], sims[r], count); n > 0 {
			c.vsSim += n
			for i := range count {
				if kref.Differing(dt, outs[r][i*dt.Size():], sims[r][i*dt.Size():], 1) > 0 {
					t.Errorf("%v %v %v count %d rank %d: %d elements differ from the simulator's; first: element %d: GPU %s, simulator %s", algo, dt, op, count, r, n, i, kref.Format(dt, outs[r], i), kref.Format(dt, sims[r], i))
					break
				}
			}
		}
		bad, n := kref.CheckExact(dt, op, ins, outs[r], count, 3)
		c.vsExact += n
		for _, m := range bad {
			t.Errorf("%v %v %v count %d rank %d: GPU vs exact oracle: %v", algo, dt, op, count, r, m)
		}
		_, n = kref.CheckExact(dt, op, ins, sims[r], count, 0)
		c.simVsExact += n
	}
}

// everyCase runs fn as a subtest for every element type, operator,
// algorithm and size class (count: the size class's element count).
func (g *gpuTeam) everyCase(t *testing.T, fn func(t *testing.T, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, sc kref.SizeCase, count int)) {
	for _, dt := range kernels.DTypes {
		for _, op := range kernels.RedOps {
			for _, algo := range kernels.Algos {
				for _, sc := range kref.SizeCases {
					count := sc.Count(kabi.VecBytes/dt.Size(), g.n)
					t.Run(fmt.Sprintf("%v/%v_%v/%s", algo, dt, op, sc.Name), func(t *testing.T) {
						fn(t, algo, dt, op, sc, count)
					})
				}
			}
		}
	}
}

// TestGPURankOrderMatchesSim runs the same random inputs through the
// unicast kernels on the GPU and through the simulator's kernels (on a
// simulated node of as many ranks) and compares every rank's result bit
// for bit, and with the exact oracle. Float sums get order-sensitive
// inputs (kref.Cancelling: nearly every element's sum depends on the rank
// order, from 3 ranks on), which pins the simulator's order to the
// hardware's; every type and operator also gets kref.Input's values. It
// logs the counts.
func TestGPURankOrderMatchesSim(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+1<<20)
	rng, seed := kref.NewRNG()
	t.Logf("seed %d, %d ranks", seed, g.n)
	var c tally
	g.everyCase(t, func(t *testing.T, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, sc kref.SizeCase, count int) {
		if op == kernels.Sum {
			g.compareWithSim(t, rng, algo, dt, op, kref.Cancelling(rng, dt, g.n, count), sc.Grid, sc.InPlace, &c)
		}
		ins := make([][]byte, g.n)
		for r := range ins {
			ins[r] = kref.Input(rng, dt, count)
		}
		g.compareWithSim(t, rng, algo, dt, op, ins, sc.Grid, sc.InPlace, &c)
	})
	t.Logf("%d ranks: %v", g.n, &c)
	if g.n >= 3 {
		assert.Greater(t, c.orderSensitive, 0, "no order-sensitive sums: the rank order was not tested")
	}
}

// TestGPUSpecialValues checks the unicast kernels on inputs full of NaN,
// ±0, ±Inf, subnormals and integer extremes (kref.Special) against the
// exact oracle (IEEE f32 sums in rank order rounded once; PTX min/max: a
// NaN operand yields the other, -0 < +0; wrapping integers) and against
// the simulator, bit for bit (any NaN matches any NaN), every type,
// operator, algorithm and size class. It logs the counts.
func TestGPUSpecialValues(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+1<<20)
	rng, seed := kref.NewRNG()
	t.Logf("seed %d, %d ranks", seed, g.n)
	var c tally
	g.everyCase(t, func(t *testing.T, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, sc kref.SizeCase, count int) {
		g.compareWithSim(t, rng, algo, dt, op, kref.Special(rng, dt, g.n, count), sc.Grid, sc.InPlace, &c)
	})
	t.Logf("%d ranks: %v", g.n, &c)
	assert.Greater(t, c.nans, 0)
	assert.Greater(t, c.negZeros, 0)
}
