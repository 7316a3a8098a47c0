//go:build gpu

package cuda_test

// Tests and benchmarks of the real binding on real GPUs. Build and run on a
// GPU machine:
//
//	go test -c -tags gpu -o .devbin/cuda.test ./cuda
//	./.devbin/cuda.test -test.v -test.run GPU
//	./.devbin/cuda.test -test.run '^$' -test.bench GPU -test.benchmem
//
// They use the unicast path only: no cuMulticast* entry point is called
// here, not even cuMulticastGetGranularity (multicast on a shared NVSwitch
// fabric can take the host down). They skip where the driver cannot be
// loaded or has fewer GPUs than a test needs.

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/gputest"
	"github.com/nvls-go/nvls/internal/posixfd"
)

// gpuLib loads the driver and returns the first need devices, or skips.
func gpuLib(t testing.TB, need int) (*cuda.Lib, []cuda.Device) {
	t.Helper()
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	n, err := lib.DeviceCount()
	require.NoError(t, err)
	if n < need {
		t.Skipf("%d GPU(s), this test needs %d", n, need)
	}
	devs := make([]cuda.Device, n)
	for i := range devs {
		devs[i], err = lib.DeviceGet(i)
		require.NoError(t, err)
	}
	return lib, devs
}

// retain retains d's primary context and releases it when the test ends.
func retain(t testing.TB, lib *cuda.Lib, d cuda.Device) cuda.Context {
	t.Helper()
	ctx, err := lib.PrimaryCtxRetain(d)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, lib.PrimaryCtxRelease(d)) })
	return ctx
}

// cleanupOn registers fn to run at the end of the test with ctx current on
// a locked thread (cleanups need not run on the test's thread).
func cleanupOn(t testing.TB, lib *cuda.Lib, ctx cuda.Context, fn func() error) {
	t.Cleanup(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := lib.CtxSetCurrent(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		if err := fn(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// setCtx makes ctx current on the (locked) calling thread.
func setCtx(t testing.TB, lib *cuda.Lib, ctx cuda.Context) {
	t.Helper()
	require.NoError(t, lib.CtxSetCurrent(ctx))
}

func attr(t testing.TB, lib *cuda.Lib, a cuda.DeviceAttribute, d cuda.Device) int {
	t.Helper()
	v, err := lib.DeviceAttribute(a, d)
	require.NoError(t, err)
	return v
}

func TestGPUInventory(t *testing.T) {
	lib, devs := gpuLib(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	v, err := lib.DriverVersion()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, v, 11000)
	t.Logf("driver: CUDA %d.%d (%d), %d GPU(s)", v/1000, v%1000/10, v, len(devs))

	for _, d := range devs {
		name, err := lib.DeviceName(d)
		require.NoError(t, err)
		assert.NotEmpty(t, name)
		bus, err := lib.DevicePCIBusID(d)
		require.NoError(t, err)
		assert.Regexp(t, `^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`, bus)
		mem, err := lib.DeviceTotalMem(d)
		require.NoError(t, err)
		assert.Positive(t, mem)
		sms := attr(t, lib, cuda.AttrMultiprocessorCount, d)
		assert.Positive(t, sms)
		major, minor := attr(t, lib, cuda.AttrComputeCapabilityMajor, d), attr(t, lib, cuda.AttrComputeCapabilityMinor, d)
		assert.GreaterOrEqual(t, major, 1)
		flags := map[string]cuda.DeviceAttribute{
			"vmm": cuda.AttrVirtualMemoryManagement, "posix-fd": cuda.AttrHandleTypePosixFDSupported,
			"fabric": cuda.AttrHandleTypeFabricSupported, "multicast": cuda.AttrMulticastSupported,
			"compression": cuda.AttrGenericCompressionSupported, "gdr-vmm": cuda.AttrGPUDirectRDMAWithVMM,
			"uva": cuda.AttrUnifiedAddressing, "managed": cuda.AttrManagedMemory,
		}
		var b strings.Builder
		for _, k := range []string{"vmm", "posix-fd", "fabric", "multicast", "compression", "gdr-vmm", "uva", "managed"} {
			fv := attr(t, lib, flags[k], d)
			assert.Contains(t, []int{0, 1}, fv, "%s is a flag", k)
			b.WriteString(" " + k + "=" + strconv.Itoa(fv))
		}
		t.Logf("GPU %d: %s, bus %s, %d SMs, sm_%d%d, %.1f GiB,%s", d, name, bus, sms, major, minor, float64(mem)/(1<<30), b.String())

		ctx := retain(t, lib, d)
		setCtx(t, lib, ctx)
		cur, err := lib.CtxGetCurrent()
		require.NoError(t, err)
		assert.Equal(t, ctx, cur)
		free, total, err := lib.MemGetInfo()
		require.NoError(t, err)
		assert.LessOrEqual(t, free, total)
		assert.Positive(t, total)
		assert.LessOrEqual(t, total, mem, "cuMemGetInfo's total (%d) vs cuDeviceTotalMem (%d)", total, mem)
	}
	for _, a := range devs {
		var row strings.Builder
		for _, b := range devs {
			if a == b {
				row.WriteString(" -")
				continue
			}
			ok, err := lib.DeviceCanAccessPeer(a, b)
			require.NoError(t, err)
			row.WriteString(map[bool]string{true: " Y", false: " n"}[ok])
		}
		t.Logf("peer access from GPU %d:%s", a, row.String())
	}
}

func randomBytes(n uint64) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rand.Uint64())
	}
	return b
}

// TestGPUVMMPeerCopy drives the VMM calls by hand: memory created on GPU 0,
// mapped with access for GPUs 0 and 1, written from GPU 1's context, read
// back from GPU 0's; exported as a POSIX FD and imported again; everything
// released and GPU 0's free memory back where it was.
func TestGPUVMMPeerCopy(t *testing.T) {
	lib, devs := gpuLib(t, 2)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d0, d1 := devs[0], devs[1]
	if attr(t, lib, cuda.AttrVirtualMemoryManagement, d0) == 0 {
		t.Skip("GPU 0 has no VMM support")
	}
	if ok, err := lib.DeviceCanAccessPeer(d1, d0); err != nil || !ok {
		t.Skipf("GPU 1 cannot access GPU 0 (%v)", err)
	}
	handles := cuda.HandleNone
	if attr(t, lib, cuda.AttrHandleTypePosixFDSupported, d0) == 1 {
		handles = cuda.HandlePosixFD
	}
	ctx0, ctx1 := retain(t, lib, d0), retain(t, lib, d1)

	setCtx(t, lib, ctx0)
	require.NoError(t, lib.CtxSynchronize())
	freeBefore, _, err := lib.MemGetInfo()
	require.NoError(t, err)

	prop := cuda.DeviceAllocationProp(d0, handles)
	gran, err := lib.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
	require.NoError(t, err)
	require.Positive(t, gran)
	size := gran * (2 + rand.Uint64N(3))
	t.Logf("granularity %d, allocation %d bytes, handle types %v", gran, size, handles)

	h, err := lib.MemCreate(size, &prop)
	require.NoError(t, err)
	va, err := lib.MemAddressReserve(size, gran, 0)
	require.NoError(t, err)
	require.Zero(t, uint64(va)%gran, "reservation aligned")
	require.NoError(t, lib.MemMap(va, size, 0, h))
	require.NoError(t, lib.MemSetAccess(va, size, []cuda.AccessDesc{
		{Location: cuda.DeviceLocation(d0), Flags: cuda.AccessReadWrite},
		{Location: cuda.DeviceLocation(d1), Flags: cuda.AccessReadWrite},
	}))
	freeDuring, _, err := lib.MemGetInfo()
	require.NoError(t, err)
	t.Logf("GPU 0 free: %d before, %d with the allocation mapped", freeBefore, freeDuring)

	for _, d := range []cuda.Device{d0, d1} {
		acc, err := lib.MemGetAccess(cuda.DeviceLocation(d), va)
		require.NoError(t, err)
		assert.Equal(t, cuda.AccessReadWrite, acc, "access of GPU %d", d)
	}
	got, err := lib.MemGetAllocationPropertiesFromHandle(h)
	require.NoError(t, err)
	assert.Equal(t, cuda.AllocationPinned, got.Type)
	assert.Equal(t, cuda.DeviceLocation(d0), got.Location)
	assert.Equal(t, handles, got.RequestedHandleTypes)
	rh, err := lib.MemRetainAllocationHandle(va + cuda.DevicePtr(gran))
	require.NoError(t, err)
	rprop, err := lib.MemGetAllocationPropertiesFromHandle(rh)
	require.NoError(t, err)
	assert.Equal(t, got, rprop, "the retained handle is the same allocation")
	require.NoError(t, lib.MemRelease(rh))
	start, err := lib.PointerGetAttribute(cuda.PointerAttrRangeStart, va+100)
	if err == nil {
		t.Logf("range start of va+100: %#x (va %#x)", start, uint64(va))
	} else {
		t.Logf("CU_POINTER_ATTRIBUTE_RANGE_START_ADDR on a VMM range: %v", err)
	}

	// GPU 1 writes the pattern into its own buffer, then copies it into
	// GPU 0's memory through the VMM mapping, from GPU 1's context.
	pattern := randomBytes(size)
	setCtx(t, lib, ctx1)
	buf1, err := lib.MemAlloc(size)
	require.NoError(t, err)
	ord, err := lib.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, buf1)
	require.NoError(t, err)
	assert.Equal(t, uint64(d1), ord)
	require.NoError(t, cuda.CopyHtoD(lib, buf1, pattern))
	require.NoError(t, lib.MemcpyDtoD(va, buf1, size))
	require.NoError(t, lib.CtxSynchronize())

	setCtx(t, lib, ctx0)
	back := make([]byte, size)
	require.NoError(t, cuda.CopyDtoH(lib, back, va))
	require.True(t, bytes.Equal(pattern, back), "GPU 0 reads back what GPU 1 wrote")

	if handles == cuda.HandlePosixFD {
		sh, err := lib.MemExportToShareableHandle(h, cuda.HandlePosixFD)
		require.NoError(t, err)
		require.GreaterOrEqual(t, sh.FD, 0)
		h2, err := lib.MemImportFromShareableHandle(sh)
		require.NoError(t, err)
		require.NoError(t, posixfd.Close(sh.FD))
		va2, err := lib.MemAddressReserve(size, gran, 0)
		require.NoError(t, err)
		require.NoError(t, lib.MemMap(va2, size, 0, h2))
		require.NoError(t, lib.MemSetAccess(va2, size, []cuda.AccessDesc{{Location: cuda.DeviceLocation(d0), Flags: cuda.AccessReadWrite}}))
		back2 := make([]byte, size)
		require.NoError(t, cuda.CopyDtoH(lib, back2, va2))
		assert.True(t, bytes.Equal(pattern, back2), "the imported handle maps the same memory")
		// A write through the second mapping shows through the first.
		v := uint8(rand.Uint32())
		require.NoError(t, lib.MemsetD8(va2, v, 4096))
		head := make([]byte, 4096)
		require.NoError(t, cuda.CopyDtoH(lib, head, va))
		assert.Equal(t, bytes.Repeat([]byte{v}, 4096), head)
		require.NoError(t, lib.MemUnmap(va2, size))
		require.NoError(t, lib.MemRelease(h2))
		require.NoError(t, lib.MemAddressFree(va2, size))
	} else {
		t.Log("GPU 0 has no POSIX FD handle support: export/import not exercised")
	}

	require.NoError(t, lib.MemUnmap(va, size))
	require.NoError(t, lib.MemRelease(h))
	require.NoError(t, lib.MemAddressFree(va, size))
	setCtx(t, lib, ctx1)
	require.NoError(t, lib.MemFree(buf1))

	setCtx(t, lib, ctx0)
	require.NoError(t, lib.CtxSynchronize())
	freeAfter, _, err := lib.MemGetInfo()
	require.NoError(t, err)
	t.Logf("GPU 0 free after release: %d (before %d)", freeAfter, freeBefore)
	assert.GreaterOrEqual(t, freeAfter+gran, freeBefore, "GPU 0's memory is back (within one granule)")
}

func loadFill(t testing.TB, lib *cuda.Lib, ctx cuda.Context) (cuda.Module, cuda.Function) {
	t.Helper()
	m, err := lib.ModuleLoadData([]byte(gputest.FillPTX))
	require.NoError(t, err)
	cleanupOn(t, lib, ctx, func() error { return lib.ModuleUnload(m) })
	f, err := lib.ModuleGetFunction(m, gputest.FillEntry)
	require.NoError(t, err)
	return m, f
}

func checkFill(t testing.TB, lib *cuda.Lib, p cuda.DevicePtr, n, val uint32) {
	t.Helper()
	host := make([]byte, 4*n)
	require.NoError(t, cuda.CopyDtoH(lib, host, p))
	for i := uint32(0); i < n; i++ {
		if got := binary.LittleEndian.Uint32(host[4*i:]); got != val^i {
			require.Failf(t, "wrong value", "out[%d] = %#x, want %#x", i, got, val^i)
		}
	}
}

func TestGPUModuleLaunch(t *testing.T) {
	lib, devs := gpuLib(t, 1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := retain(t, lib, devs[0])
	setCtx(t, lib, ctx)
	m, f := loadFill(t, lib, ctx)

	n := uint32(100000 + rand.IntN(100000))
	out, err := lib.MemAlloc(uint64(n+64) * 4)
	require.NoError(t, err)
	defer func() { assert.NoError(t, lib.MemFree(out)) }()
	s, err := lib.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	defer func() { assert.NoError(t, lib.StreamDestroy(s)) }()
	sctx, err := lib.StreamGetCtx(s)
	require.NoError(t, err)
	assert.Equal(t, ctx, sctx, "cuStreamGetCtx: the stream's context is the one it was created in")

	// MemsetD32 counts 32-bit words: the words past n stay as MemsetD8 left them.
	require.NoError(t, lib.MemsetD8(out, 0x5a, uint64(n+64)*4))
	sentinel := rand.Uint32()
	require.NoError(t, lib.MemsetD32(out, sentinel, uint64(n)))
	host := make([]byte, (n+64)*4)
	require.NoError(t, cuda.CopyDtoH(lib, host, out))
	assert.Equal(t, sentinel, binary.LittleEndian.Uint32(host[4*(n-1):]))
	assert.Equal(t, bytes.Repeat([]byte{0x5a}, 64*4), host[4*n:])

	e0, err := lib.EventCreate(cuda.EventDefault)
	require.NoError(t, err)
	defer func() { assert.NoError(t, lib.EventDestroy(e0)) }()
	e1, err := lib.EventCreate(cuda.EventDefault)
	require.NoError(t, err)
	defer func() { assert.NoError(t, lib.EventDestroy(e1)) }()

	val := rand.Uint32()
	p := &gputest.FillParams{Out: out, N: n, Val: val}
	grid := cuda.D1((n + 255) / 256)
	require.NoError(t, lib.EventRecord(e0, s))
	require.NoError(t, lib.LaunchKernel(f, grid, cuda.D1(256), 0, s, unsafe.Pointer(p), unsafe.Sizeof(*p)))
	require.NoError(t, lib.EventRecord(e1, s))
	require.NoError(t, lib.EventSynchronize(e1))
	require.NoError(t, lib.EventQuery(e1))
	require.NoError(t, lib.StreamQuery(s))
	ms, err := lib.EventElapsedTime(e0, e1)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ms, float32(0))
	t.Logf("fill of %d words: %.3f ms", n, ms)
	checkFill(t, lib, out, n, val)

	// The same launch captured into a graph and replayed.
	val2 := val ^ 0xffffffff
	p2 := &gputest.FillParams{Out: out, N: n, Val: val2}
	require.NoError(t, lib.StreamBeginCapture(s, cuda.CaptureModeThreadLocal))
	sctx, err = lib.StreamGetCtx(s) // legal while capturing (collectives asks then)
	require.NoError(t, err)
	assert.Equal(t, ctx, sctx)
	require.NoError(t, lib.LaunchKernel(f, grid, cuda.D1(256), 0, s, unsafe.Pointer(p2), unsafe.Sizeof(*p2)))
	g, err := lib.StreamEndCapture(s)
	require.NoError(t, err)
	defer func() { assert.NoError(t, lib.GraphDestroy(g)) }()
	checkFill(t, lib, out, n, val) // capturing did not run it
	x, err := lib.GraphInstantiate(g)
	require.NoError(t, err)
	defer func() { assert.NoError(t, lib.GraphExecDestroy(x)) }()
	for range 3 {
		require.NoError(t, lib.MemsetD32Async(out, 0, uint64(n), s))
		require.NoError(t, lib.GraphLaunch(x, s))
	}
	require.NoError(t, lib.StreamSynchronize(s))
	checkFill(t, lib, out, n, val2)

	// cuLaunchKernelEx, with programmatic stream serialization and without,
	// directly and captured: the fill kernel has no griddepcontrol.wait, so
	// each launch waits for the stream (synchronized) before the next.
	for i, programmatic := range []bool{false, true} {
		v := val ^ uint32(i+1)<<8
		pe := &gputest.FillParams{Out: out, N: n, Val: v}
		cfg := cuda.LaunchConfig{Grid: grid, Block: cuda.D1(256), Stream: s, Programmatic: programmatic}
		require.NoError(t, lib.LaunchKernelEx(f, cfg, unsafe.Pointer(pe), unsafe.Sizeof(*pe)))
		require.NoError(t, lib.StreamSynchronize(s))
		checkFill(t, lib, out, n, v)
		pe.Val = ^v
		require.NoError(t, lib.StreamBeginCapture(s, cuda.CaptureModeThreadLocal))
		require.NoError(t, lib.LaunchKernelEx(f, cfg, unsafe.Pointer(pe), unsafe.Sizeof(*pe)))
		ge, err := lib.StreamEndCapture(s)
		require.NoError(t, err)
		xe, err := lib.GraphInstantiate(ge)
		require.NoError(t, err)
		require.NoError(t, lib.GraphLaunch(xe, s))
		require.NoError(t, lib.StreamSynchronize(s))
		checkFill(t, lib, out, n, ^v)
		assert.NoError(t, lib.GraphExecDestroy(xe))
		assert.NoError(t, lib.GraphDestroy(ge))
	}

	_, err = lib.ModuleGetFunction(m, "no_such_kernel")
	require.ErrorIs(t, err, cuda.ErrNotFound)
}

func TestGPUModuleLoadInvalidPTX(t *testing.T) {
	lib, devs := gpuLib(t, 1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	setCtx(t, lib, retain(t, lib, devs[0]))

	bad := strings.Replace(gputest.FillPTX, "\txor.b32", "\tfrobnicate.u32 \t%r7, %r2;\n\txor.b32", 1)
	_, err := lib.ModuleLoadData([]byte(bad))
	require.Error(t, err)
	t.Logf("JIT failure: %v", err)
	var ce *cuda.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "cuModuleLoadDataEx", ce.Op)
	assert.ErrorIs(t, err, cuda.ErrInvalidPTX)
	assert.Contains(t, ce.Detail, "JIT error log")
	assert.Contains(t, ce.Detail, "frobnicate", "the log names the bad instruction")
}

// benchSetup returns a loaded Lib with GPU 0's context current on the
// benchmark's locked thread, the context, and a stream.
// TestGPUHostMappedMemory: mapped, portable page-locked host memory (what
// collectives' status words live in) is written by the device at the
// address cuMemHostGetDevicePointer gives, for every GPU's context, and
// read by the host at its own address without a copy.
func TestGPUHostMappedMemory(t *testing.T) {
	lib, devs := gpuLib(t, 1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := retain(t, lib, devs[0])
	setCtx(t, lib, ctx)
	p, err := lib.MemHostAlloc(4096, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap)
	require.NoError(t, err)
	cleanupOn(t, lib, ctx, func() error { return lib.MemFreeHost(p) })
	words := unsafe.Slice((*uint32)(p), 1024)
	for i, d := range devs {
		setCtx(t, lib, retain(t, lib, d))
		dp, err := lib.MemHostGetDevicePointer(unsafe.Add(p, 64*i), 0)
		require.NoError(t, err, "device %d", d)
		t.Logf("device %d: host %p, device %#x", d, unsafe.Add(p, 64*i), uint64(dp))
		v := rand.Uint32() | 1
		require.NoError(t, lib.MemsetD32(dp, v, 16), "device %d", d)
		for k := range 16 {
			require.Equal(t, v, atomic.LoadUint32(&words[16*i+k]), "device %d, word %d", d, k)
		}
	}
	setCtx(t, lib, 0)
}

// TestGPUStreamQueryNoContext: cuStreamQuery of a created (non-default)
// stream needs no current context, so that collectives' Sync can poll the
// ranks' streams from the calling goroutine, without their workers.
func TestGPUStreamQueryNoContext(t *testing.T) {
	lib, devs := gpuLib(t, 1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := retain(t, lib, devs[0])
	setCtx(t, lib, ctx)
	s, err := lib.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	cleanupOn(t, lib, ctx, func() error { return lib.StreamDestroy(s) })
	buf, err := lib.MemAlloc(64 << 20)
	require.NoError(t, err)
	cleanupOn(t, lib, ctx, func() error { return lib.MemFree(buf) })
	require.NoError(t, lib.MemsetD32Async(buf, 7, 16<<20, s))
	setCtx(t, lib, 0)
	cur, err := lib.CtxGetCurrent()
	require.NoError(t, err)
	require.Zero(t, cur)
	for {
		err := lib.StreamQuery(s)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, cuda.ErrNotReady, "cuStreamQuery without a current context")
	}
}

func benchSetup(b *testing.B) (*cuda.Lib, cuda.Context, cuda.Stream) {
	lib, devs := gpuLib(b, 1)
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	ctx := retain(b, lib, devs[0])
	setCtx(b, lib, ctx)
	s, err := lib.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error {
		if err := lib.StreamSynchronize(s); err != nil {
			return err
		}
		return lib.StreamDestroy(s)
	})
	b.ReportAllocs()
	return lib, ctx, s
}

// syncEvery keeps the stream's queue from filling up (a full queue makes
// the launch call block, which would measure the GPU, not the binding).
const syncEvery = 1024

// benchLaunches times launch, one launch of the fill kernel (one block of
// 256 threads over 256 words) on stream s with params p, in a loop that
// syncs every syncEvery launches.
func benchLaunches(b *testing.B, launch func(lib *cuda.Lib, f cuda.Function, s cuda.Stream, p unsafe.Pointer, size uintptr) error) {
	lib, ctx, s := benchSetup(b)
	_, f := loadFill(b, lib, ctx)
	out, err := lib.MemAlloc(4 * 256)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error { return lib.MemFree(out) })
	p := &gputest.FillParams{Out: out, N: 256, Val: 1}
	i := 0
	for b.Loop() {
		if err := launch(lib, f, s, unsafe.Pointer(p), unsafe.Sizeof(*p)); err != nil {
			b.Fatal(err)
		}
		if i++; i%syncEvery == 0 {
			_ = lib.StreamSynchronize(s)
		}
	}
}

func BenchmarkGPULaunchKernel(b *testing.B) {
	benchLaunches(b, func(lib *cuda.Lib, f cuda.Function, s cuda.Stream, p unsafe.Pointer, size uintptr) error {
		return lib.LaunchKernel(f, cuda.D1(1), cuda.D1(256), 0, s, p, size)
	})
}

// BenchmarkGPULaunchKernelEx: LaunchKernelEx's host cost, without and
// with programmatic stream serialization (the collectives' launches use
// it where PDL is on), beside BenchmarkGPULaunchKernel's.
func BenchmarkGPULaunchKernelEx(b *testing.B) {
	for _, pdl := range []bool{false, true} {
		b.Run("programmatic="+strconv.FormatBool(pdl), func(b *testing.B) {
			benchLaunches(b, func(lib *cuda.Lib, f cuda.Function, s cuda.Stream, p unsafe.Pointer, size uintptr) error {
				cfg := cuda.LaunchConfig{Grid: cuda.D1(1), Block: cuda.D1(256), Stream: s, Programmatic: pdl}
				return lib.LaunchKernelEx(f, cfg, p, size)
			})
		})
	}
}

func BenchmarkGPUEventRecord(b *testing.B) {
	lib, ctx, s := benchSetup(b)
	e, err := lib.EventCreate(cuda.EventDisableTiming)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error { return lib.EventDestroy(e) })
	for b.Loop() {
		if err := lib.EventRecord(e, s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGPUStreamWaitEvent(b *testing.B) {
	lib, ctx, s := benchSetup(b)
	e, err := lib.EventCreate(cuda.EventDisableTiming)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error { return lib.EventDestroy(e) })
	require.NoError(b, lib.EventRecord(e, s))
	i := 0
	for b.Loop() {
		if err := lib.StreamWaitEvent(s, e); err != nil {
			b.Fatal(err)
		}
		if i++; i%syncEvery == 0 {
			_ = lib.StreamSynchronize(s)
		}
	}
}

func BenchmarkGPUMemcpyDtoDAsync(b *testing.B) {
	lib, ctx, s := benchSetup(b)
	buf, err := lib.MemAlloc(512)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error { return lib.MemFree(buf) })
	i := 0
	for b.Loop() {
		if err := lib.MemcpyDtoDAsync(buf+256, buf, 256, s); err != nil {
			b.Fatal(err)
		}
		if i++; i%syncEvery == 0 {
			_ = lib.StreamSynchronize(s)
		}
	}
}

func BenchmarkGPUGraphLaunch(b *testing.B) {
	lib, ctx, s := benchSetup(b)
	_, f := loadFill(b, lib, ctx)
	out, err := lib.MemAlloc(4 * 256)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error { return lib.MemFree(out) })
	p := &gputest.FillParams{Out: out, N: 256, Val: 1}
	require.NoError(b, lib.StreamBeginCapture(s, cuda.CaptureModeThreadLocal))
	require.NoError(b, lib.LaunchKernel(f, cuda.D1(1), cuda.D1(256), 0, s, unsafe.Pointer(p), unsafe.Sizeof(*p)))
	g, err := lib.StreamEndCapture(s)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error { return lib.GraphDestroy(g) })
	x, err := lib.GraphInstantiate(g)
	require.NoError(b, err)
	cleanupOn(b, lib, ctx, func() error { return lib.GraphExecDestroy(x) })
	i := 0
	for b.Loop() {
		if err := lib.GraphLaunch(x, s); err != nil {
			b.Fatal(err)
		}
		if i++; i%syncEvery == 0 {
			_ = lib.StreamSynchronize(s)
		}
	}
}
