//go:build gpu

package vmm_test

// Tests on real GPUs, run by hand on the GPU machine (never in CI):
//
//	go test -tags gpu -c -o vmm-gpu.test ./vmm
//	./vmm-gpu.test -test.run GPU -test.v
//
// They use the unicast path only (plain VMM mappings and peer access
// through cuMemSetAccess); nothing here calls a cuMulticast* entry point.

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/posixfd"
	"github.com/nvls-go/nvls/vmm"
)

// gpus returns the real driver and the first k devices, or skips.
func gpus(t *testing.T, k int) (cuda.Driver, []cuda.Device) {
	t.Helper()
	d, err := cuda.Load()
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) {
			t.Skipf("no CUDA driver: %v", err)
		}
		require.NoError(t, err)
	}
	n, err := d.DeviceCount()
	require.NoError(t, err)
	if n < k {
		t.Skipf("%d GPUs, the test needs %d", n, k)
	}
	devs := make([]cuda.Device, k)
	for i := range devs {
		devs[i], err = d.DeviceGet(i)
		require.NoError(t, err)
		name, err := d.DeviceName(devs[i])
		require.NoError(t, err)
		vmmOK, err := d.DeviceAttribute(cuda.AttrVirtualMemoryManagement, devs[i])
		require.NoError(t, err)
		if vmmOK == 0 {
			t.Skipf("device %d (%s) does not support VMM", i, name)
		}
		t.Logf("device %d: %s", i, name)
	}
	return d, devs
}

// A Striped range over two GPUs, written and read with memcpy/memset from
// each device's context and by a kernel on each GPU (hand-written PTX),
// checked on the host.
func TestGPUStripedTwoDevices(t *testing.T) {
	d, devs := gpus(t, 2)
	for _, p := range [][2]cuda.Device{{devs[0], devs[1]}, {devs[1], devs[0]}} {
		ok, err := d.DeviceCanAccessPeer(p[0], p[1])
		require.NoError(t, err)
		if !ok {
			t.Skipf("device %d cannot access device %d", p[0], p[1])
		}
	}
	runStripedScenario(t, d, [2]cuda.Device{devs[0], devs[1]}, 256<<20)
}

// memFree is cuMemGetInfo's free bytes of the current context's device.
func memFree(t *testing.T, d cuda.Driver) uint64 {
	t.Helper()
	free, _, err := d.MemGetInfo()
	require.NoError(t, err)
	return free
}

// Growable on GPU 0: grows within the reservation, past it (the hint
// path), and past a range made to block the hint (the move path), with
// data written before each grow checked after it; shrinks; and device
// memory is back where it started after Close.
func TestGPUGrowable(t *testing.T) {
	d, devs := gpus(t, 1)
	dev := devs[0]
	c := retainContexts(t, d, dev)
	defer c.release()
	c.use(dev)
	require.NoError(t, d.CtxSynchronize())
	start := memFree(t, d)

	var moves int
	g, err := vmm.NewGrowable(d, 2<<20, vmm.GrowableOptions{
		Device:  dev,
		Reserve: 64 << 20,
		OnMove:  func(old, new cuda.DevicePtr) { moves++; t.Logf("moved from %#x to %#x", old, new) },
	})
	require.NoError(t, err)
	t.Logf("chunk %d, cap %d", g.Chunk(), g.Cap())
	base := g.Ptr()

	// check writes a fresh pattern at both ends, grows by n, and checks.
	check := func(n uint64, what string) {
		t.Helper()
		old := g.Len()
		k := min(old/2, 1<<20)
		head, tail := randBytes(int(k)), randBytes(int(k))
		require.NoError(t, cuda.CopyHtoD(d, g.Ptr(), head))
		require.NoError(t, cuda.CopyHtoD(d, g.Ptr()+cuda.DevicePtr(old-k), tail))
		tm := time.Now()
		require.NoError(t, g.Grow(n), what)
		el := time.Since(tm)
		got := make([]byte, k)
		require.NoError(t, cuda.CopyDtoH(d, got, g.Ptr()))
		require.Equal(t, head, got, what)
		require.NoError(t, cuda.CopyDtoH(d, got, g.Ptr()+cuda.DevicePtr(old-k)))
		require.Equal(t, tail, got, what)
		// The new end is writable.
		last := randBytes(4096)
		require.NoError(t, cuda.CopyHtoD(d, g.Ptr()+cuda.DevicePtr(g.Len()-4096), last))
		back := make([]byte, 4096)
		require.NoError(t, cuda.CopyDtoH(d, back, g.Ptr()+cuda.DevicePtr(g.Len()-4096)))
		require.Equal(t, last, back, what)
		t.Logf("%s: %d -> %d bytes in %v (reservations %d, generation %d)", what, old, g.Len(), el, g.Reservations(), g.Generation())
	}

	for g.Len()+(8<<20) <= g.Cap() {
		check(8<<20, "in place")
	}
	require.Equal(t, base, g.Ptr())
	check(64<<20, "past the reservation")
	if g.Generation() == 0 {
		assert.Equal(t, base, g.Ptr())
		t.Logf("the driver granted the range after the end (%d reservations)", g.Reservations())
	}

	// Block the range after the end, then grow past it.
	blocker, err := vmm.Reserve(d, g.Chunk(), 0, g.Ptr()+cuda.DevicePtr(g.Cap()))
	require.NoError(t, err)
	t.Logf("blocker at %#x (asked for %#x)", blocker.Ptr(), g.Ptr()+cuda.DevicePtr(g.Cap()))
	gen := g.Generation()
	check(g.Cap()-g.Len()+(1<<20), "past a blocked end")
	t.Logf("generation %d -> %d, moves seen %d", gen, g.Generation(), moves)
	assert.Equal(t, int(g.Generation()), moves)

	// A kernel-free whole-range check: fill everything with a pattern,
	// shrink, and read what remains.
	words := g.Len() / 4
	seed := uint32(0x5eed) ^ uint32(time.Now().UnixNano())
	all := make([]byte, g.Len())
	for i := uint64(0); i < words; i++ {
		binary.LittleEndian.PutUint32(all[4*i:], word(i, seed))
	}
	require.NoError(t, cuda.CopyHtoD(d, g.Ptr(), all))
	require.NoError(t, g.Shrink(g.Len()/2+12345))
	rest := make([]byte, g.Len())
	require.NoError(t, cuda.CopyDtoH(d, rest, g.Ptr()))
	require.Equal(t, all[:len(rest)], rest)
	assert.Equal(t, vmm.RoundUp(g.Len(), g.Chunk()), g.Mapped())

	require.NoError(t, g.Close())
	require.NoError(t, blocker.Close())
	require.NoError(t, d.CtxSynchronize())
	// Device memory comes back (the driver may take a moment).
	deadline := time.Now().Add(2 * time.Second)
	for memFree(t, d) < start && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, memFree(t, d), start, "cuMemGetInfo free after Close vs at the start")
}

// Compression: asked for where the device supports it; the test reports
// whether the driver granted it.
func TestGPUCompression(t *testing.T) {
	d, devs := gpus(t, 1)
	sup, err := d.DeviceAttribute(cuda.AttrGenericCompressionSupported, devs[0])
	require.NoError(t, err)
	b, err := vmm.NewBuffer(d, devs[0], 2<<20, vmm.BufferOptions{Compress: true})
	require.NoError(t, err)
	p, err := b.Allocation().Props()
	require.NoError(t, err)
	t.Logf("generic compression supported %d, granted %v (compressionType %d)", sup, b.Allocation().Compressed(), p.Flags.CompressionType)
	if sup == 0 {
		assert.False(t, b.Allocation().Compressed())
	}
	require.NoError(t, b.Close())
}

// Export as a POSIX FD and import again in the same process: both
// mappings see the same memory.
func TestGPUExportImport(t *testing.T) {
	d, devs := gpus(t, 1)
	ok, err := d.DeviceAttribute(cuda.AttrHandleTypePosixFDSupported, devs[0])
	require.NoError(t, err)
	if ok == 0 {
		t.Skip("POSIX FD handles not supported")
	}
	c := retainContexts(t, d, devs[0])
	defer c.release()
	c.use(devs[0])
	b, err := vmm.NewBuffer(d, devs[0], 2<<20, vmm.BufferOptions{Handles: cuda.HandlePosixFD})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	sh, err := b.Allocation().Export(cuda.HandlePosixFD)
	require.NoError(t, err)
	imp, err := vmm.ImportSized(d, sh, b.Size())
	closeFD(t, sh.FD)
	require.NoError(t, err)
	r, err := vmm.Reserve(d, b.Size(), 0, 0)
	require.NoError(t, err)
	m, err := imp.MapInto(r, 0)
	require.NoError(t, err)
	require.NoError(t, m.SetAccess([]cuda.Device{devs[0]}, cuda.AccessReadWrite))
	data := randBytes(int(b.Size()))
	require.NoError(t, cuda.CopyHtoD(d, b.Ptr(), data))
	got := make([]byte, len(data))
	require.NoError(t, cuda.CopyDtoH(d, got, m.Ptr()))
	require.Equal(t, data, got)
	assert.True(t, imp.Imported())
	require.NoError(t, m.Close())
	require.NoError(t, imp.Close())
	require.NoError(t, r.Close())
}

func closeFD(t *testing.T, fd int) {
	t.Helper()
	require.NoError(t, posixfd.Close(fd))
}
