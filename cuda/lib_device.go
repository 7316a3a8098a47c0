package cuda

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// Init is cuInit(0). Open already ran it; calling it again is harmless.
func (l *Lib) Init() error {
	fn := l.proc(pInit)
	if fn == 0 {
		return l.unavailable(pInit)
	}
	r, _, _ := purego.SyscallN(fn, 0)
	return l.check(pInit, r)
}

// DriverVersion is cuDriverGetVersion: 1000*major + 10*minor (13000 for
// CUDA 13.0).
func (l *Lib) DriverVersion() (int, error) {
	fn := l.proc(pDriverGetVersion)
	if fn == 0 {
		return 0, l.unavailable(pDriverGetVersion)
	}
	var v int32
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&v)))
	if err := l.check(pDriverGetVersion, r); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount is cuDeviceGetCount.
func (l *Lib) DeviceCount() (int, error) {
	fn := l.proc(pDeviceGetCount)
	if fn == 0 {
		return 0, l.unavailable(pDeviceGetCount)
	}
	var n int32
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&n)))
	if err := l.check(pDeviceGetCount, r); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DeviceGet is cuDeviceGet.
func (l *Lib) DeviceGet(ordinal int) (Device, error) {
	fn := l.proc(pDeviceGet)
	if fn == 0 {
		return 0, l.unavailable(pDeviceGet)
	}
	var d Device
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&d)), uintptr(ordinal))
	if err := l.check(pDeviceGet, r); err != nil {
		return 0, err
	}
	return d, nil
}

// deviceNameLen is the buffer cuDeviceGetName writes into.
const deviceNameLen = 256

// DeviceName is cuDeviceGetName.
func (l *Lib) DeviceName(d Device) (string, error) {
	fn := l.proc(pDeviceGetName)
	if fn == 0 {
		return "", l.unavailable(pDeviceGetName)
	}
	var buf [deviceNameLen]byte
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&buf[0])), deviceNameLen, uintptr(d))
	if err := l.check(pDeviceGetName, r); err != nil {
		return "", err
	}
	return bufString(buf[:]), nil
}

// DeviceAttribute is cuDeviceGetAttribute.
func (l *Lib) DeviceAttribute(attr DeviceAttribute, d Device) (int, error) {
	fn := l.proc(pDeviceGetAttribute)
	if fn == 0 {
		return 0, l.unavailable(pDeviceGetAttribute)
	}
	var v int32
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(d))
	if err := l.check(pDeviceGetAttribute, r); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceTotalMem is cuDeviceTotalMem (the _v2 ABI: size_t).
func (l *Lib) DeviceTotalMem(d Device) (uint64, error) {
	fn := l.proc(pDeviceTotalMem)
	if fn == 0 {
		return 0, l.unavailable(pDeviceTotalMem)
	}
	var n uint64
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&n)), uintptr(d))
	if err := l.check(pDeviceTotalMem, r); err != nil {
		return 0, err
	}
	return n, nil
}

// DeviceCanAccessPeer is cuDeviceCanAccessPeer(d, peer): whether d can
// access peer's memory.
func (l *Lib) DeviceCanAccessPeer(d, peer Device) (bool, error) {
	fn := l.proc(pDeviceCanAccessPeer)
	if fn == 0 {
		return false, l.unavailable(pDeviceCanAccessPeer)
	}
	var v int32
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&v)), uintptr(d), uintptr(peer))
	if err := l.check(pDeviceCanAccessPeer, r); err != nil {
		return false, err
	}
	return v != 0, nil
}

// pciBusIDLen holds "dddddddd:bb:dd.f" and its NUL with room to spare.
const pciBusIDLen = 64

// DevicePCIBusID is cuDeviceGetPCIBusId ("0000:1b:00.0").
func (l *Lib) DevicePCIBusID(d Device) (string, error) {
	fn := l.proc(pDeviceGetPCIBusID)
	if fn == 0 {
		return "", l.unavailable(pDeviceGetPCIBusID)
	}
	var buf [pciBusIDLen]byte
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&buf[0])), pciBusIDLen, uintptr(d))
	if err := l.check(pDeviceGetPCIBusID, r); err != nil {
		return "", err
	}
	return bufString(buf[:]), nil
}

// PrimaryCtxRetain is cuDevicePrimaryCtxRetain.
func (l *Lib) PrimaryCtxRetain(d Device) (Context, error) {
	fn := l.proc(pDevicePrimaryCtxRetain)
	if fn == 0 {
		return 0, l.unavailable(pDevicePrimaryCtxRetain)
	}
	var c Context
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&c)), uintptr(d))
	if err := l.check(pDevicePrimaryCtxRetain, r); err != nil {
		return 0, err
	}
	return c, nil
}

// PrimaryCtxRelease is cuDevicePrimaryCtxRelease (the _v2 ABI).
func (l *Lib) PrimaryCtxRelease(d Device) error {
	fn := l.proc(pDevicePrimaryCtxRelease)
	if fn == 0 {
		return l.unavailable(pDevicePrimaryCtxRelease)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(d))
	return l.check(pDevicePrimaryCtxRelease, r)
}

// CtxSetCurrent is cuCtxSetCurrent: c becomes the calling OS thread's
// current context.
func (l *Lib) CtxSetCurrent(c Context) error {
	fn := l.proc(pCtxSetCurrent)
	if fn == 0 {
		return l.unavailable(pCtxSetCurrent)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(c))
	return l.check(pCtxSetCurrent, r)
}

// CtxGetCurrent is cuCtxGetCurrent (0 when none is current).
func (l *Lib) CtxGetCurrent() (Context, error) {
	fn := l.proc(pCtxGetCurrent)
	if fn == 0 {
		return 0, l.unavailable(pCtxGetCurrent)
	}
	var c Context
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&c)))
	if err := l.check(pCtxGetCurrent, r); err != nil {
		return 0, err
	}
	return c, nil
}

// CtxSynchronize is cuCtxSynchronize.
func (l *Lib) CtxSynchronize() error {
	fn := l.proc(pCtxSynchronize)
	if fn == 0 {
		return l.unavailable(pCtxSynchronize)
	}
	r, _, _ := purego.SyscallN(fn)
	return l.check(pCtxSynchronize, r)
}
