package nccl

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/ebitengine/purego"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/dl"
)

// Window is an ncclWindow_t: a buffer registered with a communicator by
// RegisterWindows (0 is none).
type Window uintptr

// Window registration flags (nccl.h).
const (
	// WinDefault registers a buffer for zero-copy use only.
	WinDefault = 0x00
	// WinCollSymmetric registers it for NCCL's symmetric kernels: every
	// rank registers a buffer of the same size, and every collective
	// passes each rank the same offset into it.
	WinCollSymmetric = 0x01
)

// SymmetricVersion is the first NCCL with memory windows and the
// symmetric kernels (ncclGetVersion's code of NCCL 2.27.3).
const SymmetricVersion = 22703

// ErrNotAvailable: the loaded NCCL lacks what was asked for (an entry
// point of a later NCCL, or a feature it turned off).
var ErrNotAvailable = errors.New("nccl: not available in this NCCL")

// ErrNoWindow: ncclCommWindowRegister succeeded but registered nothing,
// which NCCL does when its communicator cannot use symmetric memory
// (NCCL 2.29 and later), with NCCL_LOCAL_REGISTER=0, or with cuMem off
// (NCCL_CUMEM_ENABLE=0). It matches ErrNotAvailable.
var ErrNoWindow = fmt.Errorf("%w: ncclCommWindowRegister registered no window (NCCL does so where the communicator cannot use symmetric memory, with NCCL_LOCAL_REGISTER=0, or with NCCL_CUMEM_ENABLE=0)", ErrNotAvailable)

// windowCalls are the entry points of NCCL's memory windows, bound where
// the library has them (nil where it does not): ncclMemAlloc and
// ncclMemFree came with NCCL 2.19, the window calls with 2.27.3.
type windowCalls struct {
	memAlloc   func(ptr *uintptr, size uintptr) int32
	memFree    func(ptr uintptr) int32
	register   func(c Comm, buf, size uintptr, win *Window, flags int32) int32
	deregister func(c Comm, win Window) int32
}

// bindWindows binds the window calls the library has.
func (l *Lib) bindWindows() {
	for _, r := range []struct {
		name string
		fn   any
	}{
		{"ncclMemAlloc", &l.win.memAlloc},
		{"ncclMemFree", &l.win.memFree},
		{"ncclCommWindowRegister", &l.win.register},
		{"ncclCommWindowDeregister", &l.win.deregister},
	} {
		if p, err := dl.Sym(l.handle, r.name); err == nil && p != 0 {
			purego.RegisterFunc(r.fn, p)
		}
	}
}

// has returns an error matching ErrNotAvailable when the library lacks
// entry point name (bound is whether it has it).
func (l *Lib) has(name string, bound bool) error {
	if err := l.usable(name); err != nil {
		return err
	}
	if bound {
		return nil
	}
	v := "of unknown version"
	if code, err := l.Version(); err == nil {
		v = "NCCL " + VersionString(code)
	}
	return fmt.Errorf("%w: %s (%s) has no %s", ErrNotAvailable, l.path, v, name)
}

// Symmetric reports whether the library has NCCL's symmetric memory:
// ncclMemAlloc, ncclMemFree, ncclCommWindowRegister and
// ncclCommWindowDeregister, in NCCL 2.27.3 or later. It returns nil when
// it has, and otherwise an error matching ErrNotAvailable that names the
// version and what is missing. Whether NCCL then runs a collective with
// its symmetric kernels is NCCL's choice (the collective, type and
// operator, the transports, the rank count: see docs/perf.md).
func (l *Lib) Symmetric() error {
	for _, c := range []struct {
		name  string
		bound bool
	}{
		{"ncclMemAlloc", l.win.memAlloc != nil},
		{"ncclMemFree", l.win.memFree != nil},
		{"ncclCommWindowRegister", l.win.register != nil},
		{"ncclCommWindowDeregister", l.win.deregister != nil},
	} {
		if err := l.has(c.name, c.bound); err != nil {
			return fmt.Errorf("symmetric memory needs NCCL %s or later: %w", VersionString(SymmetricVersion), err)
		}
	}
	v, err := l.Version()
	if err != nil {
		return err
	}
	if v < SymmetricVersion {
		return fmt.Errorf("%w: symmetric memory needs NCCL %s or later: %s is NCCL %s", ErrNotAvailable, VersionString(SymmetricVersion), l.path, VersionString(v))
	}
	return nil
}

// MemAlloc is ncclMemAlloc: size bytes of device memory on the current
// device, from the CUDA VMM API as NCCL's registration wants them (the
// allocation may be larger than size). Free it with MemFree.
func (l *Lib) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	if err := l.has("ncclMemAlloc", l.win.memAlloc != nil); err != nil {
		return 0, err
	}
	if size == 0 {
		return 0, fmt.Errorf("nccl: ncclMemAlloc: 0 bytes: %w", ErrInvalidArgument)
	}
	var p uintptr
	if err := l.check("ncclMemAlloc", l.win.memAlloc(&p, uintptr(size))); err != nil {
		return 0, err
	}
	return cuda.DevicePtr(p), nil
}

// MemFree is ncclMemFree.
func (l *Lib) MemFree(p cuda.DevicePtr) error {
	if err := l.has("ncclMemFree", l.win.memFree != nil); err != nil {
		return err
	}
	return l.check("ncclMemFree", l.win.memFree(uintptr(p)))
}

// WindowRequest is one buffer to register with one communicator.
type WindowRequest struct {
	Comm  Comm
	Buf   cuda.DevicePtr
	Size  uint64
	Flags int // WinDefault, WinCollSymmetric
}

// RegisterWindows is ncclCommWindowRegister for every request, as one
// collective call: ncclGroupStart, then for each request current(i)
// (which makes the device of reqs[i].Comm current: the caller is on a
// locked OS thread) and the registration, then ncclGroupEnd. Every rank
// of a communicator registers at once (one process driving several GPUs
// gives them all here; one process per GPU calls it on every process).
// NCCL 2.28 and later write the windows only when the group ends, so
// they are read after it, from memory pinned until then.
//
// windows[i] is reqs[i]'s. A request NCCL registered nothing for gives
// an error matching ErrNoWindow; the windows it did register are
// returned with it, for CommWindowDeregister.
func (l *Lib) RegisterWindows(reqs []WindowRequest, current func(i int) error) ([]Window, error) {
	if err := l.has("ncclCommWindowRegister", l.win.register != nil); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	wins := make([]Window, len(reqs))
	var pin runtime.Pinner
	pin.Pin(&wins[0])
	defer pin.Unpin()
	if err := l.GroupStart(); err != nil {
		return nil, err
	}
	var first error
	for i, r := range reqs {
		if first = current(i); first != nil {
			break
		}
		res := l.win.register(r.Comm, uintptr(r.Buf), uintptr(r.Size), &wins[i], int32(r.Flags))
		if first = l.check("ncclCommWindowRegister", res); first != nil {
			break
		}
	}
	if err := l.GroupEnd(); err != nil && first == nil {
		first = err
	}
	if first == nil {
		for i, w := range wins {
			if w == 0 {
				first = fmt.Errorf("request %d (communicator %#x, %d bytes at %#x): %w", i, uintptr(reqs[i].Comm), reqs[i].Size, uint64(reqs[i].Buf), ErrNoWindow)
				break
			}
		}
	}
	return wins, first
}

// CommWindowDeregister is ncclCommWindowDeregister, with the device of c
// current.
func (l *Lib) CommWindowDeregister(c Comm, w Window) error {
	if err := l.has("ncclCommWindowDeregister", l.win.deregister != nil); err != nil {
		return err
	}
	if w == 0 {
		return fmt.Errorf("nccl: ncclCommWindowDeregister: no window: %w", ErrInvalidArgument)
	}
	return l.check("ncclCommWindowDeregister", l.win.deregister(c, w))
}
