package simkern

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/ptxtest"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
	"github.com/nvls-go/nvls/ptx"
)

// entryImages writes PTX text declaring every entry point of each source
// and flavor (what the simulator's ModuleLoadData reads: the .entry names)
// and returns the directory, for NVLS_PTX_DIR. It stands in for the
// generated PTX so that this test runs whether or not ptx/ holds it.
func entryImages(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, ptxtest.WriteEntryImages(dir, kernels.Sources, kernels.Entries, kabi.ParamsSize))
	return dir
}

// TestThroughDriver loads the kernels with kabi.Load on every simulated
// device and launches them on streams with cuLaunchKernel, as package
// collectives does: an all-reduce, a broadcast and a barrier per flavor.
func TestThroughDriver(t *testing.T) {
	t.Setenv(ptx.EnvDir, entryImages(t))
	const ranks = 3
	for _, f := range ptx.Flavors {
		t.Run(f.String(), func(t *testing.T) {
			w := newWorkspace(t, ranks, f)
			const count = 3*kabi.BlockThreads*4 + 5 // f32: several blocks and a tail
			recv := uint64(sendOff + 1<<17)
			rng, _ := kref.NewRNG()
			ins := make([][]byte, ranks)
			for r := range ranks {
				ins[r] = kref.Input(rng, kernels.F32, count)
				w.write(t, r, sendOff, ins[r])
			}
			var wg sync.WaitGroup
			errs := make([]error, ranks)
			for r := range ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = driveRank(w, r, f, recv, count)
				}()
			}
			wg.Wait()
			for r := range ranks {
				require.NoError(t, errs[r], "rank %d", r)
			}
			out := w.read(t, 0, recv, count*4)
			checkAllReduce(t, kernels.F32, kernels.Sum, ins, out, count)
			// The broadcast (root 1) then copied rank 1's result to
			// recv+count*4.. on every rank.
			for r := range ranks {
				assert.Equal(t, out, w.read(t, r, recv+1<<16, count*4), "rank %d broadcast", r)
				assert.Equal(t, "ok", w.status(t, r).String())
			}
		})
	}
}

func driveRank(w *workspace, r int, f kernels.Flavor, recv uint64, count int) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := w.n
	dev := cuda.Device(r)
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		return err
	}
	defer func() { _ = d.PrimaryCtxRelease(dev) }()
	if err := d.CtxSetCurrent(ctx); err != nil {
		return err
	}
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return err
	}
	defer func() { _ = d.StreamDestroy(s) }()
	m, err := kabi.Load(d, f)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := m.Close(); err == nil {
			err = cerr
		}
	}()
	fn, ok := m.AllReduce(kernels.TwoShot, kernels.F32, kernels.Sum)
	if !ok {
		return fmt.Errorf("no f32 sum kernel")
	}
	block := cuda.D1(kabi.BlockThreads)
	p := w.params(r)
	p.Send, p.Recv, p.Count, p.ElemBytes, p.Opcode = sendOff, recv, uint64(count), 4, kernels.OpAllReduce
	if err := d.LaunchKernel(fn, cuda.D1(3), block, 0, s, unsafe.Pointer(&p), kabi.ParamsSize); err != nil {
		return err
	}
	b := w.params(r)
	b.Send, b.Recv, b.Count, b.ElemBytes, b.Root, b.Opcode = recv, recv+1<<16, uint64(count), 4, 1, kernels.OpBroadcast
	if err := d.LaunchKernel(m.Broadcast(), cuda.D1(2), block, 0, s, unsafe.Pointer(&b), kabi.ParamsSize); err != nil {
		return err
	}
	bar := w.params(r)
	bar.Opcode = kernels.OpBarrier
	if err := d.LaunchKernel(m.Barrier(), cuda.D1(1), cuda.D1(32), 0, s, unsafe.Pointer(&bar), kabi.ParamsSize); err != nil {
		return err
	}
	return d.StreamSynchronize(s)
}

// TestReduceRounding checks the PTX min/max semantics and that a 16-bit
// float sum is rounded once, from f32.
func TestReduceRounding(t *testing.T) {
	assert.Equal(t, float32(1), fmin(float32(math.NaN()), 1))
	assert.Equal(t, float32(1), fmax(1, float32(math.NaN())))
	assert.True(t, math.Signbit(float64(fmin(0, float32(math.Copysign(0, -1))))))
	assert.False(t, math.Signbit(float64(fmax(float32(math.Copysign(0, -1)), 0))))

	// A sum of f16 values is rounded once, from f32: 2048 + 1 + 1 = 2050
	// exactly (rounding after each add would give 2048).
	dst := make([]byte, 2)
	srcs := [][]byte{make([]byte, 2), make([]byte, 2), make([]byte, 2)}
	kernels.F16.PutBits(srcs[0], 0, kernels.F16.FromFloat32(2048))
	kernels.F16.PutBits(srcs[1], 0, kernels.F16.FromFloat32(1))
	kernels.F16.PutBits(srcs[2], 0, kernels.F16.FromFloat32(1))
	reduce(kernels.F16, kernels.Sum, dst, srcs)
	assert.Equal(t, 2050.0, kernels.F16.Float64(kernels.F16.Bits(dst, 0)))
}

func TestEveryEntryImplemented(t *testing.T) {
	ks := Kernels()
	for _, f := range ptx.Flavors {
		for _, name := range kernels.AllEntries(f) {
			_, ok := ks[name]
			assert.True(t, ok, "%s (%v) has no Go implementation", name, f)
		}
	}
}
