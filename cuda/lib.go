package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/nvls-go/nvls/internal/dl"
)

// LibraryName is the file Open loads: the CUDA driver library that every
// NVIDIA driver installation provides.
const LibraryName = "libcuda.so.1"

// Lib is the real CUDA driver, libcuda.so.1 loaded at run time. It
// implements Driver. Its methods may be called from any goroutine; those
// that act on the current context act on the calling OS thread's (see
// Driver).
//
// A Lib that was not loaded (the zero value, a nil *Lib, or one that was
// closed) returns errors wrapping ErrNoDriver from every method; an entry
// point that the loaded driver lacks returns an error wrapping
// ErrNotSupported that names the entry point.
//
// The binding is for 64-bit Linux (amd64, arm64): sizes and device
// addresses travel as uintptr. Elsewhere the package builds (for the
// simulator, cuda/sim) and Open returns an error wrapping ErrNoDriver.
type Lib struct {
	path    string
	handle  uintptr
	version int // cuDriverGetVersion at Open
	shared  bool
	closed  bool
	procs   [numProcs]uintptr
	missing [numProcs]error // why procs[i] is 0, for a loaded Lib

	// Preallocated answers for the polling calls, so that a poll loop
	// does not allocate.
	streamNotReady error
	eventNotReady  error
}

var _ Driver = (*Lib)(nil)

// Open loads libcuda.so.1, takes its entry points and runs cuInit(0). On a
// machine without an NVIDIA driver it returns an error wrapping ErrNoDriver
// that carries the dynamic loader's message; when cuInit fails (no device,
// driver/kernel module mismatch, ...) the error wraps ErrNoDriver and the
// *Error of cuInit. On other systems than Linux it loads nothing and
// returns an error wrapping ErrNoDriver that says the binding does not
// run there.
//
// Each Open loads the library again (the loader counts references); most
// programs want Load, which shares one Lib per process.
func Open() (*Lib, error) {
	return openLib(LibraryName, true)
}

var (
	loadOnce sync.Once
	loadLib  *Lib
	loadErr  error
)

// Load returns the process-wide Lib, opening it on the first call. Every
// call returns the same Lib, or the same error: a failed Open is not
// retried. Close on the shared Lib does nothing.
func Load() (*Lib, error) {
	loadOnce.Do(func() {
		loadLib, loadErr = Open()
		if loadLib != nil {
			loadLib.shared = true
		}
	})
	return loadLib, loadErr
}

// openLib loads the driver library at path, its symbols in the process's
// global namespace or not (global).
func openLib(path string, global bool) (*Lib, error) {
	h, err := dl.Open(path, global)
	if err != nil {
		return nil, noDriver(path, err)
	}
	l := &Lib{path: path, handle: h}
	if err := l.load(); err != nil {
		_ = dl.Close(h)
		return nil, err
	}
	return l, nil
}

// procResolver takes one entry point at one ABI version.
type procResolver func(name string, version int) (fn uintptr, reason string)

func (l *Lib) load() error {
	resolve, err := l.resolver()
	if err != nil {
		return err
	}
	// First what is needed to initialize and to report errors.
	for _, id := range []proc{pGetErrorName, pGetErrorString, pInit, pDriverGetVersion} {
		l.take(id, resolve)
	}
	if err := l.Init(); err != nil {
		return noDriver(l.path, err)
	}
	v, err := l.DriverVersion()
	if err != nil {
		return noDriver(l.path, err)
	}
	l.version = v
	for id := proc(0); id < numProcs; id++ {
		if l.procs[id] == 0 && l.missing[id] == nil {
			l.take(id, resolve)
		}
	}
	// The version was unknown when these were first taken: name it in
	// their errors too.
	for _, id := range []proc{pGetErrorName, pGetErrorString} {
		if l.procs[id] == 0 {
			l.missing[id] = nil
			l.take(id, resolve)
		}
	}
	l.streamNotReady = l.fail(pStreamQuery, ErrorNotReady, "")
	l.eventNotReady = l.fail(pEventQuery, ErrorNotReady, "")
	return nil
}

// resolver finds cuGetProcAddress_v2, or the CUDA 11.3 cuGetProcAddress.
func (l *Lib) resolver() (procResolver, error) {
	if gpa, err := dl.Sym(l.handle, symGetProcAddressV2); err == nil && gpa != 0 {
		return func(name string, version int) (uintptr, string) {
			cname := cString(name)
			var fn uintptr
			var status int32
			r, _, _ := purego.SyscallN(gpa, uintptr(unsafe.Pointer(&cname[0])), uintptr(unsafe.Pointer(&fn)),
				uintptr(version), getProcAddressLegacyStream, uintptr(unsafe.Pointer(&status)))
			switch {
			case status == procStatusSymbolNotFound:
				return 0, "symbol not found"
			case status == procStatusVersionNotSufficient:
				return 0, "the driver has it only at a newer ABI version"
			case uint32(r) != 0:
				return 0, "cuGetProcAddress_v2 returned " + l.resultName(Result(int32(uint32(r))))
			case status != procStatusSuccess:
				return 0, fmt.Sprintf("symbol status %d", status)
			case fn == 0:
				return 0, "NULL entry point"
			}
			return fn, ""
		}, nil
	}
	if gpa, err := dl.Sym(l.handle, symGetProcAddress); err == nil && gpa != 0 {
		return func(name string, version int) (uintptr, string) {
			cname := cString(name)
			var fn uintptr
			r, _, _ := purego.SyscallN(gpa, uintptr(unsafe.Pointer(&cname[0])), uintptr(unsafe.Pointer(&fn)),
				uintptr(version), getProcAddressLegacyStream)
			switch {
			case Result(int32(uint32(r))) == ErrorNotFound:
				return 0, "symbol not found at this version"
			case uint32(r) != 0:
				return 0, "cuGetProcAddress returned " + l.resultName(Result(int32(uint32(r))))
			case fn == 0:
				return 0, "NULL entry point"
			}
			return fn, ""
		}, nil
	}
	return nil, noDriver(l.path, &bindError{
		msg: fmt.Sprintf("exports neither %s nor %s (a driver older than CUDA 11.3)", symGetProcAddressV2, symGetProcAddress),
		is:  []error{ErrNotSupported},
	})
}

func (l *Lib) take(id proc, resolve procResolver) {
	ep := entryPoints[id]
	fn, reason := resolve(ep.name, ep.version)
	if fn != 0 {
		l.procs[id] = fn
		return
	}
	drv := "of unknown version"
	if l.version != 0 {
		drv = formatVersion(l.version)
	}
	l.missing[id] = &bindError{
		msg: fmt.Sprintf("%s: not supported by driver %s: %s (asked for the CUDA %s ABI)", ep.name, drv, reason, formatVersion(ep.version)),
		is:  []error{ErrNotSupported},
	}
}

// formatVersion writes a CUDA version number (12010) as "12.1".
func formatVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Close releases the library handle of a Lib that Open returned; its
// methods return ErrNoDriver afterwards. It must not run concurrently with
// other calls on the Lib. Close on the shared Lib of Load does nothing.
func (l *Lib) Close() error {
	if l == nil || l.shared || l.handle == 0 {
		return nil
	}
	h := l.handle
	*l = Lib{path: l.path, closed: true}
	if err := dl.Close(h); err != nil {
		return fmt.Errorf("cuda: dlclose %s: %w", l.path, err)
	}
	return nil
}

// Name is "cuda".
func (l *Lib) Name() string { return "cuda" }

// cString is s with a NUL appended, for passing to C.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// maxCString bounds the strings read from the driver.
const maxCString = 1 << 16

// goString copies the NUL-terminated C string at p.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for n < maxCString && *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// bufString is the bytes of b up to the first NUL.
func bufString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
