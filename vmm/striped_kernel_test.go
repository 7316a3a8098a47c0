package vmm_test

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/vmm"
)

// stripedPTX holds two hand-written kernels for the striped-range test
// (issue 7: a Striped range read and written by a kernel on each GPU).
// Both walk 32-bit words 0..n-1 with a grid-stride loop; word i holds
// uint32(i)*0x9E3779B1 ^ seed.
//
//   - vmm_fill(ptr, n, seed) writes the words.
//   - vmm_check(ptr, n, seed, result) reads them and adds, per thread, the
//     number of words that differ from the formula to result[0] and the
//     sum of the words read to result[1] (64-bit atomics).
//
// The simulator runs the Go twins registered below (simFill, simCheck), so
// the host side of the test runs in CI; the PTX itself runs on a GPU
// (gpu_test.go).
const stripedPTX = `
.version 8.0
.target sm_90
.address_size 64

.visible .entry vmm_fill(
	.param .align 8 .b8 vmm_fill_param_0[24]
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<10>;
	.reg .b64 	%rd<10>;

	ld.param.u64 	%rd1, [vmm_fill_param_0];
	ld.param.u64 	%rd2, [vmm_fill_param_0+8];
	ld.param.u32 	%r1, [vmm_fill_param_0+16];
	cvta.to.global.u64 	%rd1, %rd1;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mov.u32 	%r5, %nctaid.x;
	mul.wide.u32 	%rd3, %r2, %r3;
	cvt.u64.u32 	%rd4, %r4;
	add.s64 	%rd3, %rd3, %rd4;
	mul.wide.u32 	%rd5, %r5, %r3;
	mov.u32 	%r6, -1640531535;
$L_fill_loop:
	setp.ge.u64 	%p1, %rd3, %rd2;
	@%p1 bra 	$L_fill_done;
	cvt.u32.u64 	%r7, %rd3;
	mul.lo.s32 	%r8, %r7, %r6;
	xor.b32 	%r8, %r8, %r1;
	shl.b64 	%rd6, %rd3, 2;
	add.s64 	%rd7, %rd1, %rd6;
	st.global.u32 	[%rd7], %r8;
	add.s64 	%rd3, %rd3, %rd5;
	bra.uni 	$L_fill_loop;
$L_fill_done:
	ret;
}

.visible .entry vmm_check(
	.param .align 8 .b8 vmm_check_param_0[32]
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<10>;
	.reg .b64 	%rd<16>;

	ld.param.u64 	%rd1, [vmm_check_param_0];
	ld.param.u64 	%rd2, [vmm_check_param_0+8];
	ld.param.u32 	%r1, [vmm_check_param_0+16];
	ld.param.u64 	%rd8, [vmm_check_param_0+24];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd8, %rd8;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mov.u32 	%r5, %nctaid.x;
	mul.wide.u32 	%rd3, %r2, %r3;
	cvt.u64.u32 	%rd4, %r4;
	add.s64 	%rd3, %rd3, %rd4;
	mul.wide.u32 	%rd5, %r5, %r3;
	mov.u32 	%r6, -1640531535;
	mov.u64 	%rd9, 0;
	mov.u64 	%rd10, 0;
$L_check_loop:
	setp.ge.u64 	%p1, %rd3, %rd2;
	@%p1 bra 	$L_check_done;
	cvt.u32.u64 	%r7, %rd3;
	mul.lo.s32 	%r8, %r7, %r6;
	xor.b32 	%r8, %r8, %r1;
	shl.b64 	%rd6, %rd3, 2;
	add.s64 	%rd7, %rd1, %rd6;
	ld.global.u32 	%r9, [%rd7];
	setp.ne.s32 	%p2, %r9, %r8;
	selp.u64 	%rd11, 1, 0, %p2;
	add.s64 	%rd9, %rd9, %rd11;
	cvt.u64.u32 	%rd12, %r9;
	add.s64 	%rd10, %rd10, %rd12;
	add.s64 	%rd3, %rd3, %rd5;
	bra.uni 	$L_check_loop;
$L_check_done:
	atom.global.add.u64 	%rd13, [%rd8], %rd9;
	atom.global.add.u64 	%rd14, [%rd8+8], %rd10;
	ret;
}
`

// fillParams and checkParams mirror the kernels' parameter blocks.
type fillParams struct {
	Ptr  uint64
	N    uint64
	Seed uint32
	_    uint32
}

type checkParams struct {
	Ptr    uint64
	N      uint64
	Seed   uint32
	_      uint32
	Result uint64
}

// word is what the kernels put in word i.
func word(i uint64, seed uint32) uint32 { return uint32(i)*0x9E3779B1 ^ seed }

// stripedKernels are the test kernels' Go implementations, for the nodes
// of newNode.
var stripedKernels = map[string]sim.KernelFunc{"vmm_fill": simFill, "vmm_check": simCheck}

func simFill(l *sim.Launch) error {
	le := binary.LittleEndian
	ptr, n, seed := le.Uint64(l.Params), le.Uint64(l.Params[8:]), le.Uint32(l.Params[16:])
	buf := make([]byte, 4*n)
	for i := range n {
		le.PutUint32(buf[4*i:], word(i, seed))
	}
	return l.Mem.Store(cuda.DevicePtr(ptr), buf)
}

func simCheck(l *sim.Launch) error {
	le := binary.LittleEndian
	ptr, n, seed, res := le.Uint64(l.Params), le.Uint64(l.Params[8:]), le.Uint32(l.Params[16:]), le.Uint64(l.Params[24:])
	buf := make([]byte, 4*n)
	if err := l.Mem.Load(cuda.DevicePtr(ptr), buf); err != nil {
		return err
	}
	var bad, sum uint64
	for i := range n {
		w := le.Uint32(buf[4*i:])
		if w != word(i, seed) {
			bad++
		}
		sum += uint64(w)
	}
	out := make([]byte, 16)
	if err := l.Mem.Load(cuda.DevicePtr(res), out); err != nil {
		return err
	}
	le.PutUint64(out, le.Uint64(out)+bad)
	le.PutUint64(out[8:], le.Uint64(out[8:])+sum)
	return l.Mem.Store(cuda.DevicePtr(res), out)
}

// contexts holds the primary contexts of some devices, retained for a
// whole test on one locked OS thread; use makes one current.
type contexts struct {
	t    testing.TB
	d    cuda.Driver
	devs []cuda.Device
	ctx  map[cuda.Device]cuda.Context
}

func retainContexts(t testing.TB, d cuda.Driver, devs ...cuda.Device) *contexts {
	t.Helper()
	runtime.LockOSThread()
	c := &contexts{t: t, d: d, devs: devs, ctx: map[cuda.Device]cuda.Context{}}
	for _, dev := range devs {
		h, err := d.PrimaryCtxRetain(dev)
		require.NoError(t, err)
		c.ctx[dev] = h
	}
	return c
}

func (c *contexts) use(dev cuda.Device) {
	c.t.Helper()
	require.NoError(c.t, c.d.CtxSetCurrent(c.ctx[dev]))
}

func (c *contexts) release() {
	_ = c.d.CtxSetCurrent(0)
	for _, dev := range c.devs {
		assert.NoError(c.t, c.d.PrimaryCtxRelease(dev))
	}
	runtime.UnlockOSThread()
}

// launchGrid sizes a grid-stride launch over n words.
func launchGrid(n uint64) (cuda.Dim3, cuda.Dim3) {
	const block = 256
	grid := min((n+block-1)/block, 1024)
	return cuda.D1(uint32(grid)), cuda.D1(block)
}

// runStripedScenario builds a Striped range of size bytes over devs[0]
// and devs[1] and has each device write it and the other read it, with
// memcpy/memset from each device's context and with the kernels of
// stripedPTX; every result is checked on the host against the formula.
func runStripedScenario(t *testing.T, d cuda.Driver, devs [2]cuda.Device, size uint64) {
	s, err := vmm.NewStriped(d, size, vmm.StripedOptions{Devices: devs[:]})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.GreaterOrEqual(t, s.Chunks(), 2)
	t.Logf("striped: %d bytes in %d chunks of %d over devices %v", s.Size(), s.Chunks(), s.Chunk(), devs)

	// Placement: chunk i's physical memory is on devs[i%2].
	for i := range s.Chunks() {
		p := s.Ptr() + cuda.DevicePtr(uint64(i)*s.Chunk())
		h, err := d.MemRetainAllocationHandle(p)
		require.NoError(t, err)
		prop, err := d.MemGetAllocationPropertiesFromHandle(h)
		require.NoError(t, d.MemRelease(h))
		require.NoError(t, err)
		require.Equal(t, cuda.DeviceLocation(devs[i%2]), prop.Location, "chunk %d", i)
		if ord, err := d.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, p); err == nil && ord != uint64(devs[i%2]) {
			t.Logf("chunk %d: CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL says %d, the allocation says %d", i, ord, devs[i%2])
		}
	}

	c := retainContexts(t, d, devs[0], devs[1])
	defer c.release()
	words := s.Size() / 4
	chunk := s.Chunk()
	at := func(off uint64) cuda.DevicePtr { return s.Ptr() + cuda.DevicePtr(off) }

	// memset from devs[0] over the whole range (half of it remote), read
	// back from devs[1].
	v := rand.Uint32() | 1
	c.use(devs[0])
	require.NoError(t, d.MemsetD32(s.Ptr(), v, words))
	require.NoError(t, d.CtxSynchronize())
	c.use(devs[1])
	all := make([]byte, s.Size())
	require.NoError(t, cuda.CopyDtoH(d, all, s.Ptr()))
	for i := uint64(0); i < words; i++ {
		if got := binary.LittleEndian.Uint32(all[4*i:]); got != v {
			require.Equal(t, v, got, "word %d after memset from device %d", i, devs[0])
		}
	}
	// memcpy from devs[1] into chunk 0 (on devs[0]) and chunk 1 (its own),
	// then device-to-device from devs[0]: chunk 1 over chunk 0.
	a, b := randBytes(int(chunk)), randBytes(int(chunk))
	require.NoError(t, cuda.CopyHtoD(d, at(0), a))
	require.NoError(t, cuda.CopyHtoD(d, at(chunk), b))
	c.use(devs[0])
	got := make([]byte, chunk)
	require.NoError(t, cuda.CopyDtoH(d, got, at(0)))
	require.Equal(t, a, got, "chunk 0 written from device %d", devs[1])
	require.NoError(t, cuda.CopyDtoH(d, got, at(chunk)))
	require.Equal(t, b, got, "chunk 1 written from device %d", devs[1])
	require.NoError(t, d.MemcpyDtoD(at(0), at(chunk), chunk))
	require.NoError(t, d.CtxSynchronize())
	c.use(devs[1])
	require.NoError(t, cuda.CopyDtoH(d, got, at(0)))
	require.Equal(t, b, got, "chunk 1 copied over chunk 0 from device %d", devs[0])

	// Kernels: load the module in each device's context.
	type fns struct {
		mod         cuda.Module
		fill, check cuda.Function
	}
	loaded := map[cuda.Device]fns{}
	for _, dev := range devs {
		c.use(dev)
		m, err := d.ModuleLoadData([]byte(stripedPTX))
		require.NoError(t, err, "device %d", dev)
		f, err := d.ModuleGetFunction(m, "vmm_fill")
		require.NoError(t, err)
		k, err := d.ModuleGetFunction(m, "vmm_check")
		require.NoError(t, err)
		loaded[dev] = fns{m, f, k}
	}
	defer func() {
		for _, dev := range devs {
			c.use(dev)
			assert.NoError(t, d.ModuleUnload(loaded[dev].mod))
		}
	}()

	grid, block := launchGrid(words)
	for k, writer := range devs {
		reader := devs[1-k]
		// The value depends on the index and on the writing device.
		seed := rand.Uint32() ^ (uint32(writer)+1)*0x01000193

		c.use(writer)
		fp := fillParams{Ptr: uint64(s.Ptr()), N: words, Seed: seed}
		require.NoError(t, d.LaunchKernel(loaded[writer].fill, grid, block, 0, 0, unsafe.Pointer(&fp), unsafe.Sizeof(fp)))
		require.NoError(t, d.CtxSynchronize(), "fill on device %d", writer)

		// The host reads it all back, through the reader's context.
		c.use(reader)
		require.NoError(t, cuda.CopyDtoH(d, all, s.Ptr()))
		var want uint64
		for i := uint64(0); i < words; i++ {
			w := word(i, seed)
			want += uint64(w)
			if got := binary.LittleEndian.Uint32(all[4*i:]); got != w {
				require.Equal(t, w, got, "word %d (chunk %d) filled by device %d", i, 4*i/chunk, writer)
			}
		}

		// The reader's kernel checks and sums the whole range.
		res, err := vmm.NewBuffer(d, reader, 16, vmm.BufferOptions{})
		require.NoError(t, err)
		require.NoError(t, d.MemsetD8(res.Ptr(), 0, 16))
		cp := checkParams{Ptr: uint64(s.Ptr()), N: words, Seed: seed, Result: uint64(res.Ptr())}
		require.NoError(t, d.LaunchKernel(loaded[reader].check, grid, block, 0, 0, unsafe.Pointer(&cp), unsafe.Sizeof(cp)))
		require.NoError(t, d.CtxSynchronize(), "check on device %d", reader)
		out := make([]byte, 16)
		require.NoError(t, cuda.CopyDtoH(d, out, res.Ptr()))
		require.NoError(t, res.Close())
		assert.Zero(t, binary.LittleEndian.Uint64(out), "words device %d saw differ from what device %d wrote", reader, writer)
		assert.Equal(t, want, binary.LittleEndian.Uint64(out[8:]), "sum device %d read", reader)
	}
}

func TestStripedKernelsOnSim(t *testing.T) {
	n := newNode(t, sim.Config{Devices: 3})
	runStripedScenario(t, n, [2]cuda.Device{2, 0}, 8*mib)
	noLeaks(t, n)
}

func TestKernelParamSizes(t *testing.T) {
	assert.Equal(t, uintptr(24), unsafe.Sizeof(fillParams{}))
	assert.Equal(t, uintptr(32), unsafe.Sizeof(checkParams{}))
	assert.Contains(t, stripedPTX, "vmm_fill_param_0[24]")
	assert.Contains(t, stripedPTX, "vmm_check_param_0[32]")
}
