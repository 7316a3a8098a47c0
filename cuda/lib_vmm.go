package cuda

import (
	"fmt"
	"unsafe"
)

// MemGetAllocationGranularity is cuMemGetAllocationGranularity.
func (l *Lib) MemGetAllocationGranularity(prop *AllocationProp, option GranularityFlags) (uint64, error) {
	return granularity(l, pMemGetAllocationGranularity, prop, option)
}

// granularity is cuMemGetAllocationGranularity or cuMulticastGetGranularity
// (id), which take the same arguments but for the properties.
func granularity[P AllocationProp | MulticastProp](l *Lib, id proc, prop *P, option GranularityFlags) (uint64, error) {
	if prop == nil {
		return 0, l.invalid(id, "nil properties")
	}
	var g uint64
	err := l.call(id, uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(prop)), uintptr(option))
	return out(g, err)
}

// MemCreate is cuMemCreate(size, prop, 0). prop is passed as it is laid
// out: AllocationProp has the C layout of CUmemAllocationProp.
func (l *Lib) MemCreate(size uint64, prop *AllocationProp) (MemHandle, error) {
	if prop == nil {
		return 0, l.invalid(pMemCreate, "nil allocation properties")
	}
	var h MemHandle
	err := l.call(pMemCreate, uintptr(unsafe.Pointer(&h)), uintptr(size), uintptr(unsafe.Pointer(prop)), 0)
	return out(h, err)
}

// MemRelease is cuMemRelease.
func (l *Lib) MemRelease(h MemHandle) error { return l.call(pMemRelease, uintptr(h)) }

// MemAddressReserve is cuMemAddressReserve(size, align, addr, 0).
func (l *Lib) MemAddressReserve(size, align uint64, addr DevicePtr) (DevicePtr, error) {
	var p DevicePtr
	err := l.call(pMemAddressReserve, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(align), uintptr(addr), 0)
	return out(p, err)
}

// MemAddressFree is cuMemAddressFree.
func (l *Lib) MemAddressFree(p DevicePtr, size uint64) error {
	return l.call(pMemAddressFree, uintptr(p), uintptr(size))
}

// MemMap is cuMemMap(p, size, offset, h, 0).
func (l *Lib) MemMap(p DevicePtr, size, offset uint64, h MemHandle) error {
	return l.call(pMemMap, uintptr(p), uintptr(size), uintptr(offset), uintptr(h), 0)
}

// MemUnmap is cuMemUnmap.
func (l *Lib) MemUnmap(p DevicePtr, size uint64) error {
	return l.call(pMemUnmap, uintptr(p), uintptr(size))
}

// MemSetAccess is cuMemSetAccess(p, size, desc, len(desc)).
func (l *Lib) MemSetAccess(p DevicePtr, size uint64, desc []AccessDesc) error {
	if len(desc) == 0 {
		return l.invalid(pMemSetAccess, "no access descriptors")
	}
	return l.call(pMemSetAccess, uintptr(p), uintptr(size), uintptr(unsafe.Pointer(&desc[0])), uintptr(len(desc)))
}

// MemGetAccess is cuMemGetAccess: the access loc has to the mapping at p.
func (l *Lib) MemGetAccess(loc MemLocation, p DevicePtr) (AccessFlags, error) {
	var flags uint64
	err := l.call(pMemGetAccess, uintptr(unsafe.Pointer(&flags)), uintptr(unsafe.Pointer(&loc)), uintptr(p))
	return out(AccessFlags(flags), err)
}

// MemGetAllocationPropertiesFromHandle is
// cuMemGetAllocationPropertiesFromHandle.
func (l *Lib) MemGetAllocationPropertiesFromHandle(h MemHandle) (AllocationProp, error) {
	var prop AllocationProp
	err := l.call(pMemGetAllocationPropertiesFromHandle, uintptr(unsafe.Pointer(&prop)), uintptr(h))
	return out(prop, err)
}

// MemRetainAllocationHandle is cuMemRetainAllocationHandle: the handle of
// the allocation mapped at p, with a reference the caller releases with
// MemRelease. The address travels as a void* holding the device address.
func (l *Lib) MemRetainAllocationHandle(p DevicePtr) (MemHandle, error) {
	var h MemHandle
	err := l.call(pMemRetainAllocationHandle, uintptr(unsafe.Pointer(&h)), uintptr(p))
	return out(h, err)
}

// MemExportToShareableHandle is cuMemExportToShareableHandle(h, t, 0). For
// HandlePosixFD the driver writes an int (the new FD, which the caller
// closes); for HandleFabric a 64-byte CUmemFabricHandle.
func (l *Lib) MemExportToShareableHandle(h MemHandle, t HandleType) (ShareableHandle, error) {
	switch t {
	case HandlePosixFD:
		var fd int32
		err := l.call(pMemExportToShareableHandle, uintptr(unsafe.Pointer(&fd)), uintptr(h), uintptr(t), 0)
		return out(ShareableHandle{Type: HandlePosixFD, FD: int(fd)}, err)
	case HandleFabric:
		var fh FabricHandle
		err := l.call(pMemExportToShareableHandle, uintptr(unsafe.Pointer(&fh[0])), uintptr(h), uintptr(t), 0)
		return out(ShareableHandle{Type: HandleFabric, FD: -1, Fabric: fh}, err)
	}
	return ShareableHandle{}, l.invalid(pMemExportToShareableHandle,
		fmt.Sprintf("handle type %v: this binding exports posix-fd or fabric handles", t))
}

// MemImportFromShareableHandle is cuMemImportFromShareableHandle. A POSIX
// FD travels as its value cast to a pointer ((void*)(uintptr_t)fd), a
// fabric handle as a pointer to its 64 bytes. The FD stays open: the caller
// closes it.
func (l *Lib) MemImportFromShareableHandle(sh ShareableHandle) (MemHandle, error) {
	var h MemHandle
	var err error
	switch {
	case sh.Type == HandlePosixFD && sh.FD < 0:
		err = l.invalid(pMemImportFromShareableHandle, fmt.Sprintf("negative file descriptor %d", sh.FD))
	case sh.Type == HandlePosixFD:
		err = l.call(pMemImportFromShareableHandle, uintptr(unsafe.Pointer(&h)), uintptr(sh.FD), uintptr(HandlePosixFD))
	case sh.Type == HandleFabric:
		fh := sh.Fabric
		err = l.call(pMemImportFromShareableHandle, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&fh[0])), uintptr(HandleFabric))
	default:
		err = l.invalid(pMemImportFromShareableHandle,
			fmt.Sprintf("handle type %v: this binding imports posix-fd or fabric handles", sh.Type))
	}
	return out(h, err)
}

// MulticastGetGranularity is cuMulticastGetGranularity.
func (l *Lib) MulticastGetGranularity(prop *MulticastProp, option GranularityFlags) (uint64, error) {
	return granularity(l, pMulticastGetGranularity, prop, option)
}

// MulticastCreate is cuMulticastCreate. With NCCL_NVLS_ENABLE=0 in the
// environment, or a value of it that is not understood
// (MulticastDisabledByEnv), it returns ErrMulticastDisabled before
// anything else: before looking at whether a driver is loaded or has the
// entry point.
func (l *Lib) MulticastCreate(prop *MulticastProp) (MemHandle, error) {
	if off, err := MulticastDisabledByEnv(); err != nil {
		return 0, fmt.Errorf("cuMulticastCreate not called: %w (a value not understood is off): %w", ErrMulticastDisabled, err)
	} else if off {
		return 0, fmt.Errorf("cuMulticastCreate not called: %w=0", ErrMulticastDisabled)
	}
	if prop == nil {
		return 0, l.invalid(pMulticastCreate, "nil multicast properties")
	}
	var h MemHandle
	err := l.call(pMulticastCreate, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(prop)))
	return out(h, err)
}

// MulticastAddDevice is cuMulticastAddDevice.
func (l *Lib) MulticastAddDevice(mc MemHandle, d Device) error {
	return l.call(pMulticastAddDevice, uintptr(mc), uintptr(d))
}

// MulticastBindMem is cuMulticastBindMem(mc, mcOffset, mem, memOffset,
// size, 0).
func (l *Lib) MulticastBindMem(mc MemHandle, mcOffset uint64, mem MemHandle, memOffset, size uint64) error {
	return l.call(pMulticastBindMem, uintptr(mc), uintptr(mcOffset), uintptr(mem), uintptr(memOffset), uintptr(size), 0)
}

// MulticastBindAddr is cuMulticastBindAddr(mc, mcOffset, p, size, 0).
func (l *Lib) MulticastBindAddr(mc MemHandle, mcOffset uint64, p DevicePtr, size uint64) error {
	return l.call(pMulticastBindAddr, uintptr(mc), uintptr(mcOffset), uintptr(p), uintptr(size), 0)
}

// MulticastUnbind is cuMulticastUnbind.
func (l *Lib) MulticastUnbind(mc MemHandle, d Device, mcOffset, size uint64) error {
	return l.call(pMulticastUnbind, uintptr(mc), uintptr(d), uintptr(mcOffset), uintptr(size))
}
