//go:build linux

package cuda_test

// Tests of the real binding against a fake libcuda (testdata/fakecuda.c),
// compiled at test time with the system's C compiler: the fake exports only
// cuGetProcAddress(_v2), records the version each entry point is asked at,
// records the arguments of every call, decodes the structs it is given with
// the C compiler's layout, and answers with values the test chooses. The
// tests skip where no C compiler is installed, and build on Linux only,
// the one system the binding loads libraries on (internal/dl).

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// Fake library variants: what the fake exports.
const (
	fakeDefault = "default" // cuGetProcAddress_v2 and cuGetProcAddress
	fakeNoV2    = "nov2"    // only the CUDA 11.3 cuGetProcAddress
	fakeNoGPA   = "nogpa"   // neither
)

var fakeBuild = struct {
	sync.Mutex
	dir   string
	paths map[string]string
}{paths: map[string]string{}}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeBuild.dir != "" {
		_ = os.RemoveAll(fakeBuild.dir)
	}
	os.Exit(code)
}

// fakePath compiles the fake library variant once per test binary.
func fakePath(t testing.TB, variant string) string {
	t.Helper()
	fakeBuild.Lock()
	defer fakeBuild.Unlock()
	if p, ok := fakeBuild.paths[variant]; ok {
		return p
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake libcuda: %v", cc, err)
	}
	if fakeBuild.dir == "" {
		dir, err := os.MkdirTemp("", "nvls-fakecuda-")
		require.NoError(t, err)
		fakeBuild.dir = dir
	}
	src := fakeSource(t)
	out := filepath.Join(fakeBuild.dir, "libfakecuda-"+variant+".so")
	args := []string{"-shared", "-fPIC", "-O1", "-o", out, src}
	switch variant {
	case fakeNoV2:
		args = append(args, "-DFAKE_NO_V2")
	case fakeNoGPA:
		args = append(args, "-DFAKE_NO_GPA")
	}
	msg, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "building the fake libcuda: %s", msg)
	fakeBuild.paths[variant] = out
	return out
}

// fakeSource finds testdata/fakecuda.c: beside the package when run by go
// test, or beside this file's source when a compiled test binary runs
// elsewhere.
func fakeSource(t testing.TB) string {
	t.Helper()
	candidates := []string{filepath.Join("testdata", "fakecuda.c")}
	if _, file, _, ok := runtime.Caller(0); ok {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "testdata", "fakecuda.c"))
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	t.Skipf("fake libcuda source not found (tried %v)", candidates)
	return ""
}

// fake is the test's handle on a fake library: its control functions.
type fake struct {
	path string

	reset            func()
	setDriverVersion func(int32)
	setOut           func(int32, uint64)
	setOutF32        func(float32)
	setFabric        func(*byte)
	forceResult      func(string, int32)
	setMissing       func(string, int32)
	requestedVersion func(string) int32
	requestedFlags   func(string) uint64
	requestCount     func() int32
	requestName      func(int32) string
	callCount        func(string) int32
	lastCall         func() string
	lastArg          func(int32) uint64
	blobFn           func(*byte, uint64) uint64
	gpaUsed          func() int32
}

// newFake builds (once) and loads the fake variant and resets its state.
// Configure it, then call open.
func newFake(t testing.TB, variant string) *fake {
	t.Helper()
	path := fakePath(t, variant)
	// A handle of our own keeps the library (and its state) loaded across
	// the binding's Open and Close.
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	f := &fake{path: path}
	reg := func(fptr any, name string) { purego.RegisterLibFunc(fptr, h, name) }
	reg(&f.reset, "fake_reset")
	reg(&f.setDriverVersion, "fake_set_driver_version")
	reg(&f.setOut, "fake_set_out")
	reg(&f.setOutF32, "fake_set_out_f32")
	reg(&f.setFabric, "fake_set_fabric")
	reg(&f.forceResult, "fake_force_result")
	reg(&f.setMissing, "fake_set_missing")
	reg(&f.requestedVersion, "fake_requested_version")
	reg(&f.requestedFlags, "fake_requested_flags")
	reg(&f.requestCount, "fake_request_count")
	reg(&f.requestName, "fake_request_name")
	reg(&f.callCount, "fake_call_count")
	reg(&f.lastCall, "fake_last_call")
	reg(&f.lastArg, "fake_last_arg")
	reg(&f.blobFn, "fake_blob")
	reg(&f.gpaUsed, "fake_gpa_used")
	f.reset()
	return f
}

func (f *fake) open(t testing.TB) *cuda.Lib {
	t.Helper()
	lib, err := cuda.OpenPathForTest(f.path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lib.Close() })
	return lib
}

// blob is what the last call read through its pointer argument.
func (f *fake) blob() []byte {
	buf := make([]byte, 4096)
	n := f.blobFn(&buf[0], uint64(len(buf)))
	return buf[:min(n, uint64(len(buf)))]
}

// args are the last call's first n recorded arguments.
func (f *fake) args(n int) []uint64 {
	a := make([]uint64, n)
	for i := range a {
		a[i] = f.lastArg(int32(i))
	}
	return a
}

// wantEntryPoints is the CUDA version whose ABI each entry point must be
// taken at (cudaTypedefs.h's PFN_<name>_v<version>), written here
// independently of the binding's table.
var wantEntryPoints = map[string]int32{
	"cuGetErrorName": 6000, "cuGetErrorString": 6000, "cuInit": 2000, "cuDriverGetVersion": 2020,
	"cuDeviceGetCount": 2000, "cuDeviceGet": 2000, "cuDeviceGetName": 2000, "cuDeviceGetAttribute": 2000,
	"cuDeviceTotalMem": 3020, "cuDeviceCanAccessPeer": 4000, "cuDeviceGetPCIBusId": 4010,
	"cuDevicePrimaryCtxRetain": 7000, "cuDevicePrimaryCtxRelease": 11000,
	"cuCtxSetCurrent": 4000, "cuCtxGetCurrent": 4000, "cuCtxSynchronize": 2000,
	"cuStreamCreate": 2000, "cuStreamDestroy": 4000, "cuStreamSynchronize": 2000, "cuStreamQuery": 2000, "cuStreamGetCtx": 9020,
	"cuStreamWaitEvent": 3020, "cuStreamBeginCapture": 10010, "cuStreamEndCapture": 10000,
	"cuGraphInstantiateWithFlags": 11040, "cuGraphLaunch": 10000, "cuGraphExecDestroy": 10000, "cuGraphDestroy": 10000,
	"cuEventCreate": 2000, "cuEventDestroy": 4000, "cuEventRecord": 2000, "cuEventSynchronize": 2000,
	"cuEventQuery": 2000, "cuEventElapsedTime": 2000,
	"cuModuleLoadDataEx": 2010, "cuModuleUnload": 2000, "cuModuleGetFunction": 2000, "cuLaunchKernel": 4000,
	"cuLaunchKernelEx": 11060,
	"cuMemGetInfo":     3020, "cuMemAlloc": 3020, "cuMemFree": 3020, "cuMemAllocManaged": 6000, "cuMemPrefetchAsync": 8000,
	"cuMemHostAlloc": 2020, "cuMemHostGetDevicePointer": 3020, "cuMemFreeHost": 2000,
	"cuMemcpyHtoD": 3020, "cuMemcpyDtoH": 3020, "cuMemcpyDtoD": 3020,
	"cuMemcpyHtoDAsync": 3020, "cuMemcpyDtoHAsync": 3020, "cuMemcpyDtoDAsync": 3020,
	"cuMemsetD8": 3020, "cuMemsetD32": 3020, "cuMemsetD8Async": 3020, "cuMemsetD32Async": 3020,
	"cuPointerGetAttribute":         4000,
	"cuMemGetAllocationGranularity": 10020, "cuMemCreate": 10020, "cuMemRelease": 10020,
	"cuMemAddressReserve": 10020, "cuMemAddressFree": 10020, "cuMemMap": 10020, "cuMemUnmap": 10020,
	"cuMemSetAccess": 10020, "cuMemGetAccess": 10020, "cuMemGetAllocationPropertiesFromHandle": 10020,
	"cuMemRetainAllocationHandle": 11000, "cuMemExportToShareableHandle": 10020, "cuMemImportFromShareableHandle": 10020,
	"cuMulticastGetGranularity": 12010, "cuMulticastCreate": 12010, "cuMulticastAddDevice": 12010,
	"cuMulticastBindMem": 12010, "cuMulticastBindAddr": 12010, "cuMulticastUnbind": 12010,
}

func TestFakeEntryPointVersions(t *testing.T) {
	f := newFake(t, fakeDefault)
	f.open(t)
	assert.Equal(t, int32(2), f.gpaUsed(), "entry points must come from cuGetProcAddress_v2")
	for name, v := range wantEntryPoints {
		assert.Equal(t, v, f.requestedVersion(name), "version %s is taken at", name)
		assert.Equal(t, uint64(1), f.requestedFlags(name), "flags for %s (CU_GET_PROC_ADDRESS_LEGACY_STREAM)", name)
	}
	var asked []string
	for i := int32(0); i < f.requestCount(); i++ {
		asked = append(asked, f.requestName(i))
	}
	for _, name := range asked {
		_, ok := wantEntryPoints[name]
		assert.True(t, ok, "the binding asked for %s, which the expected table lacks", name)
	}
	assert.Len(t, asked, len(wantEntryPoints))
	assert.Equal(t, int32(1), f.callCount("cuInit"), "Open runs cuInit once")
}

func TestFakeLegacyGetProcAddress(t *testing.T) {
	f := newFake(t, fakeNoV2)
	f.setMissing("cuMulticastCreate", 1)
	lib := f.open(t)
	assert.Equal(t, int32(1), f.gpaUsed())
	assert.Equal(t, int32(12010), f.requestedVersion("cuMulticastBindMem"))
	n := rand.Int32N(7) + 2
	f.setOut(0, uint64(n))
	got, err := lib.DeviceCount()
	require.NoError(t, err)
	assert.Equal(t, int(n), got)

	t.Setenv(cuda.EnvNVLSEnable, "1")
	_, err = lib.MulticastCreate(&cuda.MulticastProp{NumDevices: 2, Size: 1 << 21})
	require.ErrorIs(t, err, cuda.ErrNotSupported)
	assert.Contains(t, err.Error(), "cuMulticastCreate")
	assert.Equal(t, int32(0), f.callCount("cuMulticastCreate"))
}

func TestFakeNoGetProcAddress(t *testing.T) {
	f := newFake(t, fakeNoGPA)
	lib, err := cuda.OpenPathForTest(f.path)
	require.Error(t, err)
	assert.Nil(t, lib)
	assert.ErrorIs(t, err, cuda.ErrNoDriver)
	assert.Contains(t, err.Error(), "cuGetProcAddress_v2")
	assert.ErrorIs(t, err, cuda.ErrNotSupported)
	assert.EqualError(t, err, "cuda: no CUDA driver: "+f.path+": exports neither cuGetProcAddress_v2 nor cuGetProcAddress (a driver older than CUDA 11.3)")
}

func TestFakeInitFails(t *testing.T) {
	f := newFake(t, fakeDefault)
	f.forceResult("cuInit", int32(cuda.ErrorNoDevice))
	lib, err := cuda.OpenPathForTest(f.path)
	require.Error(t, err)
	assert.Nil(t, lib)
	assert.ErrorIs(t, err, cuda.ErrNoDriver)
	assert.ErrorIs(t, err, cuda.ErrNoDevicePresent)
	var ce *cuda.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "cuInit", ce.Op)
	assert.Equal(t, "FAKE_NAME_100", ce.Name, "the name comes from cuGetErrorName")
	assert.Equal(t, "fake description of error 100", ce.Detail)
	assert.EqualError(t, err, "cuda: no CUDA driver: "+f.path+": cuInit: FAKE_NAME_100 (100): fake description of error 100")
}

func TestFakeMissingEntryPoints(t *testing.T) {
	f := newFake(t, fakeDefault)
	f.setMissing("cuMemMap", 1)
	f.setMissing("cuMulticastBindMem", 2)
	f.setDriverVersion(12040)
	lib := f.open(t)

	err := lib.MemMap(0x1000, 1<<21, 0, 7)
	require.ErrorIs(t, err, cuda.ErrNotSupported)
	assert.NotErrorIs(t, err, cuda.ErrNoDriver)
	assert.Contains(t, err.Error(), "cuMemMap")
	assert.Contains(t, err.Error(), "symbol not found")
	assert.Contains(t, err.Error(), "12.4", "names the driver's version")
	assert.EqualError(t, err, "cuMemMap: not supported by driver 12.4: symbol not found (asked for the CUDA 10.2 ABI)")

	err = lib.MulticastBindMem(1, 0, 2, 0, 1<<21)
	require.ErrorIs(t, err, cuda.ErrNotSupported)
	assert.Contains(t, err.Error(), "cuMulticastBindMem")
	assert.Contains(t, err.Error(), "12.1 ABI")

	// The rest still works.
	p, size := cuda.DevicePtr(rand.Uint64()), rand.Uint64N(1<<40)
	require.NoError(t, lib.MemUnmap(p, size))
	assert.Equal(t, "cuMemUnmap", f.lastCall())
	assert.Equal(t, []uint64{uint64(p), size}, f.args(2))
}

func TestFakeErrors(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)

	f.forceResult("cuMemAlloc", int32(cuda.ErrorOutOfMemory))
	_, err := lib.MemAlloc(1 << 30)
	require.ErrorIs(t, err, cuda.ErrOutOfMemory)
	var ce *cuda.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, cuda.Error{Op: "cuMemAlloc", Code: cuda.ErrorOutOfMemory, Name: "FAKE_NAME_2",
		Detail: "fake description of error 2"}, *ce)

	// Without cuGetErrorName's answer the name comes from the package's table.
	f.forceResult("cuGetErrorName", int32(cuda.ErrorInvalidValue))
	_, err = lib.MemAlloc(1 << 30)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", ce.Name)

	// A code the table lacks still reads sensibly.
	code := int32(4000 + rand.IntN(900))
	f.forceResult("cuMemFree", code)
	f.forceResult("cuGetErrorString", int32(cuda.ErrorInvalidValue))
	err = lib.MemFree(1)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, cuda.Result(code), ce.Code)
	assert.Contains(t, ce.Error(), "cuMemFree")
	assert.Empty(t, ce.Detail)
	assert.NotErrorIs(t, err, cuda.ErrOutOfMemory)
}

func TestFakeQueries(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	s, e := cuda.Stream(rand.Uint64()), cuda.Event(rand.Uint64())

	require.NoError(t, lib.StreamQuery(s))
	assert.Equal(t, uint64(s), f.lastArg(0))
	require.NoError(t, lib.EventQuery(e))
	assert.Equal(t, uint64(e), f.lastArg(0))

	f.forceResult("cuStreamQuery", int32(cuda.ErrorNotReady))
	f.forceResult("cuEventQuery", int32(cuda.ErrorNotReady))
	err1, err2 := lib.StreamQuery(s), lib.StreamQuery(s)
	require.ErrorIs(t, err1, cuda.ErrNotReady)
	assert.Same(t, err1, err2, "polling returns one preallocated error")
	var ce *cuda.Error
	require.ErrorAs(t, err1, &ce)
	assert.Equal(t, "cuStreamQuery", ce.Op)
	err := lib.EventQuery(e)
	require.ErrorIs(t, err, cuda.ErrNotReady)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "cuEventQuery", ce.Op)

	f.forceResult("cuStreamQuery", int32(cuda.ErrorIllegalAddress))
	err = lib.StreamQuery(s)
	require.ErrorIs(t, err, cuda.ErrIllegalAddress)
	assert.NotErrorIs(t, err, cuda.ErrNotReady)

	// cuStreamGetCtx: the stream in, the context out through the pointer.
	want := rand.Uint64()
	f.setOut(0, want)
	c, err := lib.StreamGetCtx(s)
	require.NoError(t, err)
	assert.Equal(t, cuda.Context(want), c)
	assert.Equal(t, uint64(s), f.lastArg(0))
	f.forceResult("cuStreamGetCtx", int32(cuda.ErrorInvalidHandle))
	_, err = lib.StreamGetCtx(s)
	require.ErrorIs(t, err, cuda.ErrInvalidHandle)
}

// launchParams is a 64-byte kernel parameter struct.
type launchParams struct {
	A, B, C, D uint64
	E          [8]uint32
}

func TestFakeLaunchKernel(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	p := &launchParams{A: rand.Uint64(), B: rand.Uint64(), C: rand.Uint64(), D: rand.Uint64()}
	for i := range p.E {
		p.E[i] = rand.Uint32()
	}
	want := make([]byte, 64)
	binary.LittleEndian.PutUint64(want[0:], p.A)
	binary.LittleEndian.PutUint64(want[8:], p.B)
	binary.LittleEndian.PutUint64(want[16:], p.C)
	binary.LittleEndian.PutUint64(want[24:], p.D)
	for i, v := range p.E {
		binary.LittleEndian.PutUint32(want[32+4*i:], v)
	}
	fn := cuda.Function(rand.Uint64())
	grid := cuda.Dim3{X: rand.Uint32(), Y: rand.Uint32N(100) + 1, Z: rand.Uint32N(100) + 1}
	block := cuda.Dim3{X: rand.Uint32N(1024) + 1, Y: rand.Uint32N(4) + 1, Z: 1}
	shmem, s := rand.Uint32N(1<<16), cuda.Stream(rand.Uint64())

	require.NoError(t, lib.LaunchKernel(fn, grid, block, shmem, s, unsafe.Pointer(p), unsafe.Sizeof(*p)))
	assert.Equal(t, "cuLaunchKernel", f.lastCall())
	args := f.args(11)
	assert.Equal(t, []uint64{uint64(fn), uint64(grid.X), uint64(grid.Y), uint64(grid.Z),
		uint64(block.X), uint64(block.Y), uint64(block.Z), uint64(shmem), uint64(s)}, args[:9])
	assert.NotZero(t, args[9], "kernelParams")
	assert.Zero(t, args[10], "extra must be NULL")
	assert.Equal(t, want, f.blob(), "kernelParams[0] points at the params struct")

	require.NoError(t, lib.LaunchKernel(fn, grid, block, 0, s, nil, 0))
	assert.Zero(t, f.lastArg(9), "no params: kernelParams is NULL")
	err := lib.LaunchKernel(fn, grid, block, 0, s, nil, 8)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
}

func TestFakeLaunchKernelEx(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	p := &launchParams{A: rand.Uint64(), B: rand.Uint64(), C: rand.Uint64(), D: rand.Uint64()}
	want := make([]byte, 64)
	binary.LittleEndian.PutUint64(want[0:], p.A)
	binary.LittleEndian.PutUint64(want[8:], p.B)
	binary.LittleEndian.PutUint64(want[16:], p.C)
	binary.LittleEndian.PutUint64(want[24:], p.D)
	fn := cuda.Function(rand.Uint64())
	cfg := cuda.LaunchConfig{
		Grid:      cuda.Dim3{X: rand.Uint32(), Y: rand.Uint32N(100) + 1, Z: rand.Uint32N(100) + 1},
		Block:     cuda.Dim3{X: rand.Uint32N(1024) + 1, Y: rand.Uint32N(4) + 1, Z: 1},
		SharedMem: rand.Uint32N(1 << 16), Stream: cuda.Stream(rand.Uint64()),
	}
	for _, programmatic := range []bool{false, true} {
		cfg.Programmatic = programmatic
		require.NoError(t, lib.LaunchKernelEx(fn, cfg, unsafe.Pointer(p), unsafe.Sizeof(*p)))
		assert.Equal(t, "cuLaunchKernelEx", f.lastCall())
		args := f.args(15)
		assert.Equal(t, []uint64{uint64(fn), uint64(cfg.Grid.X), uint64(cfg.Grid.Y), uint64(cfg.Grid.Z),
			uint64(cfg.Block.X), uint64(cfg.Block.Y), uint64(cfg.Block.Z), uint64(cfg.SharedMem), uint64(cfg.Stream)}, args[:9],
			"CUlaunchConfig as the C compiler lays it out")
		assert.NotZero(t, args[9], "kernelParams")
		assert.Zero(t, args[10], "extra must be NULL")
		assert.Equal(t, uint64(56)<<32|72, args[14], "sizeof CUlaunchConfig, CUlaunchAttribute in C")
		assert.Equal(t, want, f.blob(), "kernelParams[0] points at the params struct")
		if programmatic {
			assert.Equal(t, []uint64{1, 6, 1}, args[11:14], "one attribute: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6), allowed")
		} else {
			assert.Zero(t, args[11], "no attribute")
		}
	}
	err := lib.LaunchKernelEx(fn, cfg, nil, 8)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
}

// propBytes is CUmemAllocationProp as the header lays it out.
func propBytes(p cuda.AllocationProp) []byte {
	b := make([]byte, 32)
	binary.LittleEndian.PutUint32(b[0:], uint32(p.Type))
	binary.LittleEndian.PutUint32(b[4:], uint32(p.RequestedHandleTypes))
	binary.LittleEndian.PutUint32(b[8:], uint32(p.Location.Type))
	binary.LittleEndian.PutUint32(b[12:], uint32(p.Location.ID))
	binary.LittleEndian.PutUint64(b[16:], uint64(p.Win32HandleMetaData))
	b[24] = p.Flags.CompressionType
	b[25] = p.Flags.GPUDirectRDMACapable
	binary.LittleEndian.PutUint16(b[26:], p.Flags.Usage)
	copy(b[28:], p.Flags.Reserved[:])
	return b
}

func TestFakeVMM(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	dev := cuda.Device(rand.Int32N(8))
	prop := cuda.DeviceAllocationProp(dev, cuda.HandlePosixFD|cuda.HandleFabric)
	prop.Flags = cuda.AllocFlags{CompressionType: cuda.CompressionGeneric, GPUDirectRDMACapable: 1, Usage: uint16(rand.Uint32N(1 << 16))}
	prop.Win32HandleMetaData = uintptr(rand.Uint64())
	decoded := []uint64{uint64(prop.Type), uint64(prop.RequestedHandleTypes), uint64(prop.Location.Type), uint64(prop.Location.ID),
		uint64(prop.Win32HandleMetaData), uint64(prop.Flags.CompressionType), uint64(prop.Flags.GPUDirectRDMACapable), uint64(prop.Flags.Usage)}

	gran := rand.Uint64()
	f.setOut(0, gran)
	g, err := lib.MemGetAllocationGranularity(&prop, cuda.GranularityRecommended)
	require.NoError(t, err)
	assert.Equal(t, gran, g)
	a := f.args(12)
	assert.Equal(t, uint64(cuda.GranularityRecommended), a[2])
	assert.Equal(t, decoded, a[4:12], "the C side's view of CUmemAllocationProp")
	assert.Equal(t, propBytes(prop), f.blob())

	h := rand.Uint64()
	f.setOut(0, h)
	size := rand.Uint64N(1 << 40)
	mh, err := lib.MemCreate(size, &prop)
	require.NoError(t, err)
	assert.Equal(t, cuda.MemHandle(h), mh)
	a = f.args(12)
	assert.Equal(t, size, a[1])
	assert.Zero(t, a[3], "flags")
	assert.Equal(t, decoded, a[4:12])
	assert.Equal(t, propBytes(prop), f.blob())

	va := rand.Uint64()
	f.setOut(0, va)
	align, hint := rand.Uint64(), rand.Uint64()
	p, err := lib.MemAddressReserve(size, align, cuda.DevicePtr(hint))
	require.NoError(t, err)
	assert.Equal(t, cuda.DevicePtr(va), p)
	assert.Equal(t, []uint64{size, align, hint, 0}, f.args(5)[1:])

	off := rand.Uint64()
	require.NoError(t, lib.MemMap(p, size, off, mh))
	assert.Equal(t, []uint64{va, size, off, h, 0}, f.args(5))

	descs := []cuda.AccessDesc{
		{Location: cuda.DeviceLocation(dev), Flags: cuda.AccessReadWrite},
		{Location: cuda.DeviceLocation(dev + 1), Flags: cuda.AccessRead},
		{Location: cuda.MemLocation{Type: cuda.LocationHost, ID: rand.Int32()}, Flags: cuda.AccessNone},
	}
	require.NoError(t, lib.MemSetAccess(p, size, descs))
	a = f.args(13)
	assert.Equal(t, []uint64{va, size}, a[:2])
	assert.Equal(t, uint64(3), a[3], "count")
	for i, d := range descs {
		assert.Equal(t, []uint64{uint64(d.Location.Type), uint64(d.Location.ID), uint64(d.Flags)}, a[4+3*i:7+3*i], "descriptor %d", i)
	}
	assert.Len(t, f.blob(), 36, "three 12-byte CUmemAccessDesc")
	assert.ErrorIs(t, lib.MemSetAccess(p, size, nil), cuda.ErrInvalidValue)

	f.setOut(0, uint64(cuda.AccessReadWrite))
	loc := cuda.DeviceLocation(cuda.Device(rand.Int32N(8)))
	acc, err := lib.MemGetAccess(loc, p)
	require.NoError(t, err)
	assert.Equal(t, cuda.AccessReadWrite, acc)
	a = f.args(6)
	assert.Equal(t, va, a[2])
	assert.Equal(t, []uint64{uint64(loc.Type), uint64(loc.ID)}, a[4:6])

	ht, id, usage := rand.Uint32N(16), rand.Uint32N(8), rand.Uint32N(1<<16)
	f.setOut(0, uint64(ht))
	f.setOut(1, uint64(id))
	f.setOut(2, uint64(usage))
	got, err := lib.MemGetAllocationPropertiesFromHandle(mh)
	require.NoError(t, err)
	assert.Equal(t, cuda.AllocationProp{Type: cuda.AllocationPinned, RequestedHandleTypes: cuda.HandleType(ht),
		Location: cuda.MemLocation{Type: cuda.LocationDevice, ID: int32(id)},
		Flags:    cuda.AllocFlags{CompressionType: 1, GPUDirectRDMACapable: 1, Usage: uint16(usage)}}, got)
	assert.Equal(t, h, f.lastArg(1))

	rh := rand.Uint64()
	f.setOut(0, rh)
	got2, err := lib.MemRetainAllocationHandle(p + 4096)
	require.NoError(t, err)
	assert.Equal(t, cuda.MemHandle(rh), got2)
	assert.Equal(t, va+4096, f.lastArg(1), "the address travels as the void* value")

	require.NoError(t, lib.MemUnmap(p, size))
	assert.Equal(t, []uint64{va, size}, f.args(2))
	require.NoError(t, lib.MemRelease(mh))
	assert.Equal(t, h, f.lastArg(0))
	require.NoError(t, lib.MemAddressFree(p, size))
	assert.Equal(t, []uint64{va, size}, f.args(2))
	assert.Equal(t, "cuMemAddressFree", f.lastCall())
}

func TestFakeShareableHandles(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	h := cuda.MemHandle(rand.Uint64())

	fd := rand.Int32N(1 << 20)
	f.setOut(0, uint64(fd))
	sh, err := lib.MemExportToShareableHandle(h, cuda.HandlePosixFD)
	require.NoError(t, err)
	assert.Equal(t, cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: int(fd)}, sh)
	assert.Equal(t, []uint64{uint64(h), 1, 0}, f.args(4)[1:])

	var fab cuda.FabricHandle
	for i := range fab {
		fab[i] = byte(rand.Uint32())
	}
	f.setFabric(&fab[0])
	sh, err = lib.MemExportToShareableHandle(h, cuda.HandleFabric)
	require.NoError(t, err)
	assert.Equal(t, cuda.HandleFabric, sh.Type)
	assert.Equal(t, fab, sh.Fabric)
	assert.Equal(t, uint64(8), f.lastArg(2))

	calls := f.callCount("cuMemExportToShareableHandle")
	_, err = lib.MemExportToShareableHandle(h, cuda.HandleWin32)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
	assert.Equal(t, calls, f.callCount("cuMemExportToShareableHandle"), "not passed to the driver")

	ih := rand.Uint64()
	f.setOut(0, ih)
	ifd := int(rand.Int32N(1 << 20))
	got, err := lib.MemImportFromShareableHandle(cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: ifd})
	require.NoError(t, err)
	assert.Equal(t, cuda.MemHandle(ih), got)
	assert.Equal(t, []uint64{uint64(ifd), 1}, f.args(3)[1:], "the FD's value cast to a pointer")

	var ifab cuda.FabricHandle
	for i := range ifab {
		ifab[i] = byte(rand.Uint32())
	}
	_, err = lib.MemImportFromShareableHandle(cuda.ShareableHandle{Type: cuda.HandleFabric, Fabric: ifab})
	require.NoError(t, err)
	assert.Equal(t, uint64(8), f.lastArg(2))
	assert.Equal(t, ifab[:], f.blob(), "a pointer to the 64 bytes")

	_, err = lib.MemImportFromShareableHandle(cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: -1})
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
	_, err = lib.MemImportFromShareableHandle(cuda.ShareableHandle{Type: cuda.HandleNone})
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
}

func TestFakeMulticast(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	prop := cuda.MulticastProp{NumDevices: rand.Uint32N(8) + 1, Size: rand.Uint64(), HandleTypes: uint64(cuda.HandlePosixFD), Flags: rand.Uint64()}
	decoded := []uint64{uint64(prop.NumDevices), prop.Size, prop.HandleTypes, prop.Flags}

	t.Setenv(cuda.EnvNVLSEnable, "0")
	_, err := lib.MulticastCreate(&prop)
	require.ErrorIs(t, err, cuda.ErrMulticastDisabled)
	assert.Equal(t, int32(0), f.callCount("cuMulticastCreate"), "the driver is not called")

	require.NoError(t, os.Unsetenv(cuda.EnvNVLSEnable))
	mc := rand.Uint64()
	f.setOut(0, mc)
	got, err := lib.MulticastCreate(&prop)
	require.NoError(t, err)
	assert.Equal(t, cuda.MemHandle(mc), got)
	assert.Equal(t, int32(1), f.callCount("cuMulticastCreate"))
	assert.Equal(t, decoded, f.args(8)[4:8], "the C side's view of CUmulticastObjectProp")

	g := rand.Uint64()
	f.setOut(0, g)
	gg, err := lib.MulticastGetGranularity(&prop, cuda.GranularityMinimum)
	require.NoError(t, err)
	assert.Equal(t, g, gg)
	assert.Equal(t, decoded, f.args(8)[4:8])

	dev := cuda.Device(rand.Int32N(8))
	require.NoError(t, lib.MulticastAddDevice(cuda.MemHandle(mc), dev))
	assert.Equal(t, []uint64{mc, uint64(dev)}, f.args(2))

	mcOff, mem, memOff, size := rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()
	require.NoError(t, lib.MulticastBindMem(cuda.MemHandle(mc), mcOff, cuda.MemHandle(mem), memOff, size))
	assert.Equal(t, []uint64{mc, mcOff, mem, memOff, size, 0}, f.args(6))
	addr := rand.Uint64()
	require.NoError(t, lib.MulticastBindAddr(cuda.MemHandle(mc), mcOff, cuda.DevicePtr(addr), size))
	assert.Equal(t, []uint64{mc, mcOff, addr, size, 0}, f.args(5))
	require.NoError(t, lib.MulticastUnbind(cuda.MemHandle(mc), dev, mcOff, size))
	assert.Equal(t, []uint64{mc, uint64(dev), mcOff, size}, f.args(4))
}

func TestFakeModuleLoadData(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	ptx := ".version 8.0\n.target sm_90\n// " + randomWord() + "\n"
	// The image sits in a larger buffer whose tail is not NUL: the binding
	// must not read past len(image), nor write into the tail.
	buf := []byte(ptx + "TAIL")
	img := buf[:len(ptx)]
	mod := rand.Uint64()
	f.setOut(0, mod)
	m, err := lib.ModuleLoadData(img)
	require.NoError(t, err)
	assert.Equal(t, cuda.Module(mod), m)
	assert.Equal(t, []byte(ptx), f.blob(), "the driver sees the PTX and a NUL")
	assert.Equal(t, "TAIL", string(buf[len(ptx):]))
	a := f.args(8)
	assert.NotEqual(t, uint64(uintptr(unsafe.Pointer(&img[0]))), a[1], "a copy with a NUL is passed")
	assert.Equal(t, uint64(4), a[2], "four JIT options")
	assert.ElementsMatch(t, []uint64{3, 4, 5, 6}, a[4:8], "the info and error log options")

	// NUL-terminated PTX and ELF images pass as they are.
	withNUL := []byte(ptx + "\x00")
	_, err = lib.ModuleLoadData(withNUL)
	require.NoError(t, err)
	assert.Equal(t, uint64(uintptr(unsafe.Pointer(&withNUL[0]))), f.lastArg(1))
	elf := []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xbe\x00")
	_, err = lib.ModuleLoadData(elf)
	require.NoError(t, err)
	assert.Equal(t, uint64(uintptr(unsafe.Pointer(&elf[0]))), f.lastArg(1))

	_, err = lib.ModuleLoadData(nil)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)

	_, err = lib.ModuleLoadData([]byte(ptx + "FAKE_JIT_ERROR\n"))
	require.ErrorIs(t, err, cuda.ErrInvalidPTX)
	var ce *cuda.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "cuModuleLoadDataEx", ce.Op)
	assert.Contains(t, ce.Detail, "fake description of error 218")
	assert.Contains(t, ce.Detail, "unknown instruction 'frobnicate'", "the JIT error log")
	assert.Contains(t, ce.Detail, "used 0 registers", "the JIT info log")

	fn := rand.Uint64()
	f.setOut(0, fn)
	name := "nvls_" + randomWord()
	got, err := lib.ModuleGetFunction(m, name)
	require.NoError(t, err)
	assert.Equal(t, cuda.Function(fn), got)
	assert.Equal(t, []byte(name), f.blob())
	assert.Equal(t, mod, f.lastArg(1))
	_, err = lib.ModuleGetFunction(m, "no_such_kernel")
	require.ErrorIs(t, err, cuda.ErrNotFound)
	assert.Contains(t, err.Error(), "no_such_kernel")

	require.NoError(t, lib.ModuleUnload(m))
	assert.Equal(t, mod, f.lastArg(0))
}

func randomWord() string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 12)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}

func TestFakeDevicesAndContexts(t *testing.T) {
	f := newFake(t, fakeDefault)
	f.setDriverVersion(12080)
	lib := f.open(t)
	assert.Equal(t, "cuda", lib.Name())
	v, err := lib.DriverVersion()
	require.NoError(t, err)
	assert.Equal(t, 12080, v)
	require.NoError(t, lib.Init())

	dev := cuda.Device(rand.Int32N(200))
	name, err := lib.DeviceName(dev)
	require.NoError(t, err)
	assert.Equal(t, "Fake GPU "+strconv.Itoa(int(dev)), name)
	assert.Equal(t, uint64(256), f.lastArg(1), "a 256-byte name buffer")

	bus, err := lib.DevicePCIBusID(dev)
	require.NoError(t, err)
	assert.Len(t, bus, len("0000:00:00.0"))
	assert.Equal(t, uint64(dev), f.lastArg(2))

	ord := rand.IntN(8)
	f.setOut(0, uint64(dev))
	d, err := lib.DeviceGet(ord)
	require.NoError(t, err)
	assert.Equal(t, dev, d)
	assert.Equal(t, uint64(ord), f.lastArg(1))

	val := rand.Int32()
	f.setOut(0, uint64(val))
	got, err := lib.DeviceAttribute(cuda.AttrMulticastSupported, dev)
	require.NoError(t, err)
	assert.Equal(t, int(val), got)
	assert.Equal(t, []uint64{132, uint64(dev)}, f.args(3)[1:])

	mem := rand.Uint64()
	f.setOut(0, mem)
	tm, err := lib.DeviceTotalMem(dev)
	require.NoError(t, err)
	assert.Equal(t, mem, tm)

	for _, want := range []bool{true, false} {
		f.setOut(0, map[bool]uint64{true: 1, false: 0}[want])
		ok, err := lib.DeviceCanAccessPeer(dev, dev+1)
		require.NoError(t, err)
		assert.Equal(t, want, ok)
		assert.Equal(t, []uint64{uint64(dev), uint64(dev + 1)}, f.args(3)[1:])
	}

	ctx := rand.Uint64()
	f.setOut(0, ctx)
	c, err := lib.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	assert.Equal(t, cuda.Context(ctx), c)
	require.NoError(t, lib.CtxSetCurrent(c))
	assert.Equal(t, ctx, f.lastArg(0))
	cur, err := lib.CtxGetCurrent()
	require.NoError(t, err)
	assert.Equal(t, c, cur)
	require.NoError(t, lib.CtxSynchronize())
	assert.Equal(t, "cuCtxSynchronize", f.lastCall())
	require.NoError(t, lib.PrimaryCtxRelease(dev))
	assert.Equal(t, uint64(dev), f.lastArg(0))

	free, total := rand.Uint64(), rand.Uint64()
	f.setOut(0, free)
	f.setOut(1, total)
	gf, gt, err := lib.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, []uint64{free, total}, []uint64{gf, gt})
}

func TestFakeStreamsEventsGraphs(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)

	sv := rand.Uint64()
	f.setOut(0, sv)
	s, err := lib.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	assert.Equal(t, cuda.Stream(sv), s)
	assert.Equal(t, uint64(cuda.StreamNonBlocking), f.lastArg(1))

	ev := rand.Uint64()
	f.setOut(0, ev)
	e, err := lib.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)
	assert.Equal(t, cuda.Event(ev), e)
	assert.Equal(t, uint64(cuda.EventDisableTiming), f.lastArg(1))

	require.NoError(t, lib.EventRecord(e, s))
	assert.Equal(t, []uint64{ev, sv}, f.args(2))
	require.NoError(t, lib.StreamWaitEvent(s, e))
	assert.Equal(t, []uint64{sv, ev, 0}, f.args(3))
	require.NoError(t, lib.EventSynchronize(e))
	assert.Equal(t, ev, f.lastArg(0))
	require.NoError(t, lib.StreamSynchronize(s))
	assert.Equal(t, "cuStreamSynchronize", f.lastCall())

	ms := rand.Float32() * 1000
	f.setOutF32(ms)
	e2 := cuda.Event(rand.Uint64())
	got, err := lib.EventElapsedTime(e, e2)
	require.NoError(t, err)
	assert.Equal(t, ms, got)
	assert.Equal(t, []uint64{ev, uint64(e2)}, f.args(3)[1:])

	require.NoError(t, lib.StreamBeginCapture(s, cuda.CaptureModeRelaxed))
	assert.Equal(t, []uint64{sv, 2}, f.args(2))
	gv := rand.Uint64()
	f.setOut(0, gv)
	g, err := lib.StreamEndCapture(s)
	require.NoError(t, err)
	assert.Equal(t, cuda.Graph(gv), g)
	xv := rand.Uint64()
	f.setOut(0, xv)
	x, err := lib.GraphInstantiate(g)
	require.NoError(t, err)
	assert.Equal(t, cuda.GraphExec(xv), x)
	assert.Equal(t, []uint64{gv, 0}, f.args(3)[1:])
	require.NoError(t, lib.GraphLaunch(x, s))
	assert.Equal(t, []uint64{xv, sv}, f.args(2))
	require.NoError(t, lib.GraphExecDestroy(x))
	assert.Equal(t, xv, f.lastArg(0))
	require.NoError(t, lib.GraphDestroy(g))
	assert.Equal(t, gv, f.lastArg(0))
	require.NoError(t, lib.EventDestroy(e))
	assert.Equal(t, "cuEventDestroy", f.lastCall())
	require.NoError(t, lib.StreamDestroy(s))
	assert.Equal(t, "cuStreamDestroy", f.lastCall())
	assert.Equal(t, sv, f.lastArg(0))
}

func TestFakeMemory(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	dst, src := rand.Uint64(), rand.Uint64()
	s := cuda.Stream(rand.Uint64())

	pv := rand.Uint64()
	f.setOut(0, pv)
	n := rand.Uint64N(1 << 40)
	p, err := lib.MemAlloc(n)
	require.NoError(t, err)
	assert.Equal(t, cuda.DevicePtr(pv), p)
	assert.Equal(t, n, f.lastArg(1))
	mp, err := lib.MemAllocManaged(n, cuda.MemAttachGlobal)
	require.NoError(t, err)
	assert.Equal(t, cuda.DevicePtr(pv), mp)
	assert.Equal(t, []uint64{n, 1}, f.args(3)[1:])
	require.NoError(t, lib.MemPrefetchAsync(mp, n, cuda.CPUDevice, s))
	assert.Equal(t, []uint64{pv, n, ^uint64(0), uint64(s)}, f.args(4), "CU_DEVICE_CPU is -1")
	require.NoError(t, lib.MemFree(p))
	assert.Equal(t, pv, f.lastArg(0))

	host := make([]byte, 1000+rand.IntN(2000))
	for i := range host {
		host[i] = byte(rand.Uint32())
	}
	require.NoError(t, cuda.CopyHtoD(lib, cuda.DevicePtr(dst), host))
	assert.Equal(t, host, f.blob())
	assert.Equal(t, []uint64{dst, uint64(len(host))}, []uint64{f.lastArg(0), f.lastArg(2)})
	require.NoError(t, lib.MemcpyHtoDAsync(cuda.DevicePtr(dst), unsafe.Pointer(&host[0]), 100, s))
	assert.Equal(t, host[:100], f.blob())
	assert.Equal(t, uint64(s), f.lastArg(3))

	seed := rand.Uint64()
	f.setOut(0, seed)
	back := make([]byte, 777)
	require.NoError(t, cuda.CopyDtoH(lib, back, cuda.DevicePtr(src)))
	for i := range back {
		require.Equal(t, byte(seed+7*uint64(i)), back[i], "byte %d", i)
	}
	back2 := make([]byte, 64)
	require.NoError(t, lib.MemcpyDtoHAsync(unsafe.Pointer(&back2[0]), cuda.DevicePtr(src), 64, s))
	assert.Equal(t, back[:64], back2)
	assert.Equal(t, []uint64{src, 64, uint64(s)}, f.args(4)[1:])

	require.NoError(t, lib.MemcpyDtoD(cuda.DevicePtr(dst), cuda.DevicePtr(src), n))
	assert.Equal(t, []uint64{dst, src, n}, f.args(3))
	require.NoError(t, lib.MemcpyDtoDAsync(cuda.DevicePtr(dst), cuda.DevicePtr(src), n, s))
	assert.Equal(t, []uint64{dst, src, n, uint64(s)}, f.args(4))

	b8, w32 := uint8(rand.Uint32()), rand.Uint32()
	require.NoError(t, lib.MemsetD8(cuda.DevicePtr(dst), b8, n))
	assert.Equal(t, []uint64{dst, uint64(b8), n}, f.args(3))
	require.NoError(t, lib.MemsetD32(cuda.DevicePtr(dst), w32, n))
	assert.Equal(t, []uint64{dst, uint64(w32), n}, f.args(3))
	require.NoError(t, lib.MemsetD8Async(cuda.DevicePtr(dst), b8, n, s))
	assert.Equal(t, []uint64{dst, uint64(b8), n, uint64(s)}, f.args(4))
	require.NoError(t, lib.MemsetD32Async(cuda.DevicePtr(dst), w32, n, s))
	assert.Equal(t, []uint64{dst, uint64(w32), n, uint64(s)}, f.args(4))
	assert.Equal(t, "cuMemsetD32Async", f.lastCall())
}

// TestFakeHostMemory: cuMemHostAlloc writes the host pointer through its
// first argument and takes size and flags; cuMemHostGetDevicePointer (the
// _v2 ABI) takes the host pointer and flags and writes the device address;
// cuMemFreeHost takes the pointer. The memory is the fake's own: the
// binding hands it back unchanged.
func TestFakeHostMemory(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	n := 8 + rand.Uint64N(200)
	flags := cuda.MemHostAllocPortable | cuda.MemHostAllocDeviceMap
	p, err := lib.MemHostAlloc(n, flags)
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.Equal(t, []uint64{n, uint64(flags)}, f.args(3)[1:])
	assert.Equal(t, byte(0xA5), *(*byte)(p), "the fake's memory, through the returned pointer")
	base := rand.Uint64() &^ 0xffff
	f.setOut(1, base)
	d, err := lib.MemHostGetDevicePointer(unsafe.Add(p, 8), 0)
	require.NoError(t, err)
	assert.Equal(t, cuda.DevicePtr(base+8), d)
	assert.Equal(t, []uint64{uint64(uintptr(p)) + 8, 0}, f.args(3)[1:])
	require.NoError(t, lib.MemFreeHost(p))
	assert.Equal(t, uint64(uintptr(p)), f.lastArg(0))
	assert.Equal(t, "cuMemFreeHost", f.lastCall())

	f.forceResult("cuMemHostAlloc", int32(cuda.ErrorOutOfMemory))
	p, err = lib.MemHostAlloc(n, flags)
	assert.Nil(t, p)
	assert.ErrorIs(t, err, cuda.ErrOutOfMemory)
	assert.ErrorContains(t, err, "cuMemHostAlloc")
	f.forceResult("cuMemHostGetDevicePointer", int32(cuda.ErrorInvalidValue))
	d, err = lib.MemHostGetDevicePointer(p, 0)
	assert.Zero(t, d)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
}

func TestFakePointerAttribute(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	p := cuda.DevicePtr(rand.Uint64())
	v := rand.Uint64() | 1<<63 | 1
	f.setOut(0, v)
	for _, tc := range []struct {
		attr cuda.PointerAttribute
		want uint64
	}{
		{cuda.PointerAttrRangeStart, v},
		{cuda.PointerAttrContext, v},
		{cuda.PointerAttrDeviceOrdinal, v & 0xffffffff},
		{cuda.PointerAttrMemoryType, v & 0xffffffff},
		{cuda.PointerAttrMapped, 1},
	} {
		got, err := lib.PointerGetAttribute(tc.attr, p)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "attribute %d", tc.attr)
		assert.Equal(t, []uint64{uint64(tc.attr), uint64(p)}, f.args(3)[1:])
	}
}

func TestFakeClose(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib, err := cuda.OpenPathForTest(f.path)
	require.NoError(t, err)
	require.NoError(t, lib.Close())
	require.NoError(t, lib.Close(), "Close twice")
	_, err = lib.DeviceCount()
	require.ErrorIs(t, err, cuda.ErrNoDriver)
	assert.EqualError(t, err, "cuDeviceGetCount: no CUDA driver: the Lib was closed")
	assert.ErrorIs(t, lib.EventRecord(1, 2), cuda.ErrNoDriver)
}

// Hot-path allocations: most wrappers pass purego.SyscallN a variadic
// argument slice, which escapes (//go:uintptrescapes): one allocation per
// call. The calls of the collectives' launch and Sync paths (a launch, a
// poll, the current context, an async copy, an event record or wait, a
// graph launch) take their arguments from a pooled block and allocate
// nothing.
// This guards against regressions (fmt, maps, boxed errors on the success
// path, a wrapper moved back to the variadic call).
func TestFakeHotPathAllocs(t *testing.T) {
	f := newFake(t, fakeDefault)
	lib := f.open(t)
	params := &launchParams{A: rand.Uint64()}
	for _, tc := range []struct {
		name string
		max  float64
		fn   func()
	}{
		{"EventRecord", 0, func() { _ = lib.EventRecord(1, 2) }},
		{"StreamWaitEvent", 0, func() { _ = lib.StreamWaitEvent(1, 2) }},
		{"GraphLaunch", 0, func() { _ = lib.GraphLaunch(1, 2) }},
		{"MemcpyDtoDAsync", 0, func() { _ = lib.MemcpyDtoDAsync(1, 2, 3, 4) }},
		{"LaunchKernel", 0, func() {
			_ = lib.LaunchKernel(1, cuda.D1(2), cuda.D1(3), 0, 4, unsafe.Pointer(params), unsafe.Sizeof(*params))
		}},
		{"LaunchKernelEx", 0, func() {
			cfg := cuda.LaunchConfig{Grid: cuda.D1(2), Block: cuda.D1(3), Stream: 4, Programmatic: true}
			_ = lib.LaunchKernelEx(1, cfg, unsafe.Pointer(params), unsafe.Sizeof(*params))
		}},
		{"CtxSetCurrent", 0, func() { _ = lib.CtxSetCurrent(5) }},
		{"CtxGetCurrent", 0, func() { _, _ = lib.CtxGetCurrent() }},
		{"StreamQuery", 0, func() { _ = lib.StreamQuery(1) }},
	} {
		got := testing.AllocsPerRun(200, tc.fn)
		t.Logf("%s: %.1f allocs/call", tc.name, got)
		assert.LessOrEqual(t, got, tc.max, tc.name)
	}
	f.forceResult("cuStreamQuery", int32(cuda.ErrorNotReady))
	got := testing.AllocsPerRun(200, func() { _ = lib.StreamQuery(1) })
	assert.Zero(t, got, "polling a busy stream allocates nothing")
}

func benchFake(b *testing.B) *cuda.Lib {
	f := newFake(b, fakeDefault)
	lib, err := cuda.OpenPathForTest(f.path)
	require.NoError(b, err)
	b.Cleanup(func() { _ = lib.Close() })
	b.ReportAllocs()
	return lib
}

func BenchmarkFakeLaunchKernel(b *testing.B) {
	lib := benchFake(b)
	params := &launchParams{A: 1}
	for b.Loop() {
		_ = lib.LaunchKernel(1, cuda.D1(2), cuda.D1(3), 0, 4, unsafe.Pointer(params), unsafe.Sizeof(*params))
	}
}

func BenchmarkFakeEventRecord(b *testing.B) {
	lib := benchFake(b)
	for b.Loop() {
		_ = lib.EventRecord(1, 2)
	}
}

func BenchmarkFakeStreamWaitEvent(b *testing.B) {
	lib := benchFake(b)
	for b.Loop() {
		_ = lib.StreamWaitEvent(1, 2)
	}
}

func BenchmarkFakeMemcpyDtoDAsync(b *testing.B) {
	lib := benchFake(b)
	for b.Loop() {
		_ = lib.MemcpyDtoDAsync(1, 2, 3, 4)
	}
}

func BenchmarkFakeGraphLaunch(b *testing.B) {
	lib := benchFake(b)
	for b.Loop() {
		_ = lib.GraphLaunch(1, 2)
	}
}
