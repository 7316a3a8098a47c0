package cuda

import "fmt"

// Handle types of the driver API. Each is the value the driver hands out;
// none of them owns anything on its own: the layers above wrap them in
// io.Closers.
type (
	// Device is a CUdevice (the driver's device handle, an ordinal on Linux).
	Device int32
	// Context is a CUcontext.
	Context uintptr
	// Stream is a CUstream; 0 is the legacy default stream.
	Stream uintptr
	// Event is a CUevent.
	Event uintptr
	// Module is a CUmodule.
	Module uintptr
	// Function is a CUfunction.
	Function uintptr
	// Graph is a CUgraph.
	Graph uintptr
	// GraphExec is a CUgraphExec.
	GraphExec uintptr
	// DevicePtr is a CUdeviceptr: a virtual address in the unified space.
	DevicePtr uint64
	// MemHandle is a CUmemGenericAllocationHandle: a physical allocation
	// (cuMemCreate, cuMemImportFromShareableHandle) or a multicast object
	// (cuMulticastCreate).
	MemHandle uint64
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// D1 is a one-dimensional shape.
func D1(x uint32) Dim3 { return Dim3{x, 1, 1} }

// LaunchConfig is what cuLaunchKernelEx takes beside the function and its
// parameters: cuLaunchKernel's shape, shared memory and stream, and the one
// launch attribute this project sets.
type LaunchConfig struct {
	Grid, Block Dim3
	SharedMem   uint32
	Stream      Stream
	// Programmatic sets CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
	// the kernel may start once the stream's previous kernel has triggered
	// (griddepcontrol.launch_dependents) or its blocks have exited, before
	// that kernel's memory is flushed; the kernel must run
	// griddepcontrol.wait before it touches what the previous one wrote.
	// Compute capability 9.0 and later; captured into graphs from CUDA
	// 12.3.
	Programmatic bool
}

// attrProgrammaticStreamSerialization is the CUlaunchAttributeID of
// LaunchConfig.Programmatic
// (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION).
const attrProgrammaticStreamSerialization = 6

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// The device attributes this project reads (values of the CUDA 12/13
// headers' CUdevice_attribute).
const (
	AttrMaxThreadsPerBlock          DeviceAttribute = 1
	AttrMultiprocessorCount         DeviceAttribute = 16
	AttrClockRate                   DeviceAttribute = 13
	AttrMemoryClockRate             DeviceAttribute = 36
	AttrGlobalMemoryBusWidth        DeviceAttribute = 37
	AttrL2CacheSize                 DeviceAttribute = 38
	AttrUnifiedAddressing           DeviceAttribute = 41
	AttrPCIBusID                    DeviceAttribute = 33
	AttrPCIDeviceID                 DeviceAttribute = 34
	AttrPCIDomainID                 DeviceAttribute = 50
	AttrComputeCapabilityMajor      DeviceAttribute = 75
	AttrComputeCapabilityMinor      DeviceAttribute = 76
	AttrManagedMemory               DeviceAttribute = 83
	AttrVirtualMemoryManagement     DeviceAttribute = 102
	AttrHandleTypePosixFDSupported  DeviceAttribute = 103
	AttrGenericCompressionSupported DeviceAttribute = 107
	AttrGPUDirectRDMAWithVMM        DeviceAttribute = 110
	AttrHandleTypeFabricSupported   DeviceAttribute = 128
	AttrMulticastSupported          DeviceAttribute = 132
)

// MemLocationType is a CUmemLocationType.
type MemLocationType int32

// Location types.
const (
	LocationInvalid  MemLocationType = 0
	LocationDevice   MemLocationType = 1
	LocationHost     MemLocationType = 2
	LocationHostNUMA MemLocationType = 3
)

// MemLocation is a CUmemLocation (8 bytes).
type MemLocation struct {
	Type MemLocationType
	ID   int32
}

// DeviceLocation is the location of device d.
func DeviceLocation(d Device) MemLocation { return MemLocation{Type: LocationDevice, ID: int32(d)} }

// AllocationType is a CUmemAllocationType.
type AllocationType int32

// AllocationPinned is CU_MEM_ALLOCATION_TYPE_PINNED, the only type cuMemCreate takes.
const AllocationPinned AllocationType = 1

// HandleType is a CUmemAllocationHandleType (a bit set).
type HandleType int32

// Shareable handle types.
const (
	HandleNone     HandleType = 0
	HandlePosixFD  HandleType = 1
	HandleWin32    HandleType = 2
	HandleWin32KMT HandleType = 4
	HandleFabric   HandleType = 8
)

func (h HandleType) String() string {
	switch h {
	case HandleNone:
		return "none"
	case HandlePosixFD:
		return "posix-fd"
	case HandleFabric:
		return "fabric"
	case HandlePosixFD | HandleFabric:
		return "posix-fd|fabric"
	}
	return fmt.Sprintf("HandleType(%d)", int32(h))
}

// Compression types of CUmemAllocationProp.allocFlags.compressionType.
const (
	CompressionNone    uint8 = 0
	CompressionGeneric uint8 = 1
)

// AllocFlags is the allocFlags member of CUmemAllocationProp (8 bytes).
type AllocFlags struct {
	CompressionType      uint8
	GPUDirectRDMACapable uint8
	Usage                uint16
	Reserved             [4]uint8
}

// AllocationProp is a CUmemAllocationProp (32 bytes), laid out as the C
// struct so that a pointer to it can be passed to the driver.
type AllocationProp struct {
	Type                 AllocationType
	RequestedHandleTypes HandleType
	Location             MemLocation
	Win32HandleMetaData  uintptr
	Flags                AllocFlags
}

// DeviceAllocationProp is the usual property set: pinned memory on device
// d, shareable through the given handle types.
func DeviceAllocationProp(d Device, handles HandleType) AllocationProp {
	return AllocationProp{Type: AllocationPinned, RequestedHandleTypes: handles, Location: DeviceLocation(d)}
}

// GranularityFlags selects cuMemGetAllocationGranularity's and
// cuMulticastGetGranularity's minimum or recommended value.
type GranularityFlags int32

// Granularity options.
const (
	GranularityMinimum     GranularityFlags = 0
	GranularityRecommended GranularityFlags = 1
)

// AccessFlags is a CUmemAccess_flags.
type AccessFlags int32

// Access rights.
const (
	AccessNone      AccessFlags = 0
	AccessRead      AccessFlags = 1
	AccessReadWrite AccessFlags = 3
)

func (a AccessFlags) String() string {
	switch a {
	case AccessNone:
		return "none"
	case AccessRead:
		return "read"
	case AccessReadWrite:
		return "read-write"
	}
	return fmt.Sprintf("AccessFlags(%d)", int32(a))
}

// AccessDesc is a CUmemAccessDesc (12 bytes).
type AccessDesc struct {
	Location MemLocation
	Flags    AccessFlags
}

// MulticastProp is a CUmulticastObjectProp (32 bytes).
type MulticastProp struct {
	NumDevices  uint32
	_           uint32
	Size        uint64
	HandleTypes uint64
	Flags       uint64
}

// FabricHandle is a CUmemFabricHandle (64 opaque bytes).
type FabricHandle [64]byte

// ShareableHandle is an exported allocation or multicast handle: a POSIX
// file descriptor or a fabric handle, by Type.
type ShareableHandle struct {
	Type   HandleType
	FD     int
	Fabric FabricHandle
}

// PointerAttribute is a CUpointer_attribute.
type PointerAttribute int32

// Pointer attributes this project reads.
const (
	PointerAttrContext       PointerAttribute = 1
	PointerAttrMemoryType    PointerAttribute = 2
	PointerAttrDeviceOrdinal PointerAttribute = 9
	PointerAttrRangeStart    PointerAttribute = 11
	PointerAttrRangeSize     PointerAttribute = 12
	PointerAttrMapped        PointerAttribute = 13
)

// Stream creation flags.
const (
	StreamDefault     uint32 = 0
	StreamNonBlocking uint32 = 1
)

// Event creation flags.
const (
	EventDefault       uint32 = 0
	EventBlockingSync  uint32 = 1
	EventDisableTiming uint32 = 2
)

// StreamCaptureMode is a CUstreamCaptureMode.
type StreamCaptureMode int32

// Capture modes.
const (
	CaptureModeGlobal      StreamCaptureMode = 0
	CaptureModeThreadLocal StreamCaptureMode = 1
	CaptureModeRelaxed     StreamCaptureMode = 2
)

// MemAttachGlobal is CU_MEM_ATTACH_GLOBAL for cuMemAllocManaged.
const MemAttachGlobal uint32 = 1

// CPUDevice is CU_DEVICE_CPU, the prefetch target for host memory.
const CPUDevice Device = -1

// cuMemHostAlloc flags (CU_MEMHOSTALLOC_*).
const (
	// MemHostAllocPortable: pinned for every context, not only the
	// current one.
	MemHostAllocPortable uint32 = 0x1
	// MemHostAllocDeviceMap: mapped into the device address space
	// (MemHostGetDevicePointer gives the device address).
	MemHostAllocDeviceMap uint32 = 0x2
	// MemHostAllocWriteCombined: write-combined (fast to write from the
	// host, slow to read from it).
	MemHostAllocWriteCombined uint32 = 0x4
)
