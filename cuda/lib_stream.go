package cuda

import (
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// StreamCreate is cuStreamCreate.
func (l *Lib) StreamCreate(flags uint32) (Stream, error) {
	fn := l.proc(pStreamCreate)
	if fn == 0 {
		return 0, l.unavailable(pStreamCreate)
	}
	var s Stream
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&s)), uintptr(flags))
	if err := l.check(pStreamCreate, r); err != nil {
		return 0, err
	}
	return s, nil
}

// StreamDestroy is cuStreamDestroy (the _v2 ABI).
func (l *Lib) StreamDestroy(s Stream) error {
	fn := l.proc(pStreamDestroy)
	if fn == 0 {
		return l.unavailable(pStreamDestroy)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(s))
	return l.check(pStreamDestroy, r)
}

// StreamSynchronize is cuStreamSynchronize.
func (l *Lib) StreamSynchronize(s Stream) error {
	fn := l.proc(pStreamSynchronize)
	if fn == 0 {
		return l.unavailable(pStreamSynchronize)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(s))
	return l.check(pStreamSynchronize, r)
}

// StreamQuery is cuStreamQuery: nil when the stream is idle, an *Error
// matching ErrNotReady (the same value each time, so that polling does not
// allocate) while work is pending.
func (l *Lib) StreamQuery(s Stream) error {
	fn := l.proc(pStreamQuery)
	if fn == 0 {
		return l.unavailable(pStreamQuery)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(s))
	if Result(int32(uint32(r))) == ErrorNotReady {
		return l.streamNotReady
	}
	return l.check(pStreamQuery, r)
}

// StreamGetCtx is cuStreamGetCtx (the CUDA 9.2 ABI): the context the
// stream was created in.
func (l *Lib) StreamGetCtx(s Stream) (Context, error) {
	fn := l.proc(pStreamGetCtx)
	if fn == 0 {
		return 0, l.unavailable(pStreamGetCtx)
	}
	var c Context
	r, _, _ := purego.SyscallN(fn, uintptr(s), uintptr(unsafe.Pointer(&c)))
	if err := l.check(pStreamGetCtx, r); err != nil {
		return 0, err
	}
	return c, nil
}

// StreamWaitEvent is cuStreamWaitEvent(s, e, 0).
func (l *Lib) StreamWaitEvent(s Stream, e Event) error {
	fn := l.proc(pStreamWaitEvent)
	if fn == 0 {
		return l.unavailable(pStreamWaitEvent)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(s), uintptr(e), 0)
	return l.check(pStreamWaitEvent, r)
}

// StreamBeginCapture is cuStreamBeginCapture (the CUDA 10.1 ABI, taking the
// capture mode).
func (l *Lib) StreamBeginCapture(s Stream, mode StreamCaptureMode) error {
	fn := l.proc(pStreamBeginCapture)
	if fn == 0 {
		return l.unavailable(pStreamBeginCapture)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(s), uintptr(mode))
	return l.check(pStreamBeginCapture, r)
}

// StreamEndCapture is cuStreamEndCapture.
func (l *Lib) StreamEndCapture(s Stream) (Graph, error) {
	fn := l.proc(pStreamEndCapture)
	if fn == 0 {
		return 0, l.unavailable(pStreamEndCapture)
	}
	var g Graph
	r, _, _ := purego.SyscallN(fn, uintptr(s), uintptr(unsafe.Pointer(&g)))
	if err := l.check(pStreamEndCapture, r); err != nil {
		return 0, err
	}
	return g, nil
}

// GraphInstantiate is cuGraphInstantiateWithFlags(g, 0).
func (l *Lib) GraphInstantiate(g Graph) (GraphExec, error) {
	fn := l.proc(pGraphInstantiateWithFlags)
	if fn == 0 {
		return 0, l.unavailable(pGraphInstantiateWithFlags)
	}
	var x GraphExec
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&x)), uintptr(g), 0)
	if err := l.check(pGraphInstantiateWithFlags, r); err != nil {
		return 0, err
	}
	return x, nil
}

// GraphLaunch is cuGraphLaunch.
func (l *Lib) GraphLaunch(g GraphExec, s Stream) error {
	fn := l.proc(pGraphLaunch)
	if fn == 0 {
		return l.unavailable(pGraphLaunch)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(g), uintptr(s))
	return l.check(pGraphLaunch, r)
}

// GraphExecDestroy is cuGraphExecDestroy.
func (l *Lib) GraphExecDestroy(g GraphExec) error {
	fn := l.proc(pGraphExecDestroy)
	if fn == 0 {
		return l.unavailable(pGraphExecDestroy)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(g))
	return l.check(pGraphExecDestroy, r)
}

// GraphDestroy is cuGraphDestroy.
func (l *Lib) GraphDestroy(g Graph) error {
	fn := l.proc(pGraphDestroy)
	if fn == 0 {
		return l.unavailable(pGraphDestroy)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(g))
	return l.check(pGraphDestroy, r)
}

// EventCreate is cuEventCreate.
func (l *Lib) EventCreate(flags uint32) (Event, error) {
	fn := l.proc(pEventCreate)
	if fn == 0 {
		return 0, l.unavailable(pEventCreate)
	}
	var e Event
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	if err := l.check(pEventCreate, r); err != nil {
		return 0, err
	}
	return e, nil
}

// EventDestroy is cuEventDestroy (the _v2 ABI).
func (l *Lib) EventDestroy(e Event) error {
	fn := l.proc(pEventDestroy)
	if fn == 0 {
		return l.unavailable(pEventDestroy)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(e))
	return l.check(pEventDestroy, r)
}

// EventRecord is cuEventRecord.
func (l *Lib) EventRecord(e Event, s Stream) error {
	fn := l.proc(pEventRecord)
	if fn == 0 {
		return l.unavailable(pEventRecord)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(e), uintptr(s))
	return l.check(pEventRecord, r)
}

// EventSynchronize is cuEventSynchronize.
func (l *Lib) EventSynchronize(e Event) error {
	fn := l.proc(pEventSynchronize)
	if fn == 0 {
		return l.unavailable(pEventSynchronize)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(e))
	return l.check(pEventSynchronize, r)
}

// EventQuery is cuEventQuery: nil when the event completed, an *Error
// matching ErrNotReady (the same value each time) otherwise.
func (l *Lib) EventQuery(e Event) error {
	fn := l.proc(pEventQuery)
	if fn == 0 {
		return l.unavailable(pEventQuery)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(e))
	if Result(int32(uint32(r))) == ErrorNotReady {
		return l.eventNotReady
	}
	return l.check(pEventQuery, r)
}

// EventElapsedTime is cuEventElapsedTime: milliseconds from start to end.
func (l *Lib) EventElapsedTime(start, end Event) (float32, error) {
	fn := l.proc(pEventElapsedTime)
	if fn == 0 {
		return 0, l.unavailable(pEventElapsedTime)
	}
	var ms float32
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))
	if err := l.check(pEventElapsedTime, r); err != nil {
		return 0, err
	}
	return ms, nil
}

// CUjit_option values for the JIT logs.
const (
	jitInfoLogBuffer          = 3 // CU_JIT_INFO_LOG_BUFFER
	jitInfoLogBufferSizeBytes = 4 // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
	jitErrorLogBuffer         = 5 // CU_JIT_ERROR_LOG_BUFFER
	jitErrorLogBufferSizeByte = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
)

// jitLogSize is the size of each JIT log buffer.
const jitLogSize = 16 << 10

type jitLogs struct {
	info, errs [jitLogSize]byte
}

// ModuleLoadData is cuModuleLoadDataEx with the JIT's info and error logs
// captured: when the JIT fails, the *Error's Detail carries the logs after
// the driver's description. A PTX image without a terminating NUL is copied
// with one appended (the caller's slice is not modified); ELF cubins and
// fatbins are passed as they are.
func (l *Lib) ModuleLoadData(image []byte) (Module, error) {
	fn := l.proc(pModuleLoadDataEx)
	if fn == 0 {
		return 0, l.unavailable(pModuleLoadDataEx)
	}
	if len(image) == 0 {
		return 0, NewError(entryPoints[pModuleLoadDataEx].name, ErrorInvalidValue, "empty module image")
	}
	img := image
	if needsNUL(image) {
		img = make([]byte, len(image)+1)
		copy(img, image)
	}
	// The driver writes the logs through pointers held in optionValues,
	// which the Go runtime cannot see: pin the buffers.
	logs := new(jitLogs)
	var pin runtime.Pinner
	pin.Pin(logs)
	defer pin.Unpin()
	opts := [4]int32{jitInfoLogBuffer, jitInfoLogBufferSizeBytes, jitErrorLogBuffer, jitErrorLogBufferSizeByte}
	vals := [4]uintptr{uintptr(unsafe.Pointer(&logs.info[0])), jitLogSize, uintptr(unsafe.Pointer(&logs.errs[0])), jitLogSize}
	var m Module
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	runtime.KeepAlive(img)
	if uint32(r) == 0 {
		return m, nil
	}
	detail := ""
	if s := bufString(logs.errs[:]); s != "" {
		detail = "JIT error log: " + s
	}
	if s := bufString(logs.info[:]); s != "" {
		if detail != "" {
			detail += "; "
		}
		detail += "JIT info log: " + s
	}
	return 0, l.fail(pModuleLoadDataEx, Result(int32(uint32(r))), detail)
}

// needsNUL reports whether image is text (PTX) lacking its terminating NUL.
func needsNUL(image []byte) bool {
	if len(image) >= 4 {
		switch {
		case image[0] == 0x7f && image[1] == 'E' && image[2] == 'L' && image[3] == 'F':
			return false // cubin
		case image[0] == 0x50 && image[1] == 0xed && image[2] == 0x55 && image[3] == 0xba:
			return false // fatbin (magic 0xba55ed50, little-endian)
		}
	}
	return image[len(image)-1] != 0
}

// ModuleUnload is cuModuleUnload.
func (l *Lib) ModuleUnload(m Module) error {
	fn := l.proc(pModuleUnload)
	if fn == 0 {
		return l.unavailable(pModuleUnload)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(m))
	return l.check(pModuleUnload, r)
}

// ModuleGetFunction is cuModuleGetFunction.
func (l *Lib) ModuleGetFunction(m Module, name string) (Function, error) {
	fn := l.proc(pModuleGetFunction)
	if fn == 0 {
		return 0, l.unavailable(pModuleGetFunction)
	}
	cname := cString(name)
	var f Function
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	if uint32(r) != 0 {
		return 0, l.fail(pModuleGetFunction, Result(int32(uint32(r))), "function "+name)
	}
	return f, nil
}

// LaunchKernel is cuLaunchKernel with kernelParams = {params}: the kernel's
// one parameter is the paramSize bytes at params, which the driver copies
// during the call (the driver takes the size from the kernel's signature;
// paramSize documents the caller's intent and must be 0 when params is
// nil). A nil params launches a kernel that takes no parameter.
func (l *Lib) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params unsafe.Pointer, paramSize uintptr) error {
	fn := l.proc(pLaunchKernel)
	if fn == 0 {
		return l.unavailable(pLaunchKernel)
	}
	if params == nil {
		if paramSize != 0 {
			return NewError(entryPoints[pLaunchKernel].name, ErrorInvalidValue, "nil params with a non-zero size")
		}
		r, _, _ := purego.SyscallN(fn, uintptr(f), uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
			uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(sharedMem), uintptr(s), 0, 0)
		return l.check(pLaunchKernel, r)
	}
	kernelParams := [1]unsafe.Pointer{params}
	r, _, _ := purego.SyscallN(fn, uintptr(f), uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(sharedMem), uintptr(s),
		uintptr(unsafe.Pointer(&kernelParams[0])), 0)
	runtime.KeepAlive(params)
	return l.check(pLaunchKernel, r)
}
