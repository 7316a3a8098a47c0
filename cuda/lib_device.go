package cuda

import "unsafe"

// Init is cuInit(0). Open already ran it; calling it again is harmless.
func (l *Lib) Init() error { return l.call(pInit, 0) }

// DriverVersion is cuDriverGetVersion: 1000*major + 10*minor (13000 for
// CUDA 13.0).
func (l *Lib) DriverVersion() (int, error) {
	var v int32
	err := l.call(pDriverGetVersion, uintptr(unsafe.Pointer(&v)))
	return out(int(v), err)
}

// DeviceCount is cuDeviceGetCount.
func (l *Lib) DeviceCount() (int, error) {
	var n int32
	err := l.call(pDeviceGetCount, uintptr(unsafe.Pointer(&n)))
	return out(int(n), err)
}

// DeviceGet is cuDeviceGet.
func (l *Lib) DeviceGet(ordinal int) (Device, error) {
	var d Device
	err := l.call(pDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal))
	return out(d, err)
}

// deviceNameLen is the buffer cuDeviceGetName writes into.
const deviceNameLen = 256

// DeviceName is cuDeviceGetName.
func (l *Lib) DeviceName(d Device) (string, error) {
	var buf [deviceNameLen]byte
	err := l.call(pDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), deviceNameLen, uintptr(d))
	return out(bufString(buf[:]), err)
}

// DeviceAttribute is cuDeviceGetAttribute.
func (l *Lib) DeviceAttribute(attr DeviceAttribute, d Device) (int, error) {
	var v int32
	err := l.call(pDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(d))
	return out(int(v), err)
}

// DeviceTotalMem is cuDeviceTotalMem (the _v2 ABI: size_t).
func (l *Lib) DeviceTotalMem(d Device) (uint64, error) {
	var n uint64
	err := l.call(pDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(d))
	return out(n, err)
}

// DeviceCanAccessPeer is cuDeviceCanAccessPeer(d, peer): whether d can
// access peer's memory.
func (l *Lib) DeviceCanAccessPeer(d, peer Device) (bool, error) {
	var v int32
	err := l.call(pDeviceCanAccessPeer, uintptr(unsafe.Pointer(&v)), uintptr(d), uintptr(peer))
	return out(v != 0, err)
}

// pciBusIDLen holds "dddddddd:bb:dd.f" and its NUL with room to spare.
const pciBusIDLen = 64

// DevicePCIBusID is cuDeviceGetPCIBusId ("0000:1b:00.0").
func (l *Lib) DevicePCIBusID(d Device) (string, error) {
	var buf [pciBusIDLen]byte
	err := l.call(pDeviceGetPCIBusID, uintptr(unsafe.Pointer(&buf[0])), pciBusIDLen, uintptr(d))
	return out(bufString(buf[:]), err)
}

// PrimaryCtxRetain is cuDevicePrimaryCtxRetain.
func (l *Lib) PrimaryCtxRetain(d Device) (Context, error) {
	var c Context
	err := l.call(pDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(d))
	return out(c, err)
}

// PrimaryCtxRelease is cuDevicePrimaryCtxRelease (the _v2 ABI).
func (l *Lib) PrimaryCtxRelease(d Device) error { return l.call(pDevicePrimaryCtxRelease, uintptr(d)) }

// CtxSetCurrent is cuCtxSetCurrent: c becomes the calling OS thread's
// current context.
func (l *Lib) CtxSetCurrent(c Context) error {
	b := hotArgs()
	b.a[0] = uintptr(c)
	return l.callHot(pCtxSetCurrent, b, 1)
}

// CtxGetCurrent is cuCtxGetCurrent (0 when none is current).
func (l *Lib) CtxGetCurrent() (Context, error) {
	b := hotArgs()
	b.a[0] = uintptr(unsafe.Pointer(&b.out))
	code, c, err := l.callBlock(pCtxGetCurrent, b, 1)
	if err == nil {
		err = l.check(pCtxGetCurrent, code, "")
	}
	return out(Context(c), err)
}

// CtxSynchronize is cuCtxSynchronize.
func (l *Lib) CtxSynchronize() error { return l.call(pCtxSynchronize) }
