//go:build gpu

package nccl

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// gpuSetup opens the real driver and NCCL with NVLink SHARP off (this
// project never lets a test reach multicast on the shared GPU machines),
// and gives every GPU a context, a stream, and send/recv buffers of n
// float32 each. Skips with fewer than 2 GPUs or without libnccl.so.2.
type gpuRank struct {
	dev        cuda.Device
	ctx        cuda.Context
	stream     cuda.Stream
	send, recv cuda.DevicePtr
}

func gpuSetup(t *testing.T, n int) (cuda.Driver, *Lib, []gpuRank) {
	return gpuSetupMin(t, 2, n)
}

// gpuSetupMin is gpuSetup on machines with at least min GPUs.
func gpuSetupMin(t *testing.T, min, n int) (cuda.Driver, *Lib, []gpuRank) {
	t.Setenv(EnvNVLSEnable, "0")
	d, err := cuda.Load()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skip("no CUDA driver")
	}
	require.NoError(t, err)
	count, err := d.DeviceCount()
	require.NoError(t, err)
	if count < min {
		t.Skipf("%d GPU(s); need %d", count, min)
	}
	lib, err := Open()
	if errors.Is(err, ErrNoNCCL) {
		t.Skipf("no NCCL: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = lib.Close() })
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	ranks := make([]gpuRank, count)
	for r := range ranks {
		g := &ranks[r]
		g.dev, err = d.DeviceGet(r)
		require.NoError(t, err)
		g.ctx, err = d.PrimaryCtxRetain(g.dev)
		require.NoError(t, err)
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		g.stream, err = d.StreamCreate(cuda.StreamNonBlocking)
		require.NoError(t, err)
		g.send, err = d.MemAlloc(uint64(4 * n))
		require.NoError(t, err)
		g.recv, err = d.MemAlloc(uint64(4 * n))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, g := range ranks {
			_ = d.CtxSetCurrent(g.ctx)
			_ = d.MemFree(g.send)
			_ = d.MemFree(g.recv)
			_ = d.StreamDestroy(g.stream)
			_ = d.PrimaryCtxRelease(g.dev)
		}
	})
	return d, lib, ranks
}

func upload(t *testing.T, d cuda.Driver, g gpuRank, p cuda.DevicePtr, v []float32) {
	require.NoError(t, d.CtxSetCurrent(g.ctx))
	require.NoError(t, d.MemcpyHtoD(p, unsafe.Pointer(&v[0]), uint64(4*len(v))))
}

func download(t *testing.T, d cuda.Driver, g gpuRank, p cuda.DevicePtr, n int) []float32 {
	out := make([]float32, n)
	require.NoError(t, d.CtxSetCurrent(g.ctx))
	require.NoError(t, d.MemcpyDtoH(unsafe.Pointer(&out[0]), p, uint64(4*n)))
	return out
}

// commsAll makes one communicator per rank with ncclCommInitAll,
// destroyed at the test's end.
func commsAll(t *testing.T, d cuda.Driver, lib *Lib, ranks []gpuRank) []Comm {
	devs := make([]int, len(ranks))
	for r := range ranks {
		devs[r] = int(ranks[r].dev)
	}
	comms, err := lib.CommInitAll(devs)
	require.NoError(t, err)
	t.Cleanup(func() {
		for r, c := range comms {
			require.NoError(t, d.CtxSetCurrent(ranks[r].ctx))
			assert.NoError(t, lib.CommDestroy(c))
		}
	})
	return comms
}

// wrongSums counts the elements of got that are not the sum of in's
// (every rank's input) within float32 rounding.
func wrongSums(got []float32, in [][]float32) int {
	wrong := 0
	for i := range got {
		var s, a float64
		for r := range in {
			s += float64(in[r][i])
			a += math.Abs(float64(in[r][i]))
		}
		if math.Abs(float64(got[i])-s) > float64(len(in))*0x1p-24*a {
			wrong++
		}
	}
	return wrong
}

func syncAll(t *testing.T, d cuda.Driver, ranks []gpuRank) {
	deadline := time.Now().Add(60 * time.Second)
	for _, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		for {
			err := d.StreamQuery(g.stream)
			if err == nil {
				break
			}
			require.ErrorIs(t, err, cuda.ErrNotReady)
			require.True(t, time.Now().Before(deadline), "NCCL did not finish in 60 s")
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func TestGPUAllReduceAndBroadcast(t *testing.T) {
	const n = 1<<20 + 3
	d, lib, ranks := gpuSetup(t, n)
	comms := commsAll(t, d, lib, ranks)
	in := make([][]float32, len(ranks))
	for r, g := range ranks {
		in[r] = make([]float32, n)
		for i := range in[r] {
			in[r][i] = rand.Float32()*2 - 1
		}
		upload(t, d, g, g.send, in[r])
	}
	require.NoError(t, lib.GroupStart())
	for r, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		require.NoError(t, lib.AllReduce(g.send, g.recv, n, Float32, Sum, comms[r], g.stream))
	}
	require.NoError(t, lib.GroupEnd())
	syncAll(t, d, ranks)
	for _, g := range ranks {
		assert.Zero(t, wrongSums(download(t, d, g, g.recv, n), in), "device %d", g.dev)
	}
	for _, err := range []error{lib.CommAsyncError(comms[0])} {
		assert.NoError(t, err)
	}

	root := len(ranks) - 1
	require.NoError(t, lib.GroupStart())
	for r, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		require.NoError(t, lib.Broadcast(g.send, g.recv, 4*n, Uint8, root, comms[r], g.stream))
	}
	require.NoError(t, lib.GroupEnd())
	syncAll(t, d, ranks)
	for _, g := range ranks {
		assert.Equal(t, in[root], download(t, d, g, g.recv, n), "device %d", g.dev)
	}
}

// CommInitRank with the 128-byte unique id passed by value, every rank in
// this process inside one group.
func TestGPUCommInitRank(t *testing.T) {
	d, lib, ranks := gpuSetup(t, 16)
	id, err := lib.GetUniqueID()
	require.NoError(t, err)
	comms := make([]Comm, len(ranks))
	require.NoError(t, lib.GroupStart())
	for r, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		comms[r], err = lib.CommInitRank(len(ranks), id, r)
		require.NoError(t, err)
	}
	require.NoError(t, lib.GroupEnd())
	in := make([]float32, 16)
	for r, g := range ranks {
		for i := range in {
			in[i] = float32(r*100 + i)
		}
		upload(t, d, g, g.send, in)
	}
	require.NoError(t, lib.GroupStart())
	for r, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		require.NoError(t, lib.AllReduce(g.send, g.recv, 16, Float32, Max, comms[r], g.stream))
	}
	require.NoError(t, lib.GroupEnd())
	syncAll(t, d, ranks)
	for _, g := range ranks {
		got := download(t, d, g, g.recv, 16)
		for i := range got {
			assert.Equal(t, float32((len(ranks)-1)*100+i), got[i])
		}
	}
	for r, c := range comms {
		require.NoError(t, d.CtxSetCurrent(ranks[r].ctx))
		assert.NoError(t, lib.CommDestroy(c))
	}
}

// Symmetric memory (NCCL 2.27.3+): ncclMemAlloc'd buffers on every GPU
// (one GPU is enough: a one-rank communicator), registered as symmetric
// windows in one group, an all-reduce on them checked against the host,
// then deregistered and freed. Skips on an NCCL without it, saying why.
func TestGPUSymmetricWindows(t *testing.T) {
	const n = 1<<20 + 5
	d, lib, ranks := gpuSetupMin(t, 1, 16)
	if err := lib.Symmetric(); err != nil {
		t.Skipf("no symmetric memory: %v", err)
	}
	comms := commsAll(t, d, lib, ranks)
	bufs := make([][2]cuda.DevicePtr, len(ranks))
	var reqs []WindowRequest
	var err error
	for r, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		for k := range bufs[r] {
			bufs[r][k], err = lib.MemAlloc(4 * n)
			require.NoError(t, err)
			reqs = append(reqs, WindowRequest{Comm: comms[r], Buf: bufs[r][k], Size: 4 * n, Flags: WinCollSymmetric})
		}
	}
	wins, err := lib.RegisterWindows(reqs, func(i int) error { return d.CtxSetCurrent(ranks[i/2].ctx) })
	require.NoError(t, err)
	in := make([][]float32, len(ranks))
	for r, g := range ranks {
		in[r] = make([]float32, n)
		for i := range in[r] {
			in[r][i] = rand.Float32()*2 - 1
		}
		upload(t, d, g, bufs[r][0], in[r])
	}
	require.NoError(t, lib.GroupStart())
	for r, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		require.NoError(t, lib.AllReduce(bufs[r][0], bufs[r][1], n, Float32, Sum, comms[r], g.stream))
	}
	require.NoError(t, lib.GroupEnd())
	syncAll(t, d, ranks)
	for r, g := range ranks {
		assert.Zero(t, wrongSums(download(t, d, g, bufs[r][1], n), in), "device %d", g.dev)
	}
	for i, w := range wins {
		require.NoError(t, d.CtxSetCurrent(ranks[i/2].ctx))
		assert.NoError(t, lib.CommWindowDeregister(comms[i/2], w))
	}
	for r, g := range ranks {
		require.NoError(t, d.CtxSetCurrent(g.ctx))
		for _, p := range bufs[r] {
			assert.NoError(t, lib.MemFree(p))
		}
	}
}
