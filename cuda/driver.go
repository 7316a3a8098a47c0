package cuda

import "unsafe"

// Driver is the CUDA driver API as the layers above this package see it.
// Two implementations exist: the real driver loaded at run time (Open) and
// the simulated NVSwitch node of package cuda/sim.
//
// Methods keep the driver's semantics: calls that act on "the current
// context" (streams, events, modules, memcpy, cuMemGetInfo, ...) act on the
// context current on the calling OS thread, so callers lock the goroutine to
// its thread (runtime.LockOSThread) and make the device's primary context
// current before using them.
//
// Host memory passed as unsafe.Pointer must stay alive and unmoved for the
// call (and, for the async copies, until the stream reaches the copy).
type Driver interface {
	// Name says which implementation this is ("cuda" or "sim").
	Name() string

	// Init is cuInit(0). It may be called more than once.
	Init() error
	// DriverVersion is cuDriverGetVersion (e.g. 13000 for CUDA 13.0).
	DriverVersion() (int, error)

	DeviceCount() (int, error)
	DeviceGet(ordinal int) (Device, error)
	DeviceName(d Device) (string, error)
	DeviceAttribute(attr DeviceAttribute, d Device) (int, error)
	DeviceTotalMem(d Device) (uint64, error)
	// DeviceCanAccessPeer is cuDeviceCanAccessPeer(d, peer).
	DeviceCanAccessPeer(d, peer Device) (bool, error)
	DevicePCIBusID(d Device) (string, error)

	PrimaryCtxRetain(d Device) (Context, error)
	PrimaryCtxRelease(d Device) error
	CtxSetCurrent(c Context) error
	CtxGetCurrent() (Context, error)
	CtxSynchronize() error

	StreamCreate(flags uint32) (Stream, error)
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	// StreamQuery returns nil when all work is done and ErrNotReady while
	// work is pending.
	StreamQuery(s Stream) error
	// StreamGetCtx returns the context a stream belongs to (cuStreamGetCtx),
	// so that a caller can refuse a stream of the wrong device before it
	// enqueues anything.
	StreamGetCtx(s Stream) (Context, error)
	StreamWaitEvent(s Stream, e Event) error
	StreamBeginCapture(s Stream, mode StreamCaptureMode) error
	StreamEndCapture(s Stream) (Graph, error)

	GraphInstantiate(g Graph) (GraphExec, error)
	GraphLaunch(g GraphExec, s Stream) error
	GraphExecDestroy(g GraphExec) error
	GraphDestroy(g Graph) error

	EventCreate(flags uint32) (Event, error)
	EventDestroy(e Event) error
	EventRecord(e Event, s Stream) error
	EventSynchronize(e Event) error
	// EventQuery returns nil when the event completed and ErrNotReady
	// otherwise.
	EventQuery(e Event) error
	// EventElapsedTime returns milliseconds between two recorded events.
	EventElapsedTime(start, end Event) (float32, error)

	// ModuleLoadData loads a PTX (NUL-terminated or not) or cubin image. On
	// a JIT failure the error carries the JIT's error log.
	ModuleLoadData(image []byte) (Module, error)
	ModuleUnload(m Module) error
	ModuleGetFunction(m Module, name string) (Function, error)
	// LaunchKernel launches f with a single by-value parameter: the
	// paramSize bytes at params (every kernel of this project takes one
	// params struct).
	LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params unsafe.Pointer, paramSize uintptr) error
	// LaunchKernelEx is LaunchKernel with launch attributes
	// (cuLaunchKernelEx, CUDA 11.8+).
	LaunchKernelEx(f Function, cfg LaunchConfig, params unsafe.Pointer, paramSize uintptr) error

	MemGetInfo() (free, total uint64, err error)
	MemAlloc(size uint64) (DevicePtr, error)
	MemFree(p DevicePtr) error
	MemAllocManaged(size uint64, flags uint32) (DevicePtr, error)
	MemPrefetchAsync(p DevicePtr, size uint64, dst Device, s Stream) error

	// MemHostAlloc is cuMemHostAlloc in the current context: size bytes
	// of page-locked host memory (flags: MemHostAllocPortable,
	// MemHostAllocDeviceMap, MemHostAllocWriteCombined). Free it with
	// MemFreeHost.
	MemHostAlloc(size uint64, flags uint32) (unsafe.Pointer, error)
	// MemHostGetDevicePointer is cuMemHostGetDevicePointer (the _v2 ABI):
	// the device address, in the current context, of host memory p
	// allocated with MemHostAllocDeviceMap (p may point inside the
	// allocation); flags must be 0.
	MemHostGetDevicePointer(p unsafe.Pointer, flags uint32) (DevicePtr, error)
	// MemFreeHost is cuMemFreeHost of memory from MemHostAlloc.
	MemFreeHost(p unsafe.Pointer) error

	MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n uint64) error
	MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n uint64) error
	// MemcpyDtoD copies between device addresses (unified addressing: any
	// two devices whose memory the current context can reach).
	MemcpyDtoD(dst, src DevicePtr, n uint64) error
	MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) error
	MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) error
	MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error
	MemsetD8(dst DevicePtr, v uint8, n uint64) error
	MemsetD32(dst DevicePtr, v uint32, n uint64) error
	MemsetD8Async(dst DevicePtr, v uint8, n uint64, s Stream) error
	MemsetD32Async(dst DevicePtr, v uint32, n uint64, s Stream) error

	PointerGetAttribute(attr PointerAttribute, p DevicePtr) (uint64, error)

	// The Virtual Memory Management API.
	MemGetAllocationGranularity(prop *AllocationProp, option GranularityFlags) (uint64, error)
	MemCreate(size uint64, prop *AllocationProp) (MemHandle, error)
	MemRelease(h MemHandle) error
	// MemAddressReserve reserves size bytes aligned to align; addr is a
	// hint (0 for none) that the driver may ignore.
	MemAddressReserve(size, align uint64, addr DevicePtr) (DevicePtr, error)
	MemAddressFree(p DevicePtr, size uint64) error
	MemMap(p DevicePtr, size, offset uint64, h MemHandle) error
	MemUnmap(p DevicePtr, size uint64) error
	MemSetAccess(p DevicePtr, size uint64, desc []AccessDesc) error
	MemGetAccess(loc MemLocation, p DevicePtr) (AccessFlags, error)
	MemGetAllocationPropertiesFromHandle(h MemHandle) (AllocationProp, error)
	MemRetainAllocationHandle(p DevicePtr) (MemHandle, error)
	// MemExportToShareableHandle exports h as a POSIX file descriptor or a
	// fabric handle. A returned FD belongs to the caller.
	MemExportToShareableHandle(h MemHandle, t HandleType) (ShareableHandle, error)
	// MemImportFromShareableHandle imports an exported handle. It does not
	// close a POSIX FD: the caller does, once imported.
	MemImportFromShareableHandle(sh ShareableHandle) (MemHandle, error)

	// The multicast object API (CUDA 12.1+).
	MulticastGetGranularity(prop *MulticastProp, option GranularityFlags) (uint64, error)
	// MulticastCreate creates a multicast object. The real driver's
	// binding returns ErrMulticastDisabled, without calling the driver,
	// when NCCL_NVLS_ENABLE=0 is set (or a value of it that is not
	// understood).
	MulticastCreate(prop *MulticastProp) (MemHandle, error)
	MulticastAddDevice(mc MemHandle, d Device) error
	MulticastBindMem(mc MemHandle, mcOffset uint64, mem MemHandle, memOffset, size uint64) error
	MulticastBindAddr(mc MemHandle, mcOffset uint64, p DevicePtr, size uint64) error
	MulticastUnbind(mc MemHandle, d Device, mcOffset, size uint64) error
}
