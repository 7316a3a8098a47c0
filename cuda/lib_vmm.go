package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// MemGetAllocationGranularity is cuMemGetAllocationGranularity.
func (l *Lib) MemGetAllocationGranularity(prop *AllocationProp, option GranularityFlags) (uint64, error) {
	fn := l.proc(pMemGetAllocationGranularity)
	if fn == 0 {
		return 0, l.unavailable(pMemGetAllocationGranularity)
	}
	if prop == nil {
		return 0, NewError(entryPoints[pMemGetAllocationGranularity].name, ErrorInvalidValue, "nil allocation properties")
	}
	var g uint64
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(prop)), uintptr(option))
	if err := l.check(pMemGetAllocationGranularity, r); err != nil {
		return 0, err
	}
	return g, nil
}

// MemCreate is cuMemCreate(size, prop, 0). prop is passed as it is laid
// out: AllocationProp has the C layout of CUmemAllocationProp.
func (l *Lib) MemCreate(size uint64, prop *AllocationProp) (MemHandle, error) {
	fn := l.proc(pMemCreate)
	if fn == 0 {
		return 0, l.unavailable(pMemCreate)
	}
	if prop == nil {
		return 0, NewError(entryPoints[pMemCreate].name, ErrorInvalidValue, "nil allocation properties")
	}
	var h MemHandle
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&h)), uintptr(size), uintptr(unsafe.Pointer(prop)), 0)
	if err := l.check(pMemCreate, r); err != nil {
		return 0, err
	}
	return h, nil
}

// MemRelease is cuMemRelease.
func (l *Lib) MemRelease(h MemHandle) error {
	fn := l.proc(pMemRelease)
	if fn == 0 {
		return l.unavailable(pMemRelease)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(h))
	return l.check(pMemRelease, r)
}

// MemAddressReserve is cuMemAddressReserve(size, align, addr, 0).
func (l *Lib) MemAddressReserve(size, align uint64, addr DevicePtr) (DevicePtr, error) {
	fn := l.proc(pMemAddressReserve)
	if fn == 0 {
		return 0, l.unavailable(pMemAddressReserve)
	}
	var p DevicePtr
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(align), uintptr(addr), 0)
	if err := l.check(pMemAddressReserve, r); err != nil {
		return 0, err
	}
	return p, nil
}

// MemAddressFree is cuMemAddressFree.
func (l *Lib) MemAddressFree(p DevicePtr, size uint64) error {
	fn := l.proc(pMemAddressFree)
	if fn == 0 {
		return l.unavailable(pMemAddressFree)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(p), uintptr(size))
	return l.check(pMemAddressFree, r)
}

// MemMap is cuMemMap(p, size, offset, h, 0).
func (l *Lib) MemMap(p DevicePtr, size, offset uint64, h MemHandle) error {
	fn := l.proc(pMemMap)
	if fn == 0 {
		return l.unavailable(pMemMap)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(p), uintptr(size), uintptr(offset), uintptr(h), 0)
	return l.check(pMemMap, r)
}

// MemUnmap is cuMemUnmap.
func (l *Lib) MemUnmap(p DevicePtr, size uint64) error {
	fn := l.proc(pMemUnmap)
	if fn == 0 {
		return l.unavailable(pMemUnmap)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(p), uintptr(size))
	return l.check(pMemUnmap, r)
}

// MemSetAccess is cuMemSetAccess(p, size, desc, len(desc)).
func (l *Lib) MemSetAccess(p DevicePtr, size uint64, desc []AccessDesc) error {
	fn := l.proc(pMemSetAccess)
	if fn == 0 {
		return l.unavailable(pMemSetAccess)
	}
	if len(desc) == 0 {
		return NewError(entryPoints[pMemSetAccess].name, ErrorInvalidValue, "no access descriptors")
	}
	r, _, _ := purego.SyscallN(fn, uintptr(p), uintptr(size), uintptr(unsafe.Pointer(&desc[0])), uintptr(len(desc)))
	return l.check(pMemSetAccess, r)
}

// MemGetAccess is cuMemGetAccess: the access loc has to the mapping at p.
func (l *Lib) MemGetAccess(loc MemLocation, p DevicePtr) (AccessFlags, error) {
	fn := l.proc(pMemGetAccess)
	if fn == 0 {
		return 0, l.unavailable(pMemGetAccess)
	}
	var flags uint64
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&flags)), uintptr(unsafe.Pointer(&loc)), uintptr(p))
	if err := l.check(pMemGetAccess, r); err != nil {
		return 0, err
	}
	return AccessFlags(flags), nil
}

// MemGetAllocationPropertiesFromHandle is
// cuMemGetAllocationPropertiesFromHandle.
func (l *Lib) MemGetAllocationPropertiesFromHandle(h MemHandle) (AllocationProp, error) {
	fn := l.proc(pMemGetAllocationPropertiesFromHandle)
	if fn == 0 {
		return AllocationProp{}, l.unavailable(pMemGetAllocationPropertiesFromHandle)
	}
	var prop AllocationProp
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&prop)), uintptr(h))
	if err := l.check(pMemGetAllocationPropertiesFromHandle, r); err != nil {
		return AllocationProp{}, err
	}
	return prop, nil
}

// MemRetainAllocationHandle is cuMemRetainAllocationHandle: the handle of
// the allocation mapped at p, with a reference the caller releases with
// MemRelease.
func (l *Lib) MemRetainAllocationHandle(p DevicePtr) (MemHandle, error) {
	fn := l.proc(pMemRetainAllocationHandle)
	if fn == 0 {
		return 0, l.unavailable(pMemRetainAllocationHandle)
	}
	var h MemHandle
	// The address travels as a void* holding the device address.
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&h)), uintptr(p))
	if err := l.check(pMemRetainAllocationHandle, r); err != nil {
		return 0, err
	}
	return h, nil
}

// MemExportToShareableHandle is cuMemExportToShareableHandle(h, t, 0). For
// HandlePosixFD the driver writes an int (the new FD, which the caller
// closes); for HandleFabric a 64-byte CUmemFabricHandle.
func (l *Lib) MemExportToShareableHandle(h MemHandle, t HandleType) (ShareableHandle, error) {
	fn := l.proc(pMemExportToShareableHandle)
	if fn == 0 {
		return ShareableHandle{}, l.unavailable(pMemExportToShareableHandle)
	}
	switch t {
	case HandlePosixFD:
		var fd int32
		r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&fd)), uintptr(h), uintptr(t), 0)
		if err := l.check(pMemExportToShareableHandle, r); err != nil {
			return ShareableHandle{}, err
		}
		return ShareableHandle{Type: HandlePosixFD, FD: int(fd)}, nil
	case HandleFabric:
		var fh FabricHandle
		r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&fh[0])), uintptr(h), uintptr(t), 0)
		if err := l.check(pMemExportToShareableHandle, r); err != nil {
			return ShareableHandle{}, err
		}
		return ShareableHandle{Type: HandleFabric, FD: -1, Fabric: fh}, nil
	}
	return ShareableHandle{}, NewError(entryPoints[pMemExportToShareableHandle].name, ErrorInvalidValue,
		fmt.Sprintf("handle type %v: this binding exports posix-fd or fabric handles", t))
}

// MemImportFromShareableHandle is cuMemImportFromShareableHandle. A POSIX
// FD travels as its value cast to a pointer ((void*)(uintptr_t)fd), a
// fabric handle as a pointer to its 64 bytes. The FD stays open: the caller
// closes it.
func (l *Lib) MemImportFromShareableHandle(sh ShareableHandle) (MemHandle, error) {
	fn := l.proc(pMemImportFromShareableHandle)
	if fn == 0 {
		return 0, l.unavailable(pMemImportFromShareableHandle)
	}
	var h MemHandle
	switch sh.Type {
	case HandlePosixFD:
		if sh.FD < 0 {
			return 0, NewError(entryPoints[pMemImportFromShareableHandle].name, ErrorInvalidValue,
				fmt.Sprintf("negative file descriptor %d", sh.FD))
		}
		r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&h)), uintptr(sh.FD), uintptr(HandlePosixFD))
		if err := l.check(pMemImportFromShareableHandle, r); err != nil {
			return 0, err
		}
		return h, nil
	case HandleFabric:
		fh := sh.Fabric
		r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&fh[0])), uintptr(HandleFabric))
		if err := l.check(pMemImportFromShareableHandle, r); err != nil {
			return 0, err
		}
		return h, nil
	}
	return 0, NewError(entryPoints[pMemImportFromShareableHandle].name, ErrorInvalidValue,
		fmt.Sprintf("handle type %v: this binding imports posix-fd or fabric handles", sh.Type))
}

// MulticastGetGranularity is cuMulticastGetGranularity.
func (l *Lib) MulticastGetGranularity(prop *MulticastProp, option GranularityFlags) (uint64, error) {
	fn := l.proc(pMulticastGetGranularity)
	if fn == 0 {
		return 0, l.unavailable(pMulticastGetGranularity)
	}
	if prop == nil {
		return 0, NewError(entryPoints[pMulticastGetGranularity].name, ErrorInvalidValue, "nil multicast properties")
	}
	var g uint64
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(prop)), uintptr(option))
	if err := l.check(pMulticastGetGranularity, r); err != nil {
		return 0, err
	}
	return g, nil
}

// MulticastCreate is cuMulticastCreate. With NCCL_NVLS_ENABLE=0 in the
// environment it returns ErrMulticastDisabled before anything else: before
// looking at whether a driver is loaded or has the entry point.
func (l *Lib) MulticastCreate(prop *MulticastProp) (MemHandle, error) {
	if MulticastDisabledByEnv() {
		return 0, fmt.Errorf("cuMulticastCreate not called: %w", ErrMulticastDisabled)
	}
	fn := l.proc(pMulticastCreate)
	if fn == 0 {
		return 0, l.unavailable(pMulticastCreate)
	}
	if prop == nil {
		return 0, NewError(entryPoints[pMulticastCreate].name, ErrorInvalidValue, "nil multicast properties")
	}
	var h MemHandle
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(prop)))
	if err := l.check(pMulticastCreate, r); err != nil {
		return 0, err
	}
	return h, nil
}

// MulticastAddDevice is cuMulticastAddDevice.
func (l *Lib) MulticastAddDevice(mc MemHandle, d Device) error {
	fn := l.proc(pMulticastAddDevice)
	if fn == 0 {
		return l.unavailable(pMulticastAddDevice)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(mc), uintptr(d))
	return l.check(pMulticastAddDevice, r)
}

// MulticastBindMem is cuMulticastBindMem(mc, mcOffset, mem, memOffset,
// size, 0).
func (l *Lib) MulticastBindMem(mc MemHandle, mcOffset uint64, mem MemHandle, memOffset, size uint64) error {
	fn := l.proc(pMulticastBindMem)
	if fn == 0 {
		return l.unavailable(pMulticastBindMem)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(mc), uintptr(mcOffset), uintptr(mem), uintptr(memOffset), uintptr(size), 0)
	return l.check(pMulticastBindMem, r)
}

// MulticastBindAddr is cuMulticastBindAddr(mc, mcOffset, p, size, 0).
func (l *Lib) MulticastBindAddr(mc MemHandle, mcOffset uint64, p DevicePtr, size uint64) error {
	fn := l.proc(pMulticastBindAddr)
	if fn == 0 {
		return l.unavailable(pMulticastBindAddr)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(mc), uintptr(mcOffset), uintptr(p), uintptr(size), 0)
	return l.check(pMulticastBindAddr, r)
}

// MulticastUnbind is cuMulticastUnbind.
func (l *Lib) MulticastUnbind(mc MemHandle, d Device, mcOffset, size uint64) error {
	fn := l.proc(pMulticastUnbind)
	if fn == 0 {
		return l.unavailable(pMulticastUnbind)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(mc), uintptr(d), uintptr(mcOffset), uintptr(size))
	return l.check(pMulticastUnbind, r)
}
