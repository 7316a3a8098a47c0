package cuda

import "unsafe"

// CopyHtoD copies a host byte slice to device memory (cuMemcpyHtoD). From
// pageable memory, as a Go slice is, it may return before the DMA has
// landed, and work on a non-blocking stream does not wait for it:
// synchronize the context (CtxSynchronize) before such work reads dst.
func CopyHtoD(d Driver, dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.MemcpyHtoD(dst, unsafe.Pointer(&src[0]), uint64(len(src)))
}

// CopyDtoH copies device memory into a host byte slice (synchronous).
func CopyDtoH(d Driver, dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.MemcpyDtoH(unsafe.Pointer(&dst[0]), src, uint64(len(dst)))
}
