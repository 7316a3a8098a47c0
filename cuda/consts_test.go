package cuda_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/nvls-go/nvls/cuda"
)

// The values of the CUDA 12/13 headers (cuda.h), written here as numbers
// and checked against the package's constants: these are what the driver
// receives and returns.

func TestResultValues(t *testing.T) {
	for _, tc := range []struct {
		got  cuda.Result
		want int32
		name string
	}{
		{cuda.Success, 0, "CUDA_SUCCESS"},
		{cuda.ErrorInvalidValue, 1, "CUDA_ERROR_INVALID_VALUE"},
		{cuda.ErrorOutOfMemory, 2, "CUDA_ERROR_OUT_OF_MEMORY"},
		{cuda.ErrorNotInitialized, 3, "CUDA_ERROR_NOT_INITIALIZED"},
		{cuda.ErrorDeinitialized, 4, "CUDA_ERROR_DEINITIALIZED"},
		{cuda.ErrorStubLibrary, 34, "CUDA_ERROR_STUB_LIBRARY"},
		{cuda.ErrorDeviceUnavailable, 46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
		{cuda.ErrorNoDevice, 100, "CUDA_ERROR_NO_DEVICE"},
		{cuda.ErrorInvalidDevice, 101, "CUDA_ERROR_INVALID_DEVICE"},
		{cuda.ErrorInvalidImage, 200, "CUDA_ERROR_INVALID_IMAGE"},
		{cuda.ErrorInvalidContext, 201, "CUDA_ERROR_INVALID_CONTEXT"},
		{cuda.ErrorNoBinaryForGPU, 209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
		{cuda.ErrorInvalidPTX, 218, "CUDA_ERROR_INVALID_PTX"},
		{cuda.ErrorUnsupportedPTX, 222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
		{cuda.ErrorInvalidHandle, 400, "CUDA_ERROR_INVALID_HANDLE"},
		{cuda.ErrorIllegalState, 401, "CUDA_ERROR_ILLEGAL_STATE"},
		{cuda.ErrorNotFound, 500, "CUDA_ERROR_NOT_FOUND"},
		{cuda.ErrorNotReady, 600, "CUDA_ERROR_NOT_READY"},
		{cuda.ErrorIllegalAddress, 700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{cuda.ErrorLaunchOutOfRes, 701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
		{cuda.ErrorLaunchTimeout, 702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
		{cuda.ErrorLaunchFailed, 719, "CUDA_ERROR_LAUNCH_FAILED"},
		{cuda.ErrorNotPermitted, 800, "CUDA_ERROR_NOT_PERMITTED"},
		{cuda.ErrorNotSupported, 801, "CUDA_ERROR_NOT_SUPPORTED"},
		{cuda.ErrorSystemNotReady, 802, "CUDA_ERROR_SYSTEM_NOT_READY"},
		{cuda.ErrorSystemDriverMismat, 803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
		{cuda.ErrorCaptureUnsupported, 900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
		{cuda.ErrorCaptureInvalidated, 901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
		{cuda.ErrorCaptureUnjoined, 904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
		{cuda.ErrorCaptureImplicit, 906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
		{cuda.ErrorTimeout, 909, "CUDA_ERROR_TIMEOUT"},
		{cuda.ErrorUnknown, 999, "CUDA_ERROR_UNKNOWN"},
	} {
		assert.Equal(t, tc.want, int32(tc.got), tc.name)
		assert.Equal(t, tc.name, tc.got.KnownName(), "name of %d", tc.want)
		assert.Equal(t, tc.name, tc.got.String())
	}
}

func TestDeviceAttributeValues(t *testing.T) {
	for _, tc := range []struct {
		got  cuda.DeviceAttribute
		want int32
		name string
	}{
		{cuda.AttrMaxThreadsPerBlock, 1, "MAX_THREADS_PER_BLOCK"},
		{cuda.AttrClockRate, 13, "CLOCK_RATE"},
		{cuda.AttrMultiprocessorCount, 16, "MULTIPROCESSOR_COUNT"},
		{cuda.AttrPCIBusID, 33, "PCI_BUS_ID"},
		{cuda.AttrPCIDeviceID, 34, "PCI_DEVICE_ID"},
		{cuda.AttrMemoryClockRate, 36, "MEMORY_CLOCK_RATE"},
		{cuda.AttrGlobalMemoryBusWidth, 37, "GLOBAL_MEMORY_BUS_WIDTH"},
		{cuda.AttrL2CacheSize, 38, "L2_CACHE_SIZE"},
		{cuda.AttrUnifiedAddressing, 41, "UNIFIED_ADDRESSING"},
		{cuda.AttrPCIDomainID, 50, "PCI_DOMAIN_ID"},
		{cuda.AttrComputeCapabilityMajor, 75, "COMPUTE_CAPABILITY_MAJOR"},
		{cuda.AttrComputeCapabilityMinor, 76, "COMPUTE_CAPABILITY_MINOR"},
		{cuda.AttrManagedMemory, 83, "MANAGED_MEMORY"},
		{cuda.AttrVirtualMemoryManagement, 102, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"},
		{cuda.AttrHandleTypePosixFDSupported, 103, "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"},
		{cuda.AttrGenericCompressionSupported, 107, "GENERIC_COMPRESSION_SUPPORTED"},
		{cuda.AttrGPUDirectRDMAWithVMM, 110, "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"},
		{cuda.AttrHandleTypeFabricSupported, 128, "HANDLE_TYPE_FABRIC_SUPPORTED"},
		{cuda.AttrMulticastSupported, 132, "MULTICAST_SUPPORTED"},
	} {
		assert.Equal(t, tc.want, int32(tc.got), "CU_DEVICE_ATTRIBUTE_%s", tc.name)
	}
}

func TestPointerAttributeValues(t *testing.T) {
	for _, tc := range []struct {
		got  cuda.PointerAttribute
		want int32
		name string
	}{
		{cuda.PointerAttrContext, 1, "CONTEXT"},
		{cuda.PointerAttrMemoryType, 2, "MEMORY_TYPE"},
		{cuda.PointerAttrDeviceOrdinal, 9, "DEVICE_ORDINAL"},
		{cuda.PointerAttrRangeStart, 11, "RANGE_START_ADDR"},
		{cuda.PointerAttrRangeSize, 12, "RANGE_SIZE"},
		{cuda.PointerAttrMapped, 13, "MAPPED"},
	} {
		assert.Equal(t, tc.want, int32(tc.got), "CU_POINTER_ATTRIBUTE_%s", tc.name)
	}
}

func TestEnumValues(t *testing.T) {
	// CUmemLocationType
	assert.EqualValues(t, 0, cuda.LocationInvalid)
	assert.EqualValues(t, 1, cuda.LocationDevice)
	assert.EqualValues(t, 2, cuda.LocationHost)
	assert.EqualValues(t, 3, cuda.LocationHostNUMA)
	// CUmemAllocationType
	assert.EqualValues(t, 1, cuda.AllocationPinned)
	// CUmemAllocationHandleType
	assert.EqualValues(t, 0, cuda.HandleNone)
	assert.EqualValues(t, 1, cuda.HandlePosixFD)
	assert.EqualValues(t, 2, cuda.HandleWin32)
	assert.EqualValues(t, 4, cuda.HandleWin32KMT)
	assert.EqualValues(t, 8, cuda.HandleFabric)
	// CUmemAllocationCompType
	assert.EqualValues(t, 0, cuda.CompressionNone)
	assert.EqualValues(t, 1, cuda.CompressionGeneric)
	// CUmemAllocationGranularity_flags, CUmulticastGranularity_flags
	assert.EqualValues(t, 0, cuda.GranularityMinimum)
	assert.EqualValues(t, 1, cuda.GranularityRecommended)
	// CUmemAccess_flags
	assert.EqualValues(t, 0, cuda.AccessNone)
	assert.EqualValues(t, 1, cuda.AccessRead)
	assert.EqualValues(t, 3, cuda.AccessReadWrite)
	// CUstream_flags, CUevent_flags
	assert.EqualValues(t, 0, cuda.StreamDefault)
	assert.EqualValues(t, 1, cuda.StreamNonBlocking)
	assert.EqualValues(t, 0, cuda.EventDefault)
	assert.EqualValues(t, 1, cuda.EventBlockingSync)
	assert.EqualValues(t, 2, cuda.EventDisableTiming)
	// CUstreamCaptureMode
	assert.EqualValues(t, 0, cuda.CaptureModeGlobal)
	assert.EqualValues(t, 1, cuda.CaptureModeThreadLocal)
	assert.EqualValues(t, 2, cuda.CaptureModeRelaxed)
	// CU_MEM_ATTACH_GLOBAL, CU_DEVICE_CPU
	assert.EqualValues(t, 1, cuda.MemAttachGlobal)
	assert.EqualValues(t, -1, cuda.CPUDevice)
}
