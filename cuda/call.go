package cuda

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Every wrapper in lib_*.go is one call of call (or result): the entry
// point's id from entrypoints.go and the arguments of the ABI that table
// names. A Go pointer passed as an argument is converted to uintptr in the
// argument list itself (uintptr(unsafe.Pointer(&v))), never before: the
// helpers are //go:uintptrescapes, like purego.SyscallN, so the compiler
// moves what such a pointer points at to the heap and keeps it alive until
// the call returns.

// call runs entry point id with args and returns nil, the *Error of its
// CUresult, or why it could not be called (no driver, or an entry point
// the driver lacks).
//
//go:uintptrescapes
func (l *Lib) call(id proc, args ...uintptr) error {
	code, err := l.result(id, args...)
	if err != nil {
		return err
	}
	return l.check(id, code, "")
}

// result runs entry point id with args and returns its CUresult, for the
// wrappers that read the code themselves; the error says why the call
// could not be made.
//
//go:uintptrescapes
func (l *Lib) result(id proc, args ...uintptr) (Result, error) {
	fn := l.proc(id)
	if fn == 0 {
		return 0, l.unavailable(id)
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(uint32(r))), nil
}

// The hot calls (a launch, a poll, the current context, an async copy, an
// event record or wait, a graph launch) do not go through call: its
// variadic argument slice, which //go:uintptrescapes puts on the heap, is
// an allocation per call. They pass a block of arguments taken from a
// pool instead: a heap object (the Go heap does not move its objects),
// kept alive until the call returns (runtime.KeepAlive), which also holds
// the words the driver reads or writes through the pointers in the
// arguments (out, params). So what //go:uintptrescapes ensures for call
// holds here too, without an allocation per call.

// argBlock is one hot call's arguments and the words they point at.
type argBlock struct {
	a [11]uintptr
	// params is cuLaunchKernel's kernelParams array (its one entry).
	params [1]unsafe.Pointer
	// out is the word a call writes its result to (cuCtxGetCurrent).
	out uintptr
	// cfg and attr are cuLaunchKernelEx's CUlaunchConfig and its one
	// attribute.
	cfg  launchConfig
	attr [1]launchAttr
}

// launchConfig is CUlaunchConfig (cuda.h), 56 bytes.
type launchConfig struct {
	grid      [3]uint32
	block     [3]uint32
	sharedMem uint32
	stream    uintptr
	attrs     uintptr // *launchAttr
	numAttrs  uint32
}

// launchAttr is CUlaunchAttribute: its id, padding to 8 bytes, and the
// 64-byte CUlaunchAttributeValue union (the int-valued attributes use its
// first 4 bytes), 72 bytes.
type launchAttr struct {
	id    uint32
	_     uint32
	value [16]uint32
}

var argBlocks = sync.Pool{New: func() any { return new(argBlock) }}

// callBlock runs entry point id with the first n arguments of b, then
// clears b and returns it to the pool; it returns the CUresult and b.out
// as the call left it, or why the call could not be made.
func (l *Lib) callBlock(id proc, b *argBlock, n int) (Result, uintptr, error) {
	fn := l.proc(id)
	if fn == 0 {
		*b = argBlock{}
		argBlocks.Put(b)
		return 0, 0, l.unavailable(id)
	}
	r, _, _ := purego.SyscallN(fn, b.a[:n]...)
	runtime.KeepAlive(b)
	out := b.out
	*b = argBlock{}
	argBlocks.Put(b)
	return Result(int32(uint32(r))), out, nil
}

// hotArgs takes a block from the pool (zeroed).
func hotArgs() *argBlock { return argBlocks.Get().(*argBlock) }

// callHot is call for the hot calls: entry point id with the first n
// arguments of b (callBlock).
func (l *Lib) callHot(id proc, b *argBlock, n int) error {
	code, _, err := l.callBlock(id, b, n)
	if err != nil {
		return err
	}
	return l.check(id, code, "")
}

// callHandles is callHot for the hot calls of up to three integer
// arguments (handles: an event record or wait, a graph launch), the
// first n of a0, a1, a2.
func (l *Lib) callHandles(id proc, a0, a1, a2 uintptr, n int) error {
	b := hotArgs()
	b.a[0], b.a[1], b.a[2] = a0, a1, a2
	return l.callHot(id, b, n)
}

// query is cuStreamQuery or cuEventQuery of h: CUDA_ERROR_NOT_READY comes
// back as one preallocated error, so that a polling loop allocates
// nothing.
func (l *Lib) query(id proc, h uintptr) error {
	b := hotArgs()
	b.a[0] = h
	code, _, err := l.callBlock(id, b, 1)
	switch {
	case err != nil:
		return err
	case code == ErrorNotReady && id == pStreamQuery:
		return l.streamNotReady
	case code == ErrorNotReady && id == pEventQuery:
		return l.eventNotReady
	}
	return l.check(id, code, "")
}

// out is v, or T's zero value with err: what a wrapper returns for a value
// the driver writes through a pointer.
func out[T any](v T, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// invalid is the error of an argument the binding refuses before calling
// the driver (CUDA_ERROR_INVALID_VALUE). Where the call could not be made
// anyway, that reason comes first, as it would from the call.
func (l *Lib) invalid(id proc, detail string) error {
	if l.proc(id) == 0 {
		return l.unavailable(id)
	}
	return NewError(entryPoints[id].name, ErrorInvalidValue, detail)
}

// proc is the entry point id, or 0 when the Lib is not loaded or the
// driver lacks it.
func (l *Lib) proc(id proc) uintptr {
	if l == nil {
		return 0
	}
	return l.procs[id]
}

// unavailable is the error for a call whose entry point is 0.
func (l *Lib) unavailable(id proc) error {
	if l != nil && l.missing[id] != nil {
		return l.missing[id]
	}
	why := "the Lib was not loaded (cuda.Load)"
	if l != nil && l.closed {
		why = "the Lib was closed"
	}
	return &bindError{msg: entryPoints[id].name + ": " + noDriverText + ": " + why, is: []error{ErrNoDriver}}
}

// check is nil for CUDA_SUCCESS, else the *Error of the call.
func (l *Lib) check(id proc, code Result, detail string) error {
	if code == Success {
		return nil
	}
	return l.fail(id, code, detail)
}

// fail builds the *Error of a failed call: the driver's name and
// description of the code, and detail (if any) after the description.
func (l *Lib) fail(id proc, code Result, detail string) *Error {
	d := l.resultString(code)
	switch {
	case d == "":
		d = detail
	case detail != "":
		d += "; " + detail
	}
	return &Error{Op: entryPoints[id].name, Code: code, Name: l.resultName(code), Detail: d}
}

// resultName is cuGetErrorName's name for code, or this package's.
func (l *Lib) resultName(code Result) string {
	if n := l.errorText(pGetErrorName, code); n != "" {
		return n
	}
	return code.String()
}

// resultString is cuGetErrorString's description of code, or "".
func (l *Lib) resultString(code Result) string { return l.errorText(pGetErrorString, code) }

// errorText asks cuGetErrorName or cuGetErrorString (id) about code.
func (l *Lib) errorText(id proc, code Result) string {
	var s *byte
	r, err := l.result(id, uintptr(uint32(code)), uintptr(unsafe.Pointer(&s)))
	if err != nil || r != Success {
		return ""
	}
	return goString(s)
}
