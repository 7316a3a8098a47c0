package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

func TestModuleLoad(t *testing.T) {
	require.Equal(t, []string{"simtest_add", "simtest_append", "simtest_block", "simtest_load", "simtest_fail"}, PTXEntries([]byte(testPTX)))
	n := newNode(t, Config{})
	_, err := n.ModuleLoadData([]byte(testPTX))
	requireCode(t, err, "cuModuleLoadData", cuda.ErrorInvalidContext)
	useDevice(t, n, 0)

	_, err = n.ModuleLoadData([]byte(".version 8.1\n.target sm_90\n.func helper() { ret; }\n"))
	requireCode(t, err, "cuModuleLoadData", cuda.ErrorInvalidPTX)
	_, err = n.ModuleLoadData([]byte(testPTX + "\n.visible .entry simtest_unknown_kernel(.param .u64 p) { ret; }\n"))
	e := requireCode(t, err, "cuModuleLoadData", cuda.ErrorInvalidPTX)
	require.Contains(t, e.Detail, "simtest_unknown_kernel")
	// One line, however many entries are missing, naming the package
	// whose nodes carry nvls's kernels.
	require.Contains(t, e.Detail, "1 of the image's 6 entry functions have no simulated implementation ('simtest_unknown_kernel')")
	require.Contains(t, e.Detail, "github.com/nvls-go/nvls/simnode.New")
	require.NotContains(t, e.Detail, "\n")
	var many strings.Builder
	many.WriteString("// comments come first in nvcc's PTX\n.version 8.1\n.target sm_90\n")
	for i := range 48 {
		fmt.Fprintf(&many, ".visible .entry nvls_missing_%d(.param .u64 p) { ret; }\n", i)
	}
	_, err = n.ModuleLoadData([]byte(many.String()))
	e = requireCode(t, err, "cuModuleLoadData", cuda.ErrorInvalidPTX)
	require.Contains(t, e.Detail, "48 of the image's 48 entry functions have no simulated implementation ('nvls_missing_0', 'nvls_missing_1', 'nvls_missing_2' and 45 more)")
	require.NotContains(t, e.Detail, "\n")
	require.True(t, errors.Is(err, cuda.ErrInvalidPTX))
	_, err = n.ModuleLoadData([]byte("\x7fELF\x02\x01\x01"))
	requireCode(t, err, "cuModuleLoadData", cuda.ErrorNoBinaryForGPU)
	// Bytes that are not PTX (not .version first): the driver's answer
	// in the differential run of 2026-11-25 is CUDA_ERROR_INVALID_IMAGE.
	for _, img := range []string{"this is not a module image\n", "/* .version 8.1 */ .visible .entry simtest_add(.param .u64 p) { ret; }\n"} {
		_, err = n.ModuleLoadData([]byte(img))
		requireCode(t, err, "cuModuleLoadData", cuda.ErrorInvalidImage)
	}

	fs := loadTestPTX(t, n)
	_, err = n.ModuleGetFunction(fs.mod, "simtest_not_registered")
	requireCode(t, err, "cuModuleGetFunction", cuda.ErrorNotFound)
	require.Equal(t, 1, n.Live().Modules)
	require.NoError(t, n.ModuleUnload(fs.mod))
	p := params(0)
	err = n.LaunchKernel(fs.appendF, cuda.D1(1), cuda.D1(1), 0, 0, unsafe.Pointer(&p[0]), 8)
	requireCode(t, err, "cuLaunchKernel", cuda.ErrorInvalidHandle)
	requireCode(t, n.ModuleUnload(fs.mod), "cuModuleUnload", cuda.ErrorInvalidHandle)
}

func TestLaunchChecksAndParamCopy(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 1)
	fs := loadTestPTX(t, n)
	b := mapOn(t, n, 1, 2*mib, 1)
	gate, open := newGate()
	defer open()
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	launch(t, n, fs.block, s, params(gate))
	delta := binary.LittleEndian.Uint32(randBytes(t, 4))
	p := params(uint64(b.ptr)+64, uint64(delta))
	launch(t, n, fs.add, s, p)
	// The launch copied its parameters: changing them now changes nothing.
	binary.LittleEndian.PutUint64(p[8:], 12345)
	requireCode(t, n.StreamQuery(s), "cuStreamQuery", cuda.ErrorNotReady)
	open()
	require.NoError(t, n.StreamSynchronize(s))
	v, err := n.Memory(1).LoadU32(b.ptr + 64)
	require.NoError(t, err)
	require.Equal(t, delta, v)

	bad := []struct {
		grid, block cuda.Dim3
		shared      uint32
	}{
		{cuda.Dim3{X: 0, Y: 1, Z: 1}, cuda.D1(1), 0},
		{cuda.D1(1), cuda.D1(2048), 0},
		{cuda.Dim3{X: 1, Y: 70000, Z: 1}, cuda.D1(1), 0},
		{cuda.D1(1), cuda.D1(1), 1 << 20},
	}
	for _, c := range bad {
		err := n.LaunchKernel(fs.add, c.grid, c.block, c.shared, s, unsafe.Pointer(&p[0]), 16)
		requireCode(t, err, "cuLaunchKernel", cuda.ErrorInvalidValue)
	}
	require.NoError(t, n.StreamDestroy(s))
	require.NoError(t, n.ModuleUnload(fs.mod))
	b.free(t, n)
}

func TestStreamsOrderAndConcurrency(t *testing.T) {
	resetAppend()
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	a, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	b, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	ev, err := n.EventCreate(cuda.EventDefault)
	require.NoError(t, err)
	require.NoError(t, n.EventQuery(ev), "an event never recorded is complete")

	gate, open := newGate()
	defer open()
	launch(t, n, fs.block, a, params(gate))
	launch(t, n, fs.appendF, a, params(1))
	require.NoError(t, n.EventRecord(ev, a))
	launch(t, n, fs.appendF, b, params(2))
	require.NoError(t, n.StreamWaitEvent(b, ev))
	launch(t, n, fs.appendF, b, params(3))

	// Stream b ran its first launch while a is blocked, and then waits.
	require.Eventually(t, func() bool { return len(appended()) == 1 }, 5*time.Second, time.Millisecond)
	requireCode(t, n.StreamQuery(a), "cuStreamQuery", cuda.ErrorNotReady)
	requireCode(t, n.StreamQuery(b), "cuStreamQuery", cuda.ErrorNotReady)
	requireCode(t, n.EventQuery(ev), "cuEventQuery", cuda.ErrorNotReady)
	require.Equal(t, []uint64{2}, appended())
	open()
	require.NoError(t, n.StreamSynchronize(b))
	require.Equal(t, []uint64{2, 1, 3}, appended())
	require.NoError(t, n.EventSynchronize(ev))
	require.NoError(t, n.EventQuery(ev))
	require.NoError(t, n.CtxSynchronize())

	// Many launches on one stream run in order.
	resetAppend()
	var want []uint64
	for i := uint64(0); i < 200; i++ {
		launch(t, n, fs.appendF, a, params(i))
		want = append(want, i)
	}
	require.NoError(t, n.StreamSynchronize(a))
	require.Equal(t, want, appended())

	for _, s := range []cuda.Stream{a, b} {
		require.NoError(t, n.StreamDestroy(s))
	}
	requireCode(t, n.StreamDestroy(a), "cuStreamDestroy", cuda.ErrorInvalidHandle)
	require.NoError(t, n.EventDestroy(ev))
	require.NoError(t, n.ModuleUnload(fs.mod))
}

func TestLegacyDefaultStream(t *testing.T) {
	resetAppend()
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	blocking, err := n.StreamCreate(cuda.StreamDefault)
	require.NoError(t, err)
	nonBlocking, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)

	// Work on the legacy stream waits for a blocking stream's earlier work.
	gate, open := newGate()
	defer open()
	launch(t, n, fs.block, blocking, params(gate))
	launch(t, n, fs.appendF, blocking, params(1))
	launch(t, n, fs.appendF, 0, params(2))
	// ... but not for a non-blocking stream's.
	launch(t, n, fs.appendF, nonBlocking, params(3))
	require.NoError(t, n.StreamSynchronize(nonBlocking))
	requireCode(t, n.StreamQuery(0), "cuStreamQuery", cuda.ErrorNotReady)
	require.Equal(t, []uint64{3}, appended())
	// A blocking stream's later work waits for the legacy stream.
	launch(t, n, fs.appendF, blocking, params(4))
	open()
	require.NoError(t, n.StreamSynchronize(blocking))
	require.Equal(t, []uint64{3, 1, 2, 4}, appended())
	require.NoError(t, n.StreamDestroy(blocking))
	require.NoError(t, n.StreamDestroy(nonBlocking))
	require.NoError(t, n.ModuleUnload(fs.mod))
}

func TestEventElapsedTime(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	e1, err := n.EventCreate(0)
	require.NoError(t, err)
	e2, err := n.EventCreate(0)
	require.NoError(t, err)
	noTiming, err := n.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)
	_, err = n.EventElapsedTime(e1, e2)
	requireCode(t, err, "cuEventElapsedTime", cuda.ErrorInvalidHandle)

	gate, open := newGate()
	require.NoError(t, n.EventRecord(e1, s))
	launch(t, n, fs.block, s, params(gate))
	require.NoError(t, n.EventRecord(e2, s))
	require.NoError(t, n.EventRecord(noTiming, s))
	_, err = n.EventElapsedTime(e1, e2)
	requireCode(t, err, "cuEventElapsedTime", cuda.ErrorNotReady)
	time.Sleep(20 * time.Millisecond)
	open()
	require.NoError(t, n.EventSynchronize(e2))
	ms, err := n.EventElapsedTime(e1, e2)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ms, float32(15))
	require.Less(t, ms, float32(5000))
	_, err = n.EventElapsedTime(e1, noTiming)
	requireCode(t, err, "cuEventElapsedTime", cuda.ErrorInvalidHandle)
	for _, e := range []cuda.Event{e1, e2, noTiming} {
		require.NoError(t, n.EventDestroy(e))
	}
	require.NoError(t, n.StreamDestroy(s))
	require.NoError(t, n.ModuleUnload(fs.mod))
}

func TestGraphCaptureAndReplay(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 2)
	fs := loadTestPTX(t, n)
	b := mapOn(t, n, 2, 2*mib, 2)
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	ev, err := n.EventCreate(0)
	require.NoError(t, err)

	require.NoError(t, n.StreamBeginCapture(s, cuda.CaptureModeGlobal))
	require.NoError(t, n.MemsetD32Async(b.ptr, 0, 4, s))
	var sum uint32
	p := params(uint64(b.ptr)+4, 0)
	const launches = 20
	for i := 0; i < launches; i++ {
		d := binary.LittleEndian.Uint32(randBytes(t, 4)) % 1000
		sum += d
		binary.LittleEndian.PutUint64(p[8:], uint64(d))
		launch(t, n, fs.add, s, p) // captured with this launch's params
	}
	require.NoError(t, n.EventRecord(ev, s))
	g, err := n.StreamEndCapture(s)
	require.NoError(t, err)
	// Nothing ran during capture.
	require.NoError(t, n.WriteDevice(b.ptr+4, []byte{9, 0, 0, 0}))
	time.Sleep(time.Millisecond)
	v, err := n.Memory(2).LoadU32(b.ptr + 4)
	require.NoError(t, err)
	require.Equal(t, uint32(9), v)

	x, err := n.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, n.GraphLaunch(x, s))
	require.NoError(t, n.StreamSynchronize(s))
	v, err = n.Memory(2).LoadU32(b.ptr + 4)
	require.NoError(t, err)
	require.Equal(t, sum, v, "the memset node reset the counter, then every launch added its own delta")

	// Replaying 10,000 times is quick. The memset node zeroes word 0..3
	// each time, so the counter restarts at zero each replay.
	require.NoError(t, n.WriteDevice(b.ptr+16, []byte{1, 0, 0, 0}))
	start := time.Now()
	const replays = 10000
	for i := 0; i < replays; i++ {
		require.NoError(t, n.GraphLaunch(x, s))
	}
	require.NoError(t, n.EventSynchronize(ev))
	require.NoError(t, n.StreamSynchronize(s))
	elapsed := time.Since(start)
	t.Logf("%d replays of a %d-launch graph: %v", replays, launches, elapsed)
	require.Less(t, elapsed, 20*time.Second)
	v, err = n.Memory(2).LoadU32(b.ptr + 4)
	require.NoError(t, err)
	require.Equal(t, sum, v)

	require.NoError(t, n.GraphExecDestroy(x))
	require.NoError(t, n.GraphDestroy(g))
	requireCode(t, n.GraphDestroy(g), "cuGraphDestroy", cuda.ErrorInvalidValue)
	require.NoError(t, n.EventDestroy(ev))
	require.NoError(t, n.StreamDestroy(s))
	require.NoError(t, n.ModuleUnload(fs.mod))
	b.free(t, n)
}

// TestCloseReportsLeaks: Close returns what CheckNoLeaks would, so that a
// test that only closes its node still hears of a leak (issue 24: Close
// returned nil with 4 graphs and 4 graph execs left); a clean node
// closes with nil, and so does a second Close.
func TestCloseReportsLeaks(t *testing.T) {
	clean := New(Config{})
	require.NoError(t, clean.Init())
	require.NoError(t, clean.Close())

	n := New(Config{})
	require.NoError(t, n.Init())
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := n.PrimaryCtxRetain(1)
	require.NoError(t, err)
	require.NoError(t, n.CtxSetCurrent(ctx))
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	b := mapOn(t, n, 1, 2*mib, 1)
	for range 4 {
		require.NoError(t, n.StreamBeginCapture(s, cuda.CaptureModeGlobal))
		require.NoError(t, n.MemsetD8Async(b.ptr, 0, 64, s))
		g, err := n.StreamEndCapture(s)
		require.NoError(t, err)
		_, err = n.GraphInstantiate(g)
		require.NoError(t, err)
	}
	require.NoError(t, n.StreamDestroy(s))
	b.free(t, n)
	require.NoError(t, n.CtxSetCurrent(0))
	require.NoError(t, n.PrimaryCtxRelease(1))

	want := n.CheckNoLeaks()
	require.Error(t, want)
	err = n.Close()
	require.ErrorIs(t, err, ErrLeak)
	require.Equal(t, want.Error(), err.Error())
	require.Equal(t, "sim: resources leaked: 4 graphs, 4 graph execs", err.Error())
	require.NoError(t, n.Close(), "a second Close")
}

func TestGraphReplayAccumulates(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	b := mapOn(t, n, 0, 2*mib, 0)
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	init := binary.LittleEndian.Uint32(randBytes(t, 4))
	require.NoError(t, n.Memory(0).Store(b.ptr, binary.LittleEndian.AppendUint32(nil, init)))
	require.NoError(t, n.StreamBeginCapture(s, cuda.CaptureModeThreadLocal))
	launch(t, n, fs.add, s, params(uint64(b.ptr), 3))
	launch(t, n, fs.add, s, params(uint64(b.ptr), 4))
	g, err := n.StreamEndCapture(s)
	require.NoError(t, err)
	x, err := n.GraphInstantiate(g)
	require.NoError(t, err)
	for i := 0; i < 1000; i++ {
		require.NoError(t, n.GraphLaunch(x, s))
	}
	require.NoError(t, n.StreamSynchronize(s))
	v, err := n.Memory(0).LoadU32(b.ptr)
	require.NoError(t, err)
	require.Equal(t, init+7000, v)
	require.NoError(t, n.GraphExecDestroy(x))
	require.NoError(t, n.GraphDestroy(g))
	require.NoError(t, n.StreamDestroy(s))
	require.NoError(t, n.ModuleUnload(fs.mod))
	b.free(t, n)
}

func TestCaptureRules(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	requireCode(t, n.StreamBeginCapture(0, cuda.CaptureModeGlobal), "cuStreamBeginCapture", cuda.ErrorCaptureUnsupported)
	_, err = n.StreamEndCapture(s)
	requireCode(t, err, "cuStreamEndCapture", cuda.ErrorIllegalState)

	require.NoError(t, n.StreamBeginCapture(s, cuda.CaptureModeGlobal))
	requireCode(t, n.StreamBeginCapture(s, cuda.CaptureModeGlobal), "cuStreamBeginCapture", cuda.ErrorIllegalState)
	requireCode(t, n.StreamSynchronize(s), "cuStreamSynchronize", cuda.ErrorCaptureUnsupported)
	_, err = n.StreamEndCapture(s)
	requireCode(t, err, "cuStreamEndCapture", cuda.ErrorCaptureInvalidated)

	require.NoError(t, n.StreamBeginCapture(s, cuda.CaptureModeGlobal))
	requireCode(t, n.StreamQuery(s), "cuStreamQuery", cuda.ErrorCaptureUnsupported)
	_, err = n.StreamEndCapture(s)
	requireCode(t, err, "cuStreamEndCapture", cuda.ErrorCaptureInvalidated)

	// The stream works normally afterwards.
	require.NoError(t, n.StreamSynchronize(s))
	require.NoError(t, n.StreamDestroy(s))
	require.Zero(t, n.Live().Graphs)
}

// TestCaptureImplicitLegacy: while a blocking stream captures, a use of
// the legacy default stream fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
// (the driver's answer to a synchronous cuMemsetD8 in the differential run
// of 2026-11-25) and, as the CUDA programming guide says of invalid
// operations during capture, invalidates the capture. A non-blocking
// capturing stream leaves the legacy stream free for work; its query and
// synchronization are then the mode's affair (TestCaptureUnsafeCalls).
func TestCaptureImplicitLegacy(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	b := mapOn(t, n, 0, 2*mib, 0)
	blocking, err := n.StreamCreate(cuda.StreamDefault)
	require.NoError(t, err)
	free, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	ev, err := n.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)
	buf := make([]byte, 64)
	for _, use := range []struct {
		name string
		call func() error
		// unsafe: a query or synchronization, refused outside the
		// relaxed mode whatever the stream's flags.
		unsafe bool
	}{
		{"cuMemsetD8", func() error { return n.MemsetD8(b.ptr, 1, 64) }, false},
		{"cuMemcpyDtoH", func() error { return n.MemcpyDtoH(unsafe.Pointer(&buf[0]), b.ptr, 64) }, false},
		{"cuMemsetD8Async", func() error { return n.MemsetD8Async(b.ptr, 1, 64, 0) }, false},
		{"cuEventRecord", func() error { return n.EventRecord(ev, 0) }, false},
		{"cuStreamSynchronize", func() error { return n.StreamSynchronize(0) }, true},
		{"cuStreamQuery", func() error { return n.StreamQuery(0) }, true},
	} {
		for _, mode := range []cuda.StreamCaptureMode{cuda.CaptureModeGlobal, cuda.CaptureModeThreadLocal, cuda.CaptureModeRelaxed} {
			require.NoError(t, n.StreamBeginCapture(blocking, mode))
			require.NoError(t, n.MemsetD8Async(b.ptr+64, 2, 64, blocking))
			requireCode(t, use.call(), use.name, cuda.ErrorCaptureImplicit)
			_, err = n.StreamEndCapture(blocking)
			requireCode(t, err, "cuStreamEndCapture", cuda.ErrorCaptureInvalidated)

			require.NoError(t, n.StreamBeginCapture(free, mode))
			require.NoError(t, n.MemsetD8Async(b.ptr+64, 2, 64, free))
			if use.unsafe && mode != cuda.CaptureModeRelaxed {
				requireCode(t, use.call(), use.name, cuda.ErrorCaptureUnsupported)
				_, err = n.StreamEndCapture(free)
				requireCode(t, err, "cuStreamEndCapture", cuda.ErrorCaptureInvalidated)
				continue
			}
			require.NoError(t, use.call(), "%s while a non-blocking stream captures in mode %d", use.name, mode)
			g, err := n.StreamEndCapture(free)
			require.NoError(t, err)
			require.NoError(t, n.GraphDestroy(g))
		}
	}
	require.NoError(t, n.CtxSynchronize())
	got, err := n.ReadDevice(b.ptr+64, 64)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 64), got, "no captured memset ran")
	require.NoError(t, n.EventDestroy(ev))
	require.NoError(t, n.StreamDestroy(blocking))
	require.NoError(t, n.StreamDestroy(free))
	b.free(t, n)
	require.Zero(t, n.Live().Graphs)
}

// TestCaptureUnsafeCalls: while a stream captures in global or
// thread-local mode, the thread that began it may not query or
// synchronize anything; in global mode no other thread may either. As the
// driver answered (differential run 12, 2026-11-25): cuStreamQuery and
// cuStreamSynchronize of the legacy stream while a non-blocking stream
// captured in thread-local mode failed with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; the query succeeded in relaxed
// mode. The capture is invalidated (the documentation). The other calls
// and the other threads follow the documentation of the modes.
func TestCaptureUnsafeCalls(t *testing.T) {
	n := newNode(t, Config{})
	ctx := useDevice(t, n, 0)
	b := mapOn(t, n, 0, 2*mib, 0)
	capt, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	other, err := n.StreamCreate(cuda.StreamDefault)
	require.NoError(t, err)
	ev, err := n.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)
	require.NoError(t, n.EventRecord(ev, other))
	require.NoError(t, n.CtxSynchronize())
	begin := func(mode cuda.StreamCaptureMode) {
		t.Helper()
		require.NoError(t, n.StreamBeginCapture(capt, mode))
		require.NoError(t, n.MemsetD8Async(b.ptr, 2, 64, capt))
	}
	end := func(want cuda.Result) {
		t.Helper()
		g, err := n.StreamEndCapture(capt)
		if want == cuda.Success {
			require.NoError(t, err)
			require.NoError(t, n.GraphDestroy(g))
			return
		}
		requireCode(t, err, "cuStreamEndCapture", want)
	}

	// The driver's answers.
	begin(cuda.CaptureModeThreadLocal)
	requireCode(t, n.StreamQuery(0), "cuStreamQuery", cuda.ErrorCaptureUnsupported)
	end(cuda.ErrorCaptureInvalidated)
	begin(cuda.CaptureModeThreadLocal)
	requireCode(t, n.StreamSynchronize(0), "cuStreamSynchronize", cuda.ErrorCaptureUnsupported)
	end(cuda.ErrorCaptureInvalidated)
	begin(cuda.CaptureModeRelaxed)
	require.NoError(t, n.StreamQuery(0))
	end(cuda.Success)

	// By the documentation: every query and synchronization, refused and
	// invalidating in global and thread-local mode, allowed in relaxed
	// mode (but the context's, which would wait for the capture).
	for _, use := range []struct {
		name string
		call func() error
	}{
		{"cuStreamQuery", func() error { return n.StreamQuery(other) }},
		{"cuStreamSynchronize", func() error { return n.StreamSynchronize(other) }},
		{"cuEventQuery", func() error { return n.EventQuery(ev) }},
		{"cuEventSynchronize", func() error { return n.EventSynchronize(ev) }},
		{"cuCtxSynchronize", func() error { return n.CtxSynchronize() }},
	} {
		for _, mode := range []cuda.StreamCaptureMode{cuda.CaptureModeGlobal, cuda.CaptureModeThreadLocal} {
			begin(mode)
			requireCode(t, use.call(), use.name, cuda.ErrorCaptureUnsupported)
			end(cuda.ErrorCaptureInvalidated)
		}
		begin(cuda.CaptureModeRelaxed)
		if use.name == "cuCtxSynchronize" {
			requireCode(t, use.call(), use.name, cuda.ErrorCaptureUnsupported)
		} else {
			require.NoError(t, use.call(), "%s in relaxed mode", use.name)
		}
		end(cuda.Success)
	}

	// Another thread: free during a thread-local capture, not during a
	// global one.
	onOtherThread := func() error {
		errc := make(chan error, 1)
		go runtimeLockAndRun(func() {
			if err := n.CtxSetCurrent(ctx); err != nil {
				errc <- err
				return
			}
			errc <- n.StreamQuery(other)
			_ = n.CtxSetCurrent(0)
		})
		return <-errc
	}
	begin(cuda.CaptureModeThreadLocal)
	require.NoError(t, onOtherThread())
	end(cuda.Success)
	begin(cuda.CaptureModeGlobal)
	requireCode(t, onOtherThread(), "cuStreamQuery", cuda.ErrorCaptureUnsupported)
	end(cuda.ErrorCaptureInvalidated)

	require.NoError(t, n.CtxSynchronize())
	require.NoError(t, n.EventDestroy(ev))
	require.NoError(t, n.StreamDestroy(capt))
	require.NoError(t, n.StreamDestroy(other))
	b.free(t, n)
	require.Zero(t, n.Live().Graphs)
}

func TestCaptureForkJoin(t *testing.T) {
	resetAppend()
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	s1, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	s2, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	fork, err := n.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)
	join, err := n.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)

	require.NoError(t, n.StreamBeginCapture(s1, cuda.CaptureModeGlobal))
	launch(t, n, fs.appendF, s1, params(1))
	require.NoError(t, n.EventRecord(fork, s1))
	require.NoError(t, n.StreamWaitEvent(s2, fork))
	launch(t, n, fs.appendF, s2, params(2))
	require.NoError(t, n.EventRecord(join, s2))
	require.NoError(t, n.StreamWaitEvent(s1, join))
	launch(t, n, fs.appendF, s1, params(3))
	g, err := n.StreamEndCapture(s1)
	require.NoError(t, err)
	require.Empty(t, appended())
	x, err := n.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, n.GraphLaunch(x, s2))
	require.NoError(t, n.StreamSynchronize(s2))
	require.Equal(t, []uint64{1, 2, 3}, appended())
	require.NoError(t, n.GraphExecDestroy(x))
	require.NoError(t, n.GraphDestroy(g))
	for _, e := range []cuda.Event{fork, join} {
		require.NoError(t, n.EventDestroy(e))
	}
	for _, s := range []cuda.Stream{s1, s2} {
		require.NoError(t, n.StreamDestroy(s))
	}
	require.NoError(t, n.ModuleUnload(fs.mod))
}

// TestCaptureUnjoined: cuStreamEndCapture fails with
// CUDA_ERROR_STREAM_CAPTURE_UNJOINED when a stream forked into the capture
// has work the origin did not wait for: a fork never joined, and one
// joined before its last launch; joined through another fork, or with
// no work of its own, it succeeds. The streams leave the capture either
// way.
func TestCaptureUnjoined(t *testing.T) {
	resetAppend()
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	ss, evs := newStreams(t, n, 3), newEvents(t, n, 3)
	s1, s2, s3 := ss[0], ss[1], ss[2]
	fork, join, join2 := evs[0], evs[1], evs[2]
	edge := func(e cuda.Event, from, to cuda.Stream) { edgeOf(t, n, e, from, to) }
	work := func(s cuda.Stream, v uint64) { launch(t, n, fs.appendF, s, params(v)) }
	for _, tc := range []struct {
		name     string
		body     func()
		unjoined bool
	}{
		{"never joined", func() { edge(fork, s1, s2); work(s2, 2) }, true},
		{"work after the join", func() { edge(fork, s1, s2); work(s2, 2); edge(join, s2, s1); work(s2, 3) }, true},
		{"joined through another fork", func() {
			edge(fork, s1, s2)
			require.NoError(t, n.StreamWaitEvent(s3, fork))
			work(s3, 3)
			edge(join2, s3, s2)
			work(s2, 2)
			edge(join, s2, s1)
		}, false},
		{"forked, no work", func() { edge(fork, s1, s2) }, false},
	} {
		// One goroutine: the context is current on this OS thread only.
		t.Log(tc.name)
		require.NoError(t, n.StreamBeginCapture(s1, cuda.CaptureModeGlobal), tc.name)
		launch(t, n, fs.appendF, s1, params(1))
		tc.body()
		g, err := n.StreamEndCapture(s1)
		if tc.unjoined {
			requireCode(t, err, "cuStreamEndCapture", cuda.ErrorCaptureUnjoined)
		} else {
			require.NoError(t, err, tc.name)
			require.NoError(t, n.GraphDestroy(g))
		}
		// Every stream left the capture: plain work runs at once.
		for _, s := range ss {
			launch(t, n, fs.appendF, s, params(9))
			require.NoError(t, n.StreamSynchronize(s), tc.name)
		}
		resetAppend()
	}
	for _, e := range evs {
		require.NoError(t, n.EventDestroy(e))
	}
	for _, s := range ss {
		require.NoError(t, n.StreamDestroy(s))
	}
	require.NoError(t, n.ModuleUnload(fs.mod))
}

func TestKernelFaultIsSticky(t *testing.T) {
	n := newNode(t, Config{})
	fs := loadTestPTXOn(t, n, 1)
	b := mapOn(t, n, 0, 2*mib) // device 1 has no access
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	launch(t, n, fs.load, s, params(uint64(b.ptr), 16))
	err = n.StreamSynchronize(s)
	e := requireCode(t, err, "cuStreamSynchronize", cuda.ErrorIllegalAddress)
	require.Contains(t, e.Detail, "simtest_load")
	require.True(t, errors.Is(err, cuda.ErrIllegalAddress))

	// Every later synchronizing call on the device fails the same way.
	requireCode(t, n.CtxSynchronize(), "cuCtxSynchronize", cuda.ErrorIllegalAddress)
	requireCode(t, n.StreamQuery(s), "cuStreamQuery", cuda.ErrorIllegalAddress)
	p := params(0)
	err = n.LaunchKernel(fs.appendF, cuda.D1(1), cuda.D1(1), 0, s, unsafe.Pointer(&p[0]), 8)
	requireCode(t, err, "cuLaunchKernel", cuda.ErrorIllegalAddress)
	data := randBytes(t, 8)
	requireCode(t, n.MemcpyHtoD(b.ptr, unsafe.Pointer(&data[0]), 8), "cuMemcpyHtoD", cuda.ErrorIllegalAddress)

	// Another device is unaffected.
	done := make(chan error)
	go func() {
		runtimeLockAndRun(func() {
			ctx, err := n.PrimaryCtxRetain(0)
			if err == nil {
				err = n.CtxSetCurrent(ctx)
			}
			if err == nil {
				err = n.CtxSynchronize()
			}
			_ = n.CtxSetCurrent(0)
			_ = n.PrimaryCtxRelease(0)
			done <- err
		})
	}()
	require.NoError(t, <-done)

	// Releasing the primary context to zero resets it, destroying its
	// streams and modules.
	require.NoError(t, n.CtxSetCurrent(0))
	require.NoError(t, n.PrimaryCtxRelease(1))
	require.Zero(t, n.Live().Streams)
	require.Zero(t, n.Live().Modules)
	ctx, err := n.PrimaryCtxRetain(1)
	require.NoError(t, err)
	require.NoError(t, n.CtxSetCurrent(ctx))
	require.NoError(t, n.CtxSynchronize())
	b.free(t, n)
}

// loadTestPTXOn makes dev current (released at cleanup) and loads testPTX.
func loadTestPTXOn(t testing.TB, n *Node, dev cuda.Device) testFuncs {
	useDevice(t, n, dev)
	return loadTestPTX(t, n)
}

func TestKernelErrorIsLaunchFailed(t *testing.T) {
	n := newNode(t, Config{})
	fs := loadTestPTXOn(t, n, 0)
	launch(t, n, fs.fail, 0, params(0))
	err := n.StreamSynchronize(0)
	e := requireCode(t, err, "cuStreamSynchronize", cuda.ErrorLaunchFailed)
	require.Contains(t, e.Detail, "assertion failed in block 3")
	require.True(t, errors.Is(err, cuda.ErrLaunchFailed))
}

func TestCopyFaults(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	b := mapOn(t, n, 1, 2*mib) // nobody has access
	data := randBytes(t, 64)
	// Unmapped: refused up front, the context stays fine.
	requireCode(t, n.MemcpyHtoD(b.ptr+cuda.DevicePtr(b.size), unsafe.Pointer(&data[0]), 64), "cuMemcpyHtoD", cuda.ErrorInvalidValue)
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	requireCode(t, n.MemcpyHtoDAsync(b.ptr+cuda.DevicePtr(b.size)-32, unsafe.Pointer(&data[0]), 64, s), "cuMemcpyHtoDAsync", cuda.ErrorInvalidValue)
	require.NoError(t, n.CtxSynchronize())
	// Mapped without access: an illegal address, sticky.
	require.NoError(t, n.MemcpyHtoDAsync(b.ptr, unsafe.Pointer(&data[0]), 64, s))
	requireCode(t, n.StreamSynchronize(s), "cuStreamSynchronize", cuda.ErrorIllegalAddress)
	requireCode(t, n.MemsetD8(b.ptr, 0, 1), "cuMemsetD8", cuda.ErrorIllegalAddress)
	require.NoError(t, n.StreamDestroy(s))
	b.free(t, n)
}

func TestSyncCopyNeedsRightsOfCurrentDevice(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	b := mapOn(t, n, 1, 2*mib, 1) // only device 1 has access
	data := randBytes(t, 64)
	err := n.MemcpyHtoD(b.ptr, unsafe.Pointer(&data[0]), 64)
	e := requireCode(t, err, "cuMemcpyHtoD", cuda.ErrorIllegalAddress)
	require.Contains(t, e.Detail, "device 0")
	b.free(t, n)
}

// cuStreamGetCtx names the context a stream was created in, whichever
// context is current when asked; a destroyed stream is an invalid handle.
func TestStreamGetCtx(t *testing.T) {
	n := newNode(t, Config{Devices: 2})
	c0 := useDevice(t, n, 0)
	s0, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	c1 := useDevice(t, n, 1)
	require.NotEqual(t, c0, c1)
	s1, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)

	got, err := n.StreamGetCtx(s0)
	require.NoError(t, err)
	require.Equal(t, c0, got, "stream of device 0 asked from device 1's context")
	got, err = n.StreamGetCtx(s1)
	require.NoError(t, err)
	require.Equal(t, c1, got)
	got, err = n.StreamGetCtx(0)
	require.NoError(t, err)
	require.Equal(t, c1, got, "the legacy stream belongs to the current context")

	require.NoError(t, n.StreamDestroy(s1))
	_, err = n.StreamGetCtx(s1)
	requireCode(t, err, "cuStreamGetCtx", cuda.ErrorInvalidHandle)
	useDevice(t, n, 0)
	require.NoError(t, n.StreamDestroy(s0))
}
