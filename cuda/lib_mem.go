package cuda

import "unsafe"

// MemGetInfo is cuMemGetInfo (the _v2 ABI) for the current context's
// device.
func (l *Lib) MemGetInfo() (free, total uint64, err error) {
	if err := l.call(pMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}

// MemAlloc is cuMemAlloc (the _v2 ABI) in the current context.
func (l *Lib) MemAlloc(size uint64) (DevicePtr, error) {
	var p DevicePtr
	err := l.call(pMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size))
	return out(p, err)
}

// MemFree is cuMemFree (the _v2 ABI).
func (l *Lib) MemFree(p DevicePtr) error { return l.call(pMemFree, uintptr(p)) }

// MemAllocManaged is cuMemAllocManaged (flags: MemAttachGlobal).
func (l *Lib) MemAllocManaged(size uint64, flags uint32) (DevicePtr, error) {
	var p DevicePtr
	err := l.call(pMemAllocManaged, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(flags))
	return out(p, err)
}

// MemPrefetchAsync is cuMemPrefetchAsync at its CUDA 8.0 ABI, which takes
// the destination as a CUdevice (CPUDevice for host memory).
func (l *Lib) MemPrefetchAsync(p DevicePtr, size uint64, dst Device, s Stream) error {
	return l.call(pMemPrefetchAsync, uintptr(p), uintptr(size), uintptr(dst), uintptr(s))
}

// MemHostAlloc is cuMemHostAlloc (CUDA 2.2's ABI, which has not changed).
// The memory is not Go's: the garbage collector neither moves nor frees
// it.
func (l *Lib) MemHostAlloc(size uint64, flags uint32) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := l.call(pMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(flags))
	return out(p, err)
}

// MemHostGetDevicePointer is cuMemHostGetDevicePointer (the _v2 ABI).
func (l *Lib) MemHostGetDevicePointer(p unsafe.Pointer, flags uint32) (DevicePtr, error) {
	var d DevicePtr
	err := l.call(pMemHostGetDevicePointer, uintptr(unsafe.Pointer(&d)), uintptr(p), uintptr(flags))
	return out(d, err)
}

// MemFreeHost is cuMemFreeHost.
func (l *Lib) MemFreeHost(p unsafe.Pointer) error { return l.call(pMemFreeHost, uintptr(p)) }

// The copies and sets take the _v2 ABI (64-bit sizes and device
// pointers). Host memory (src or dst as unsafe.Pointer) must stay alive
// and unmoved for a synchronous call, and for an async one until the
// stream has done it.

// MemcpyHtoD is cuMemcpyHtoD.
func (l *Lib) MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n uint64) error {
	return l.call(pMemcpyHtoD, uintptr(dst), uintptr(src), uintptr(n))
}

// MemcpyDtoH is cuMemcpyDtoH.
func (l *Lib) MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n uint64) error {
	return l.call(pMemcpyDtoH, uintptr(dst), uintptr(src), uintptr(n))
}

// MemcpyDtoD is cuMemcpyDtoD.
func (l *Lib) MemcpyDtoD(dst, src DevicePtr, n uint64) error {
	return l.call(pMemcpyDtoD, uintptr(dst), uintptr(src), uintptr(n))
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync.
func (l *Lib) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) error {
	return l.call(pMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync.
func (l *Lib) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) error {
	return l.call(pMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// MemcpyDtoDAsync is cuMemcpyDtoDAsync.
func (l *Lib) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	b := hotArgs()
	b.a[0], b.a[1], b.a[2], b.a[3] = uintptr(dst), uintptr(src), uintptr(n), uintptr(s)
	return l.callHot(pMemcpyDtoDAsync, b, 4)
}

// MemsetD8 is cuMemsetD8: n bytes set to v.
func (l *Lib) MemsetD8(dst DevicePtr, v uint8, n uint64) error {
	return l.call(pMemsetD8, uintptr(dst), uintptr(v), uintptr(n))
}

// MemsetD32 is cuMemsetD32: n 32-bit words (not bytes) set to v; dst
// must be 4-byte aligned.
func (l *Lib) MemsetD32(dst DevicePtr, v uint32, n uint64) error {
	return l.call(pMemsetD32, uintptr(dst), uintptr(v), uintptr(n))
}

// MemsetD8Async is cuMemsetD8Async: n bytes.
func (l *Lib) MemsetD8Async(dst DevicePtr, v uint8, n uint64, s Stream) error {
	return l.call(pMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
}

// MemsetD32Async is cuMemsetD32Async: n 32-bit words.
func (l *Lib) MemsetD32Async(dst DevicePtr, v uint32, n uint64, s Stream) error {
	return l.call(pMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
}

// PointerGetAttribute is cuPointerGetAttribute for attributes whose value
// fits in 64 bits (context, memory type, device ordinal, range start and
// size, mapped, ...). The value is zero-extended: a 4-byte attribute reads
// as its 32 bits, a bool as 0 or 1.
func (l *Lib) PointerGetAttribute(attr PointerAttribute, p DevicePtr) (uint64, error) {
	// Room for the widest attribute (P2P tokens, 16 bytes) and more.
	var v [8]uint64
	err := l.call(pPointerGetAttribute, uintptr(unsafe.Pointer(&v[0])), uintptr(attr), uintptr(p))
	return out(v[0], err)
}
