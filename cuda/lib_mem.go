package cuda

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// MemGetInfo is cuMemGetInfo (the _v2 ABI) for the current context's
// device.
func (l *Lib) MemGetInfo() (free, total uint64, err error) {
	fn := l.proc(pMemGetInfo)
	if fn == 0 {
		return 0, 0, l.unavailable(pMemGetInfo)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))
	if err := l.check(pMemGetInfo, r); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}

// MemAlloc is cuMemAlloc (the _v2 ABI) in the current context.
func (l *Lib) MemAlloc(size uint64) (DevicePtr, error) {
	fn := l.proc(pMemAlloc)
	if fn == 0 {
		return 0, l.unavailable(pMemAlloc)
	}
	var p DevicePtr
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&p)), uintptr(size))
	if err := l.check(pMemAlloc, r); err != nil {
		return 0, err
	}
	return p, nil
}

// MemFree is cuMemFree (the _v2 ABI).
func (l *Lib) MemFree(p DevicePtr) error {
	fn := l.proc(pMemFree)
	if fn == 0 {
		return l.unavailable(pMemFree)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(p))
	return l.check(pMemFree, r)
}

// MemAllocManaged is cuMemAllocManaged (flags: MemAttachGlobal).
func (l *Lib) MemAllocManaged(size uint64, flags uint32) (DevicePtr, error) {
	fn := l.proc(pMemAllocManaged)
	if fn == 0 {
		return 0, l.unavailable(pMemAllocManaged)
	}
	var p DevicePtr
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(flags))
	if err := l.check(pMemAllocManaged, r); err != nil {
		return 0, err
	}
	return p, nil
}

// MemPrefetchAsync is cuMemPrefetchAsync at its CUDA 8.0 ABI, which takes
// the destination as a CUdevice (CPUDevice for host memory).
func (l *Lib) MemPrefetchAsync(p DevicePtr, size uint64, dst Device, s Stream) error {
	fn := l.proc(pMemPrefetchAsync)
	if fn == 0 {
		return l.unavailable(pMemPrefetchAsync)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(p), uintptr(size), uintptr(dst), uintptr(s))
	return l.check(pMemPrefetchAsync, r)
}

// MemcpyHtoD is cuMemcpyHtoD (the _v2 ABI).
func (l *Lib) MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n uint64) error {
	fn := l.proc(pMemcpyHtoD)
	if fn == 0 {
		return l.unavailable(pMemcpyHtoD)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(src), uintptr(n))
	return l.check(pMemcpyHtoD, r)
}

// MemcpyDtoH is cuMemcpyDtoH (the _v2 ABI).
func (l *Lib) MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n uint64) error {
	fn := l.proc(pMemcpyDtoH)
	if fn == 0 {
		return l.unavailable(pMemcpyDtoH)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(src), uintptr(n))
	return l.check(pMemcpyDtoH, r)
}

// MemcpyDtoD is cuMemcpyDtoD (the _v2 ABI).
func (l *Lib) MemcpyDtoD(dst, src DevicePtr, n uint64) error {
	fn := l.proc(pMemcpyDtoD)
	if fn == 0 {
		return l.unavailable(pMemcpyDtoD)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(src), uintptr(n))
	return l.check(pMemcpyDtoD, r)
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync (the _v2 ABI). src must stay alive
// and unmoved until the stream has done the copy.
func (l *Lib) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) error {
	fn := l.proc(pMemcpyHtoDAsync)
	if fn == 0 {
		return l.unavailable(pMemcpyHtoDAsync)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
	return l.check(pMemcpyHtoDAsync, r)
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync (the _v2 ABI). dst must stay alive
// and unmoved until the stream has done the copy.
func (l *Lib) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) error {
	fn := l.proc(pMemcpyDtoHAsync)
	if fn == 0 {
		return l.unavailable(pMemcpyDtoHAsync)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
	return l.check(pMemcpyDtoHAsync, r)
}

// MemcpyDtoDAsync is cuMemcpyDtoDAsync (the _v2 ABI).
func (l *Lib) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	fn := l.proc(pMemcpyDtoDAsync)
	if fn == 0 {
		return l.unavailable(pMemcpyDtoDAsync)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
	return l.check(pMemcpyDtoDAsync, r)
}

// MemsetD8 is cuMemsetD8 (the _v2 ABI): n bytes set to v.
func (l *Lib) MemsetD8(dst DevicePtr, v uint8, n uint64) error {
	fn := l.proc(pMemsetD8)
	if fn == 0 {
		return l.unavailable(pMemsetD8)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(v), uintptr(n))
	return l.check(pMemsetD8, r)
}

// MemsetD32 is cuMemsetD32 (the _v2 ABI): n 32-bit words (not bytes) set
// to v; dst must be 4-byte aligned.
func (l *Lib) MemsetD32(dst DevicePtr, v uint32, n uint64) error {
	fn := l.proc(pMemsetD32)
	if fn == 0 {
		return l.unavailable(pMemsetD32)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(v), uintptr(n))
	return l.check(pMemsetD32, r)
}

// MemsetD8Async is cuMemsetD8Async (the _v2 ABI): n bytes.
func (l *Lib) MemsetD8Async(dst DevicePtr, v uint8, n uint64, s Stream) error {
	fn := l.proc(pMemsetD8Async)
	if fn == 0 {
		return l.unavailable(pMemsetD8Async)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
	return l.check(pMemsetD8Async, r)
}

// MemsetD32Async is cuMemsetD32Async (the _v2 ABI): n 32-bit words.
func (l *Lib) MemsetD32Async(dst DevicePtr, v uint32, n uint64, s Stream) error {
	fn := l.proc(pMemsetD32Async)
	if fn == 0 {
		return l.unavailable(pMemsetD32Async)
	}
	r, _, _ := purego.SyscallN(fn, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
	return l.check(pMemsetD32Async, r)
}

// PointerGetAttribute is cuPointerGetAttribute for attributes whose value
// fits in 64 bits (context, memory type, device ordinal, range start and
// size, mapped, ...). The value is zero-extended: a 4-byte attribute reads
// as its 32 bits, a bool as 0 or 1.
func (l *Lib) PointerGetAttribute(attr PointerAttribute, p DevicePtr) (uint64, error) {
	fn := l.proc(pPointerGetAttribute)
	if fn == 0 {
		return 0, l.unavailable(pPointerGetAttribute)
	}
	// Room for the widest attribute (P2P tokens, 16 bytes) and more.
	var v [8]uint64
	r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(&v[0])), uintptr(attr), uintptr(p))
	if err := l.check(pPointerGetAttribute, r); err != nil {
		return 0, err
	}
	return v[0], nil
}
