package sim

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// TestHostAllocMapped: mapped, portable host memory is one set of bytes at
// two addresses: what a kernel of any device stores at the device address
// the host reads at the host address (and the reverse), including while a
// kernel keeps writing (atomic words: run with -race).
func TestHostAllocMapped(t *testing.T) {
	n := newNode(t, Config{Devices: 2})
	useDevice(t, n, 0)
	const size = 100
	p, err := n.MemHostAlloc(size, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap)
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.Equal(t, 1, n.Live().HostAllocs)
	assert.Zero(t, n.Live().DeviceBytes[0], "host memory is not device memory")

	d, err := n.MemHostGetDevicePointer(p, 0)
	require.NoError(t, err)
	assert.NotEqual(t, uint64(uintptr(p)), uint64(d), "the sim's device address differs from the host one")
	inner, err := n.MemHostGetDevicePointer(unsafe.Add(p, 40), 0)
	require.NoError(t, err)
	assert.Equal(t, d+40, inner, "a pointer inside the allocation")
	// Portable: device 1's context gets it too.
	ctx1, err := n.PrimaryCtxRetain(1)
	require.NoError(t, err)
	require.NoError(t, n.CtxSetCurrent(ctx1))
	d1, err := n.MemHostGetDevicePointer(p, 0)
	require.NoError(t, err)
	assert.Equal(t, d, d1)

	words := unsafe.Slice((*uint64)(p), size/8)
	mem := n.Memory(1)
	v := randBytes(t, 8)
	require.NoError(t, mem.Store(d+8, v))
	assert.Equal(t, binary.NativeEndian.Uint64(v), atomic.LoadUint64(&words[1]), "a device store, read by the host")
	atomic.StoreUint64(&words[2], 0x1122334455667788)
	got := make([]byte, 8)
	require.NoError(t, mem.Load(d+16, got))
	assert.Equal(t, uint64(0x1122334455667788), binary.NativeEndian.Uint64(got), "a host store, read by a device")
	require.NoError(t, mem.Store(d+27, []byte{0xaa, 0xbb, 0xcc}), "bytes across a word boundary")
	b := unsafe.Slice((*byte)(p), size)
	assert.Equal(t, []byte{0xaa, 0xbb, 0xcc}, b[27:30])
	old, err := mem.AtomicCASU64(d, 0, 42)
	require.NoError(t, err)
	assert.Zero(t, old)
	assert.Equal(t, uint64(42), atomic.LoadUint64(&words[0]))
	ptr, err := n.PointerGetAttribute(cuda.PointerAttrMemoryType, d)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), ptr, "CU_MEMORYTYPE_HOST")

	// A kernel writing while the host reads.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range uint64(2000) {
			_ = mem.Store(d+24, binary.NativeEndian.AppendUint64(nil, i))
		}
	}()
	for range 2000 {
		_ = atomic.LoadUint64(&words[3])
	}
	wg.Wait()
	assert.Equal(t, uint64(1999), atomic.LoadUint64(&words[3]))

	require.NoError(t, n.CtxSetCurrent(0))
	require.NoError(t, n.PrimaryCtxRelease(1))
	require.NoError(t, n.MemFreeHost(p))
	assert.Zero(t, n.Live().HostAllocs)
	assert.ErrorIs(t, mem.Store(d, v), cuda.ErrIllegalAddress, "the device address is gone")
	assert.ErrorIs(t, n.MemFreeHost(p), cuda.ErrInvalidValue, "freed twice")
}

// TestHostAllocRules: what cuMemHostAlloc and cuMemHostGetDevicePointer
// refuse, and the leak check naming a host allocation.
func TestHostAllocRules(t *testing.T) {
	n := newNode(t, Config{Devices: 2})
	_, err := n.MemHostAlloc(64, cuda.MemHostAllocDeviceMap)
	assert.ErrorIs(t, err, cuda.ErrInvalidContext, "no current context")
	useDevice(t, n, 0)
	_, err = n.MemHostAlloc(0, cuda.MemHostAllocDeviceMap)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue, "size 0")
	_, err = n.MemHostAlloc(64, 0x10)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue, "unknown flag")

	plain, err := n.MemHostAlloc(64, cuda.MemHostAllocPortable)
	require.NoError(t, err)
	_, err = n.MemHostGetDevicePointer(plain, 0)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue, "not DEVICEMAP")
	mine, err := n.MemHostAlloc(64, cuda.MemHostAllocDeviceMap)
	require.NoError(t, err)
	_, err = n.MemHostGetDevicePointer(mine, 1)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue, "flags must be 0")
	var x uint64
	_, err = n.MemHostGetDevicePointer(unsafe.Pointer(&x), 0)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue, "Go memory")
	assert.ErrorIs(t, n.MemFreeHost(unsafe.Add(mine, 8)), cuda.ErrInvalidValue, "not the start")

	ctx1, err := n.PrimaryCtxRetain(1)
	require.NoError(t, err)
	require.NoError(t, n.CtxSetCurrent(ctx1))
	_, err = n.MemHostGetDevicePointer(mine, 0)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue, "not portable: device 0's context only")
	require.NoError(t, n.CtxSetCurrent(0))
	require.NoError(t, n.PrimaryCtxRelease(1))

	err = n.CheckNoLeaks()
	assert.ErrorIs(t, err, ErrLeak)
	assert.ErrorContains(t, err, "2 cuMemHostAlloc allocations")
	require.NoError(t, n.MemFreeHost(plain))
	require.NoError(t, n.MemFreeHost(mine))
}

// TestHostAllocGoesWithContext: releasing the allocating context's last
// reference frees its host memory, as the driver does.
func TestHostAllocGoesWithContext(t *testing.T) {
	n := newNode(t, Config{Devices: 1})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := n.PrimaryCtxRetain(0)
	require.NoError(t, err)
	require.NoError(t, n.CtxSetCurrent(ctx))
	_, err = n.MemHostAlloc(64, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap)
	require.NoError(t, err)
	require.NoError(t, n.CtxSetCurrent(0))
	require.NoError(t, n.PrimaryCtxRelease(0))
	require.NoError(t, n.CheckNoLeaks())
}
