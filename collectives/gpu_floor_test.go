//go:build gpu

package collectives

// Issue 14 on a GPU: the drain after a failure, and Sync at the floor.
//
//	go test -c -tags gpu -o .devbin/collectives.test ./collectives
//	NVLS_GPU_VRANKS=2 NCCL_NVLS_ENABLE=0 ./.devbin/collectives.test -test.v -test.run 'GPUDrain'
//	NCCL_NVLS_ENABLE=0 ./.devbin/collectives.test -test.run '^$' -test.bench GPUSyncFloor -test.benchtime 2s
//
// Unicast only, through internal/unicastonly, as every GPU test here.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/teamlink"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team"
)

// TestGPUDrain: the last rank never launches; 104 collectives (every kind,
// all-reduces of every algorithm), or 200 graph replays of 8, are queued
// on the others with a 1 s timeout. The first collective's kernels
// time out and mark the team failed; everything queued behind returns at
// entry. Sync (30 s deadline) returns the first failure's error within the
// timeout plus a second, every stream idle; Close frees everything. It
// logs the drain time.
func TestGPUDrain(t *testing.T) {
	for _, graphs := range []bool{false, true} {
		t.Run(fmt.Sprintf("graphs=%v", graphs), func(t *testing.T) {
			const timeout = time.Second
			r := newGPURig(t, 64<<20, 0)
			c, err := New(r.t, WithTimeout(timeout))
			require.NoError(t, err)
			b, o := r.alloc(8<<20), r.alloc(8<<20)
			last := r.n - 1
			enqueue := gpuDrainWork(t, c, r, b, o)
			if graphs {
				execs := captureGraphs(t, r.t, r.d, r.streams, enqueue)
				require.NoError(t, r.t.Run(team.JobFunc(func(l int) error {
					for range 200 {
						if l != last {
							if err := r.d.GraphLaunch(execs[l], r.streams[l]); err != nil {
								return err
							}
						}
					}
					return nil
				})))
			} else {
				c.skip = make([]bool, r.n)
				c.skip[last] = true
				for range 13 {
					enqueue()
				}
				c.skip = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			err = c.Sync(ctx, r.streams)
			took := time.Since(start)
			t.Logf("drained in %v (timeout %v, %d ranks, up to %d per GPU): %v", took, timeout, r.n, teamlink.Of(r.t).MaxRanksOnDevice(), err)
			require.ErrorIs(t, err, ErrTimeout)
			require.ErrorIs(t, err, team.ErrBroken)
			var te *TimeoutError
			require.ErrorAs(t, err, &te)
			assert.Equal(t, "all-reduce", te.Op, "the first collective's")
			assert.Less(t, took, timeout+time.Second)
			for l := range r.n {
				assert.NoError(t, onContext(r.d, r.t.Context(l), func() error { return r.d.StreamQuery(r.streams[l]) }), "rank %d's stream drained", l)
			}
			start = time.Now()
			require.NoError(t, c.Close())
			t.Logf("Close took %v", time.Since(start))
		})
	}
}

// gpuDrainWork returns what enqueues one collective of every kind (three
// all-reduces) on the rig's streams, an LL all-reduce first.
func gpuDrainWork(t *testing.T, c *Comm, r *gpuRig, b, o team.Buffer) func() {
	bg := context.Background()
	return func() {
		require.NoError(t, c.AllReduce(bg, r.ptrs(b), r.ptrs(b), 256, F32, Sum, r.streams))
		require.NoError(t, c.AllReduce(bg, r.ptrs(b), r.ptrs(b), 64<<10, U32, Max, r.streams))
		require.NoError(t, c.AllReduce(bg, r.ptrs(b), r.ptrs(b), 1<<20, F32, Sum, r.streams))
		require.NoError(t, c.Barrier(bg, r.streams))
		require.NoError(t, c.ReduceScatter(bg, r.ptrs(b), r.ptrs(o), 1<<12, F32, Sum, r.streams))
		require.NoError(t, c.AllGather(bg, r.ptrs(b), r.ptrs(o), 1<<12, U32, r.streams))
		require.NoError(t, c.Reduce(bg, r.ptrs(b), r.ptrs(o), 1<<16, S32, Max, 0, r.streams))
		require.NoError(t, c.Broadcast(bg, r.ptrs(b), r.ptrs(b), 1<<16, U64, 0, r.streams))
	}
}

// floorRig is a team of n ranks on GPU 0 (shared when n > 1), a
// non-blocking stream per rank, a Comm and a 4 KiB buffer, in a workspace
// of ws bytes per rank.
type floorRig struct {
	t       *team.Team
	c       *Comm
	d       cuda.Driver
	streams []cuda.Stream
	// buf and out: two 4 KiB buffers (out for the out-of-place calls).
	buf, out []cuda.DevicePtr
}

func newFloorRig(b testing.TB, lib *cuda.Lib, n int, ws uint64) *floorRig {
	d := unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { b.Errorf("%s called", op) }}
	dev, err := lib.DeviceGet(0)
	require.NoError(b, err)
	devs := make([]cuda.Device, n)
	for i := range devs {
		devs[i] = dev
	}
	opts := []team.Option{team.WithTransport(team.Unicast), team.WithWorkspaceSize(ws)}
	if n > 1 {
		opts = append(opts, team.WithSharedDevices())
	}
	tm, err := team.New(context.Background(), d, devs, opts...)
	require.NoError(b, err)
	fr := &floorRig{t: tm, d: d, streams: make([]cuda.Stream, n)}
	require.NoError(b, tm.Run(team.JobFunc(func(l int) error {
		s, err := d.StreamCreate(cuda.StreamNonBlocking)
		fr.streams[l] = s
		return err
	})))
	fr.c, err = New(tm)
	require.NoError(b, err)
	buf, err := tm.Alloc(4096)
	require.NoError(b, err)
	out, err := tm.Alloc(4096)
	require.NoError(b, err)
	for l := range n {
		fr.buf, fr.out = append(fr.buf, buf.Ptr(l)), append(fr.out, out.Ptr(l))
	}
	b.Cleanup(func() {
		assert.NoError(b, fr.c.Close())
		assert.NoError(b, tm.Free(buf))
		assert.NoError(b, tm.Free(out))
		assert.NoError(b, tm.Run(team.JobFunc(func(l int) error { return d.StreamDestroy(fr.streams[l]) })))
		assert.NoError(b, tm.Close())
	})
	return fr
}

// BenchmarkGPUSyncFloor prints, in one run on GPU 0: the floor (a 4-byte
// cuMemsetD32Async and its wait, by cuStreamSynchronize and by a
// cuStreamQuery spin), then for teams of 1, 2 and 4 ranks on that GPU,
// launched both ways (via=caller: from the calling goroutine, the default
// where the ranks run in one context; via=workers: on the per-rank
// workers, as before), an 8-byte AllReduce (in place, and out of
// place, into another buffer), Broadcast and Barrier each followed by
// Sync (one rank: no kernel, a copy out of place), and the enqueue of an
// 8-byte AllReduce alone (back to back; Sync every 1000). Each line after the floor also reports x_floor,
// its time over the floor's spin (measured in the same run). docs/sync.md
// has the lines' format, docs/perf.md the goals.
func BenchmarkGPUSyncFloor(b *testing.B) {
	lib, err := cuda.Load()
	if err != nil {
		b.Skipf("no usable CUDA driver: %v", err)
	}
	var floor float64 // ns per memset + spin
	b.Run("floor/memset+streamsync", func(b *testing.B) { benchFloor(b, lib, false) })
	b.Run("floor/memset+queryspin", func(b *testing.B) { floor = benchFloor(b, lib, true) })
	b.Run("floor/emptykernel+queryspin", func(b *testing.B) { benchEmptyKernel(b, lib); reportFloor(b, floor) })
	bg := context.Background()
	for _, n := range []int{1, 2, 4} {
		fr := newFloorRig(b, lib, n, 16<<20)
		c, s, p, q := fr.c, fr.streams, fr.buf, fr.out
		require.True(b, c.oneCtx, "%d ranks on GPU 0 run in one context", n)
		for _, via := range []string{"caller", "workers"} {
			c.via = map[string]Launch{"caller": LaunchCaller, "workers": LaunchWorkers}[via]
			for _, bc := range []struct {
				name string
				call func() error
			}{
				{"allreduce-8B+sync", func() error { return c.AllReduce(bg, p, p, 2, F32, Sum, s) }},
				{"allreduce-8B-outofplace+sync", func() error { return c.AllReduce(bg, p, q, 2, F32, Sum, s) }},
				{"broadcast-8B+sync", func() error { return c.Broadcast(bg, p, p, 1, U64, 0, s) }},
				{"barrier+sync", func() error { return c.Barrier(bg, s) }},
			} {
				b.Run(fmt.Sprintf("ranks=%d/via=%s/%s", n, via, bc.name), func(b *testing.B) {
					for b.Loop() {
						if err := bc.call(); err != nil {
							b.Fatal(err)
						}
						if err := c.Sync(bg, s); err != nil {
							b.Fatal(err)
						}
					}
					reportFloor(b, floor)
				})
			}
			b.Run(fmt.Sprintf("ranks=%d/via=%s/allreduce-8B-enqueue", n, via), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if err := c.AllReduce(bg, p, p, 2, F32, Sum, s); err != nil {
						b.Fatal(err)
					}
					if i++; i%1000 == 0 {
						require.NoError(b, c.Sync(bg, s))
					}
				}
				require.NoError(b, c.Sync(bg, s))
				reportFloor(b, floor)
			})
		}
		c.via = LaunchAuto
	}
}

// benchFloor times a 4-byte cuMemsetD32Async on GPU 0 and its wait:
// cuStreamQuery in a spin (spin) or cuStreamSynchronize. It returns the
// ns per operation.
func benchFloor(b *testing.B, lib *cuda.Lib, spin bool) float64 {
	s := floorStream(b, lib)
	p, err := lib.MemAlloc(4)
	require.NoError(b, err)
	defer func() { assert.NoError(b, lib.MemFree(p)) }()
	for b.Loop() {
		if err := lib.MemsetD32Async(p, 1, 1, s); err != nil {
			b.Fatal(err)
		}
		if !spin {
			if err := lib.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
			continue
		}
		spinDone(b, lib, s)
	}
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// emptyPTX is a kernel that does nothing: launching it and spinning on
// the stream is the least any collective kernel plus its wait can cost.
const emptyPTX = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry nvls_empty()\n{\n\tret;\n}\n"

// benchEmptyKernel times the launch of emptyPTX (1 block of 32 threads)
// and a cuStreamQuery spin until it is done.
func benchEmptyKernel(b *testing.B, lib *cuda.Lib) {
	s := floorStream(b, lib)
	m, err := lib.ModuleLoadData([]byte(emptyPTX))
	require.NoError(b, err)
	defer func() { assert.NoError(b, lib.ModuleUnload(m)) }()
	f, err := lib.ModuleGetFunction(m, "nvls_empty")
	require.NoError(b, err)
	for b.Loop() {
		if err := lib.LaunchKernel(f, cuda.D1(1), cuda.D1(32), 0, s, nil, 0); err != nil {
			b.Fatal(err)
		}
		spinDone(b, lib, s)
	}
}

// floorStream locks the goroutine to its thread, makes GPU 0's primary
// context current there and creates a non-blocking stream in it; the
// benchmark's cleanup undoes all of it.
func floorStream(b *testing.B, lib *cuda.Lib) cuda.Stream {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	dev, err := lib.DeviceGet(0)
	require.NoError(b, err)
	ctx, err := lib.PrimaryCtxRetain(dev)
	require.NoError(b, err)
	b.Cleanup(func() { assert.NoError(b, lib.PrimaryCtxRelease(dev)) })
	require.NoError(b, lib.CtxSetCurrent(ctx))
	b.Cleanup(func() { _ = lib.CtxSetCurrent(0) })
	s, err := lib.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(b, err)
	b.Cleanup(func() { assert.NoError(b, lib.StreamDestroy(s)) })
	return s
}

// spinDone spins on cuStreamQuery until s is done.
func spinDone(b *testing.B, lib *cuda.Lib, s cuda.Stream) {
	for {
		err := lib.StreamQuery(s)
		if err == nil {
			return
		}
		if !errors.Is(err, cuda.ErrNotReady) {
			b.Fatal(err)
		}
	}
}

// reportFloor adds x_floor: the time per operation over the floor's.
func reportFloor(b *testing.B, floor float64) {
	if floor > 0 && b.N > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/floor, "x_floor")
	}
}
