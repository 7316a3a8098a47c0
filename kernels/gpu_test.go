//go:build gpu

package kernels_test

// The kernels on real GPUs, unicast flavor only, against the same oracle
// as the simulator tests (kernels/internal/kref). Build and run on a GPU
// machine, with the generated PTX embedded (committed ptx/) or named by
// NVLS_PTX_DIR:
//
//	go test -c -tags gpu -o .devbin/kernels.test ./kernels
//	NVLS_PTX_DIR=$PWD/ptx ./.devbin/kernels.test -test.v -test.run GPU
//
// No cuMulticast* entry point is called here (multicast on a shared
// NVSwitch fabric can take the host down): the workspace is built with the
// VMM calls alone, one allocation per GPU mapped once in the unified
// address space and made accessible to every GPU of the team. The tests
// skip without a driver, with fewer than two GPUs, or without peer access
// between them.

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/gputest"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
	"github.com/nvls-go/nvls/ptx"
)

var (
	soakRuns = flag.Int("soak", 2000, "TestGPUSoak: number of random all-reduces")
	soakFor  = flag.Duration("soak-for", 0, "TestGPUSoak: stop after this long even if -soak runs are not done (0: no limit)")
)

const (
	gpuSend  = kabi.SignalBytes
	gpuGuard = 64
)

// gpuTeam is a unicast team of the first n GPUs, built by hand.
type gpuTeam struct {
	t       testing.TB
	lib     *cuda.Lib
	n       int
	devs    []cuda.Device
	ctxs    []cuda.Context
	streams []cuda.Stream
	mods    []*kabi.Module
	uc      []uint64
	size    uint64
	sms     int
	// flags are added to every launch's params (kabi.FlagOnePass).
	flags uint32
}

// gpuDevices returns the driver and its GPUs, or skips.
func gpuDevices(t testing.TB, need int) (*cuda.Lib, []cuda.Device) {
	t.Helper()
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	devs, _ := gputest.Devices(t, lib, need, kabi.MaxRanks)
	for _, a := range devs {
		for _, b := range devs {
			if a != b {
				ok, err := lib.DeviceCanAccessPeer(a, b)
				require.NoError(t, err)
				if !ok {
					t.Skipf("GPU %d cannot access GPU %d", a, b)
				}
			}
		}
	}
	return lib, devs
}

// newGPUTeam builds a team of the first n of devs with size bytes of
// workspace each (rounded up to the granularity), the signal area zeroed.
// The calling goroutine must be locked to its thread.
func newGPUTeam(t testing.TB, lib *cuda.Lib, devs []cuda.Device, n int, size uint64) *gpuTeam {
	t.Helper()
	g := &gpuTeam{t: t, lib: lib, n: n, devs: devs[:n]}
	t.Cleanup(g.close)
	prop := cuda.DeviceAllocationProp(devs[0], cuda.HandleNone)
	gran, err := lib.MemGetAllocationGranularity(&prop, cuda.GranularityRecommended)
	require.NoError(t, err)
	g.size = (size + gran - 1) / gran * gran
	var all []cuda.AccessDesc
	for i, d := range g.devs {
		if i > 0 && d == g.devs[0] {
			continue // virtual ranks: one GPU
		}
		all = append(all, cuda.AccessDesc{Location: cuda.DeviceLocation(d), Flags: cuda.AccessReadWrite})
	}
	for r, d := range g.devs {
		ctx, err := lib.PrimaryCtxRetain(d)
		require.NoError(t, err)
		g.ctxs = append(g.ctxs, ctx)
		require.NoError(t, lib.CtxSetCurrent(ctx))
		sms, err := lib.DeviceAttribute(cuda.AttrMultiprocessorCount, d)
		require.NoError(t, err)
		if r == 0 || sms < g.sms {
			g.sms = sms
		}
		s, err := lib.StreamCreate(cuda.StreamNonBlocking)
		require.NoError(t, err)
		g.streams = append(g.streams, s)
		m, err := kabi.Load(lib, kernels.Unicast)
		if errors.Is(err, ptx.ErrNotFound) {
			t.Skipf("no PTX: %v", err)
		}
		require.NoError(t, err)
		g.mods = append(g.mods, m)
		if r > 0 && d == g.devs[0] && r == n-1 {
			g.sms = max(1, g.sms/n) // virtual ranks: all blocks resident
		}

		p := cuda.DeviceAllocationProp(d, cuda.HandleNone)
		h, err := lib.MemCreate(g.size, &p)
		require.NoError(t, err)
		va, err := lib.MemAddressReserve(g.size, gran, 0)
		if err != nil {
			_ = lib.MemRelease(h)
			require.NoError(t, err)
		}
		require.NoError(t, lib.MemMap(va, g.size, 0, h))
		// The mapping keeps the memory; the handle can go now.
		require.NoError(t, lib.MemRelease(h))
		g.uc = append(g.uc, uint64(va))
		require.NoError(t, lib.MemSetAccess(va, g.size, all))
		require.NoError(t, lib.MemsetD8(va, 0, kabi.SignalBytes))
	}
	return g
}

func (g *gpuTeam) close() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lib := g.lib
	for r := len(g.ctxs) - 1; r >= 0; r-- {
		if err := lib.CtxSetCurrent(g.ctxs[r]); err != nil {
			g.t.Errorf("cleanup: %v", err)
			continue
		}
		if r < len(g.mods) {
			assert.NoError(g.t, g.mods[r].Close())
		}
		if r < len(g.streams) {
			assert.NoError(g.t, lib.StreamDestroy(g.streams[r]))
		}
		if r < len(g.uc) {
			assert.NoError(g.t, lib.MemUnmap(cuda.DevicePtr(g.uc[r]), g.size))
			assert.NoError(g.t, lib.MemAddressFree(cuda.DevicePtr(g.uc[r]), g.size))
		}
	}
	for r := len(g.ctxs) - 1; r >= 0; r-- {
		assert.NoError(g.t, lib.PrimaryCtxRelease(g.devs[r]))
	}
}

func (g *gpuTeam) params(r int) kabi.Params {
	p := kabi.Params{Rank: uint32(r), NRanks: uint32(g.n), TimeoutNs: uint64(10 * time.Second), Flags: g.flags}
	copy(p.UC[:], g.uc)
	return p
}

// launch launches on every rank in ranks (all when nil), all launches
// queued before any is waited for, then synchronizes those streams.
func (g *gpuTeam) launch(t testing.TB, fn func(m *kabi.Module) cuda.Function, grid, block uint32, ranks []int, mk func(r int) kabi.Params) {
	t.Helper()
	g.wait(t, g.enqueue(t, fn, grid, block, ranks, mk))
}

// enqueue launches on every rank in ranks (all when nil) without waiting,
// and returns the ranks.
func (g *gpuTeam) enqueue(t testing.TB, fn func(m *kabi.Module) cuda.Function, grid, block uint32, ranks []int, mk func(r int) kabi.Params) []int {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if ranks == nil {
		for r := range g.n {
			ranks = append(ranks, r)
		}
	}
	for _, r := range ranks {
		p := mk(r)
		require.NoError(t, g.lib.CtxSetCurrent(g.ctxs[r]))
		f := fn(g.mods[r])
		require.NotZero(t, f)
		require.NoError(t, g.lib.LaunchKernel(f, cuda.D1(grid), cuda.D1(block), 0, g.streams[r], unsafe.Pointer(&p), kabi.ParamsSize))
		runtime.KeepAlive(&p)
	}
	return ranks
}

// wait synchronizes the streams of ranks.
func (g *gpuTeam) wait(t testing.TB, ranks []int) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, r := range ranks {
		require.NoError(t, g.lib.CtxSetCurrent(g.ctxs[r]))
		require.NoError(t, g.lib.StreamSynchronize(g.streams[r]))
	}
}

// write and read copy with rank r's context current (on a locked thread:
// subtests run on goroutines of their own).
func (g *gpuTeam) write(t testing.TB, r int, off uint64, b []byte) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, g.lib.CtxSetCurrent(g.ctxs[r]))
	require.NoError(t, cuda.CopyHtoD(g.lib, cuda.DevicePtr(g.uc[r]+off), b))
}

func (g *gpuTeam) read(t testing.TB, r int, off uint64, n int) []byte {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, g.lib.CtxSetCurrent(g.ctxs[r]))
	b := make([]byte, n)
	require.NoError(t, cuda.CopyDtoH(g.lib, b, cuda.DevicePtr(g.uc[r]+off)))
	return b
}

func (g *gpuTeam) status(t testing.TB, r int) kabi.Status {
	return kabi.Status{Word: binary.LittleEndian.Uint64(g.read(t, r, kabi.StatusOffset, 8))}
}

// allReduce runs one all-reduce with fresh inputs and poisoned outputs and
// checks it; it returns the number of wrong elements.
func (g *gpuTeam) allReduce(t *testing.T, rng kref.RNG, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, count int, grid uint32, inPlace bool) int {
	ins := make([][]byte, g.n)
	for r := range ins {
		ins[r] = kref.Input(rng, dt, count)
	}
	outs := g.run(t, rng, algo, dt, op, ins, grid, inPlace)
	bad, nbad := kref.CheckAllReduce(dt, op, ins, outs[0], count, 5)
	for _, m := range bad {
		t.Errorf("%v %v %v count %d grid %d: %v", algo, dt, op, count, grid, m)
	}
	for r := 1; r < g.n; r++ {
		assert.Equal(t, outs[0], outs[r], "rank %d's result differs from rank 0's", r)
	}
	return nbad
}

// run runs one all-reduce of ins (one input per rank) with poisoned
// outputs, checks the status words and that nothing past the outputs was
// written, and returns every rank's result.
func (g *gpuTeam) run(t *testing.T, rng kref.RNG, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, ins [][]byte, grid uint32, inPlace bool) [][]byte {
	t.Helper()
	nbytes := len(ins[0])
	count := nbytes / dt.Size()
	span := uint64((nbytes + gpuGuard + kabi.VecBytes - 1) / kabi.VecBytes * kabi.VecBytes)
	send, recv, stage := uint64(gpuSend), uint64(gpuSend)+span, uint64(0)
	if inPlace {
		recv = send
		if algo == kernels.OneShot {
			stage = send + span
		}
	}
	var llArea, llCap uint64
	if algo == kernels.LL {
		// The LL area after recv, not zeroed: stale LL lines carry
		// older epochs, and the inputs and outputs that lay there are
		// random (a pair of flag words equal to the epoch: 2^-64).
		llArea = send + 2*span
		llCap = uint64(nbytes+7) / 8
		require.LessOrEqual(t, llArea+kabi.LLAreaBytes(llCap*8, g.n), g.size)
	}
	require.LessOrEqual(t, send+2*span, g.size)
	guards := make([][]byte, g.n)
	for r := range g.n {
		g.write(t, r, send, ins[r])
		if !inPlace {
			g.write(t, r, recv, kref.Bytes(rng, nbytes))
		}
		guards[r] = kref.Bytes(rng, gpuGuard)
		g.write(t, r, recv+uint64(nbytes), guards[r])
	}
	g.launch(t, func(m *kabi.Module) cuda.Function {
		f, ok := m.AllReduce(algo, dt, op)
		require.True(t, ok)
		return f
	}, grid, kabi.BlockThreads, nil, func(r int) kabi.Params {
		p := g.params(r)
		p.Send, p.Recv, p.Stage, p.Count, p.Opcode = send, recv, stage, uint64(count), kernels.OpAllReduce
		p.ElemBytes, p.LLArea, p.LLLines = uint32(dt.Size()), llArea, uint32(llCap)
		return p
	})
	outs := make([][]byte, g.n)
	for r := range g.n {
		require.Equal(t, "ok", g.status(t, r).String(), "rank %d", r)
		outs[r] = g.read(t, r, recv, nbytes)
		assert.Equal(t, guards[r], g.read(t, r, recv+uint64(nbytes), gpuGuard), "rank %d: bytes past the output were written", r)
	}
	return outs
}

func TestGPUAllReduceUnicast(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	const large = 1 << 22 // elements: 16 MiB of f32
	for n := 2; n <= len(devs); n++ {
		g := newGPUTeam(t, lib, devs, n, kabi.SignalBytes+2*(large*8+4096))
		grid := uint32(min(g.sms, kabi.MaxBlocks))
		for _, dt := range kernels.DTypes {
			for _, op := range kernels.RedOps {
				for _, algo := range kernels.Algos {
					for _, sc := range kref.SizeCases {
						t.Run(fmt.Sprintf("%d-ranks/%v/%v_%v/%s", n, algo, dt, op, sc.Name), func(t *testing.T) {
							g.allReduce(t, rng, algo, dt, op, sc.Count(kabi.VecBytes/dt.Size(), n), sc.Grid, sc.InPlace)
						})
					}
					if op == kernels.Sum && algo != kernels.LL { // LL: small messages only
						t.Run(fmt.Sprintf("%d-ranks/%v/%v_%v/large", n, algo, dt, op), func(t *testing.T) {
							g.allReduce(t, rng, algo, dt, op, large+3, grid, false)
						})
					}
					if op == kernels.Sum && algo == kernels.TwoShot {
						// A grid of 2: 8 vectors a thread and more, where
						// the two-shot goes in two passes unless told
						// one (kabi.FlagOnePass), in and out of place.
						for _, flags := range []uint32{0, kabi.FlagOnePass} {
							for _, inPlace := range []bool{false, true} {
								t.Run(fmt.Sprintf("%d-ranks/%v/%v_%v/passes-flags-%#x-in-place-%v", n, algo, dt, op, flags, inPlace), func(t *testing.T) {
									g.flags = flags
									defer func() { g.flags = 0 }()
									g.allReduce(t, rng, algo, dt, op, large+5, 2, inPlace)
								})
							}
						}
					}
				}
			}
		}
	}
}

// TestGPUSoak runs -soak random all-reduces (type, operator, algorithm,
// size from 1 element to 4 MiB, grid, in place or not) on all GPUs and
// counts wrong elements.
func TestGPUSoak(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+2*(4<<20+4096))
	wrong, done := 0, 0
	start := time.Now()
	last := start
	for i := range *soakRuns {
		if *soakFor > 0 && time.Since(start) >= *soakFor {
			break
		}
		if time.Since(last) >= 30*time.Second {
			last = time.Now()
			t.Logf("%v: %d all-reduces, #wrong %d", last.Sub(start).Round(time.Second), i, wrong)
		}
		dt := kernels.DTypes[rng.IntN(len(kernels.DTypes))]
		op := kernels.RedOps[rng.IntN(len(kernels.RedOps))]
		algo := kernels.Algos[rng.IntN(len(kernels.Algos))]
		count := 1 + rng.IntN((4<<20)/dt.Size())>>rng.IntN(20)
		if algo == kernels.LL {
			count = min(count, (64<<10)/dt.Size()) // small messages only
		}
		grid := uint32(1 + rng.IntN(min(g.sms, kabi.MaxBlocks)))
		wrong += g.allReduce(t, rng, algo, dt, op, count, grid, rng.IntN(4) == 0)
		if t.Failed() {
			t.Fatalf("run %d failed", i)
		}
		done++
	}
	t.Logf("%d random all-reduces on %d ranks in %v, #wrong %d", done, g.n, time.Since(start).Round(time.Millisecond), wrong)
	assert.Zero(t, wrong)
}

func TestGPUBroadcast(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rng, _ := kref.NewRNG()
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+2*(8<<20+4096))
	for _, count := range []int{1, 15, 16, 17, 4096*16 + 9, 8 << 20} {
		for _, c := range []struct{ inPlace, sliced, push, rootSlice, ll, two bool }{{false, false, false, false, false, false}, {true, false, false, false, false, false},
			{false, true, false, false, false, false}, {true, true, false, false, false, false}, {false, true, false, true, false, false}, {true, true, false, true, false, false},
			{false, false, true, false, false, false}, {true, false, true, false, false, false}, {false, false, false, false, true, false}, {true, false, false, false, true, false},
			{false, false, false, false, true, true}, {true, false, false, false, true, true}} {
			if c.ll && count > 1<<20 {
				continue // LL is for small payloads
			}
			inPlace := c.inPlace
			root := rng.IntN(g.n)
			send := uint64(gpuSend)
			recv := send + uint64(count+gpuGuard+15)/16*16
			if inPlace {
				recv = send
			}
			data := kref.Bytes(rng, count)
			guards := make([][]byte, g.n)
			for r := range g.n {
				if r == root {
					g.write(t, r, send, data)
				} else {
					g.write(t, r, recv, kref.Bytes(rng, count))
				}
				guards[r] = kref.Bytes(rng, gpuGuard)
				g.write(t, r, recv+uint64(count), guards[r])
			}
			grid := uint32(min(g.sms, kabi.MaxBlocks, 1+count/(16*kabi.BlockThreads)))
			block := uint32(kabi.BlockThreads)
			if c.push { // several rounds a block: a grid of 3
				grid = 3
			}
			// LL: a line a thread up to 3 blocks of 256, then the threads
			// loop; the LL area after recv's guard, not zeroed (stale lines
			// carry older epochs).
			llCap := uint64(count+7)/8 + 1
			llArea := (recv + uint64(count+gpuGuard) + 15) / 16 * 16
			if c.ll {
				grid, block = uint32(min(3, (llCap+255)/256)), 256
				require.LessOrEqual(t, llArea+kabi.LLAreaBytes(llCap*8, g.n), g.size)
			}
			g.launch(t, (*kabi.Module).Broadcast, grid, block, nil, func(r int) kabi.Params {
				p := g.params(r)
				p.Send, p.Recv, p.Count, p.ElemBytes, p.Root, p.Opcode = send, recv, uint64(count), 1, uint32(root), kernels.OpBroadcast
				if c.ll {
					p.Flags, p.LLArea, p.LLLines = kabi.FlagLL, llArea, uint32(llCap)
					if c.two { // slices of ceil(lines / (n - 1)) lines after the one line: llCap holds them
						p.Flags |= kabi.FlagLLTwo
					}
					p.Check = kabi.CheckArgs(kernels.OpBroadcast, 0, 0, root)
					if r != root {
						p.Send = recv // not read
					}
				}
				if c.sliced { // the others read the root's send from its kernel
					p.Flags = kabi.FlagSliced
					if c.rootSlice { // nranks slices, the root's too
						p.Flags |= kabi.FlagRootSlice
					}
					if r != root {
						p.Send = recv
					}
				}
				if c.push { // 3 ranks and more; the flag is ignored with 2
					p.Flags = kabi.FlagPush
					if r != root {
						p.Send = recv // not read
					}
				}
				return p
			})
			for r := range g.n {
				assert.Equal(t, data, g.read(t, r, recv, count), "count %d root %d in place %v sliced %v root slice %v push %v ll %v two %v: rank %d", count, root, inPlace, c.sliced, c.rootSlice, c.push, c.ll, c.two, r)
				assert.Equal(t, guards[r], g.read(t, r, recv+uint64(count), gpuGuard))
				assert.Equal(t, "ok", g.status(t, r).String())
				if c.push {
					assert.Equal(t, make([]byte, 4*kabi.MaxBlocks), g.read(t, r, kabi.PushFlagOffset, 4*kabi.MaxBlocks), "rank %d's push flags back to 0", r)
				}
			}
		}
	}
}

// TestGPUBarrierWrap: end-barrier counters and epochs start 3 below 2^32,
// start-barrier sequences at 2^32 - 1; 10 barriers and a few multi-block
// all-reduces run through the wraps.
func TestGPUBarrierWrap(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+1<<20)
	start := uint32(1<<32 - 3)
	g.setSlots(t, start)
	for range 10 {
		g.launch(t, (*kabi.Module).Barrier, 1, 32, nil, func(r int) kabi.Params {
			p := g.params(r)
			p.Opcode = kernels.OpBarrier
			return p
		})
	}
	for r := range g.n {
		assert.Equal(t, seqAfter(seqStart, 10), binary.LittleEndian.Uint32(g.read(t, r, kabi.EpochOffset, 4)), "rank %d sequence", r)
		assert.Equal(t, "ok", g.status(t, r).String())
	}
	rng, _ := kref.NewRNG()
	for range 3 {
		assert.Zero(t, g.allReduce(t, rng, kernels.TwoShot, kernels.F32, kernels.Sum, 40000, 8, false))
		assert.Zero(t, g.allReduce(t, rng, kernels.OneShot, kernels.BF16, kernels.Sum, 40001, 8, true))
	}
}

// TestGPUTimeout: the last GPU never launches; the others return after the
// deadline with the status word naming the operation, phase 0 (a timeout,
// or, after another rank's, giving up).
func TestGPUTimeout(t *testing.T) {
	lib, devs := gpuDevices(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := newGPUTeam(t, lib, devs, len(devs), kabi.SignalBytes+1<<20)
	var ranks []int
	for r := range g.n - 1 {
		ranks = append(ranks, r)
	}
	const timeout = 200 * time.Millisecond
	t0 := time.Now()
	g.launch(t, func(m *kabi.Module) cuda.Function {
		f, _ := m.AllReduce(kernels.OneShot, kernels.F32, kernels.Sum)
		return f
	}, 4, kabi.BlockThreads, ranks, func(r int) kabi.Params {
		p := g.params(r)
		p.Send, p.Recv, p.Count, p.ElemBytes, p.Opcode, p.TimeoutNs = gpuSend, gpuSend+1<<16, 1000, 4, kernels.OpAllReduce, uint64(timeout)
		return p
	})
	el := time.Since(t0)
	assert.GreaterOrEqual(t, el, timeout)
	assert.Less(t, el, timeout+5*time.Second)
	timedOut := 0
	for _, r := range ranks {
		s := g.status(t, r)
		// The first to time out marks the team failed; the others time
		// out too or give up on seeing that.
		assert.True(t, s.TimedOut() || s.Aborted(), "rank %d: %v", r, s)
		if s.TimedOut() {
			timedOut++
		}
		assert.Equal(t, uint32(kernels.OpAllReduce), s.Opcode())
		assert.Equal(t, uint32(0), s.Phase())
		assert.Less(t, s.Block(), uint32(4))
	}
	assert.NotZero(t, timedOut)
	assert.Equal(t, "ok", g.status(t, g.n-1).String())
}
