package cuda

// The entry points this binding takes from the driver, and the CUDA version
// whose ABI each wrapper in lib_*.go passes arguments for (cudaTypedefs.h's
// PFN_<name>_v<version>): cuMemAlloc at 3020 is cuMemAlloc_v2, and so on.
// This table is the one place that says which ABI each call uses; see
// docs/binding.md.

type proc int

const (
	pGetErrorName proc = iota
	pGetErrorString
	pInit
	pDriverGetVersion

	pDeviceGetCount
	pDeviceGet
	pDeviceGetName
	pDeviceGetAttribute
	pDeviceTotalMem
	pDeviceCanAccessPeer
	pDeviceGetPCIBusID

	pDevicePrimaryCtxRetain
	pDevicePrimaryCtxRelease
	pCtxSetCurrent
	pCtxGetCurrent
	pCtxSynchronize

	pStreamCreate
	pStreamDestroy
	pStreamSynchronize
	pStreamQuery
	pStreamGetCtx
	pStreamWaitEvent
	pStreamBeginCapture
	pStreamEndCapture

	pGraphInstantiateWithFlags
	pGraphLaunch
	pGraphExecDestroy
	pGraphDestroy

	pEventCreate
	pEventDestroy
	pEventRecord
	pEventSynchronize
	pEventQuery
	pEventElapsedTime

	pModuleLoadDataEx
	pModuleUnload
	pModuleGetFunction
	pLaunchKernel
	pLaunchKernelEx

	pMemGetInfo
	pMemAlloc
	pMemFree
	pMemAllocManaged
	pMemPrefetchAsync
	pMemHostAlloc
	pMemHostGetDevicePointer
	pMemFreeHost

	pMemcpyHtoD
	pMemcpyDtoH
	pMemcpyDtoD
	pMemcpyHtoDAsync
	pMemcpyDtoHAsync
	pMemcpyDtoDAsync
	pMemsetD8
	pMemsetD32
	pMemsetD8Async
	pMemsetD32Async

	pPointerGetAttribute

	pMemGetAllocationGranularity
	pMemCreate
	pMemRelease
	pMemAddressReserve
	pMemAddressFree
	pMemMap
	pMemUnmap
	pMemSetAccess
	pMemGetAccess
	pMemGetAllocationPropertiesFromHandle
	pMemRetainAllocationHandle
	pMemExportToShareableHandle
	pMemImportFromShareableHandle

	pMulticastGetGranularity
	pMulticastCreate
	pMulticastAddDevice
	pMulticastBindMem
	pMulticastBindAddr
	pMulticastUnbind

	numProcs
)

// entryPoint names a driver entry point (as cuGetProcAddress takes it,
// without a _v2 suffix) and the CUDA version of the ABI this binding calls.
type entryPoint struct {
	name    string
	version int
}

var entryPoints = [numProcs]entryPoint{
	pGetErrorName:     {"cuGetErrorName", 6000},
	pGetErrorString:   {"cuGetErrorString", 6000},
	pInit:             {"cuInit", 2000},
	pDriverGetVersion: {"cuDriverGetVersion", 2020},

	pDeviceGetCount:      {"cuDeviceGetCount", 2000},
	pDeviceGet:           {"cuDeviceGet", 2000},
	pDeviceGetName:       {"cuDeviceGetName", 2000},
	pDeviceGetAttribute:  {"cuDeviceGetAttribute", 2000},
	pDeviceTotalMem:      {"cuDeviceTotalMem", 3020},
	pDeviceCanAccessPeer: {"cuDeviceCanAccessPeer", 4000},
	pDeviceGetPCIBusID:   {"cuDeviceGetPCIBusId", 4010},

	pDevicePrimaryCtxRetain:  {"cuDevicePrimaryCtxRetain", 7000},
	pDevicePrimaryCtxRelease: {"cuDevicePrimaryCtxRelease", 11000},
	pCtxSetCurrent:           {"cuCtxSetCurrent", 4000},
	pCtxGetCurrent:           {"cuCtxGetCurrent", 4000},
	pCtxSynchronize:          {"cuCtxSynchronize", 2000},

	pStreamCreate:       {"cuStreamCreate", 2000},
	pStreamDestroy:      {"cuStreamDestroy", 4000},
	pStreamSynchronize:  {"cuStreamSynchronize", 2000},
	pStreamQuery:        {"cuStreamQuery", 2000},
	pStreamGetCtx:       {"cuStreamGetCtx", 9020},
	pStreamWaitEvent:    {"cuStreamWaitEvent", 3020},
	pStreamBeginCapture: {"cuStreamBeginCapture", 10010},
	pStreamEndCapture:   {"cuStreamEndCapture", 10000},

	pGraphInstantiateWithFlags: {"cuGraphInstantiateWithFlags", 11040},
	pGraphLaunch:               {"cuGraphLaunch", 10000},
	pGraphExecDestroy:          {"cuGraphExecDestroy", 10000},
	pGraphDestroy:              {"cuGraphDestroy", 10000},

	pEventCreate:      {"cuEventCreate", 2000},
	pEventDestroy:     {"cuEventDestroy", 4000},
	pEventRecord:      {"cuEventRecord", 2000},
	pEventSynchronize: {"cuEventSynchronize", 2000},
	pEventQuery:       {"cuEventQuery", 2000},
	pEventElapsedTime: {"cuEventElapsedTime", 2000},

	pModuleLoadDataEx:  {"cuModuleLoadDataEx", 2010},
	pModuleUnload:      {"cuModuleUnload", 2000},
	pModuleGetFunction: {"cuModuleGetFunction", 2000},
	pLaunchKernel:      {"cuLaunchKernel", 4000},
	pLaunchKernelEx:    {"cuLaunchKernelEx", 11060},

	pMemGetInfo:       {"cuMemGetInfo", 3020},
	pMemAlloc:         {"cuMemAlloc", 3020},
	pMemFree:          {"cuMemFree", 3020},
	pMemAllocManaged:  {"cuMemAllocManaged", 6000},
	pMemPrefetchAsync: {"cuMemPrefetchAsync", 8000},

	pMemHostAlloc:            {"cuMemHostAlloc", 2020},
	pMemHostGetDevicePointer: {"cuMemHostGetDevicePointer", 3020},
	pMemFreeHost:             {"cuMemFreeHost", 2000},

	pMemcpyHtoD:      {"cuMemcpyHtoD", 3020},
	pMemcpyDtoH:      {"cuMemcpyDtoH", 3020},
	pMemcpyDtoD:      {"cuMemcpyDtoD", 3020},
	pMemcpyHtoDAsync: {"cuMemcpyHtoDAsync", 3020},
	pMemcpyDtoHAsync: {"cuMemcpyDtoHAsync", 3020},
	pMemcpyDtoDAsync: {"cuMemcpyDtoDAsync", 3020},
	pMemsetD8:        {"cuMemsetD8", 3020},
	pMemsetD32:       {"cuMemsetD32", 3020},
	pMemsetD8Async:   {"cuMemsetD8Async", 3020},
	pMemsetD32Async:  {"cuMemsetD32Async", 3020},

	pPointerGetAttribute: {"cuPointerGetAttribute", 4000},

	pMemGetAllocationGranularity:          {"cuMemGetAllocationGranularity", 10020},
	pMemCreate:                            {"cuMemCreate", 10020},
	pMemRelease:                           {"cuMemRelease", 10020},
	pMemAddressReserve:                    {"cuMemAddressReserve", 10020},
	pMemAddressFree:                       {"cuMemAddressFree", 10020},
	pMemMap:                               {"cuMemMap", 10020},
	pMemUnmap:                             {"cuMemUnmap", 10020},
	pMemSetAccess:                         {"cuMemSetAccess", 10020},
	pMemGetAccess:                         {"cuMemGetAccess", 10020},
	pMemGetAllocationPropertiesFromHandle: {"cuMemGetAllocationPropertiesFromHandle", 10020},
	pMemRetainAllocationHandle:            {"cuMemRetainAllocationHandle", 11000},
	pMemExportToShareableHandle:           {"cuMemExportToShareableHandle", 10020},
	pMemImportFromShareableHandle:         {"cuMemImportFromShareableHandle", 10020},

	pMulticastGetGranularity: {"cuMulticastGetGranularity", 12010},
	pMulticastCreate:         {"cuMulticastCreate", 12010},
	pMulticastAddDevice:      {"cuMulticastAddDevice", 12010},
	pMulticastBindMem:        {"cuMulticastBindMem", 12010},
	pMulticastBindAddr:       {"cuMulticastBindAddr", 12010},
	pMulticastUnbind:         {"cuMulticastUnbind", 12010},
}

// The only symbols taken with dlsym: cuGetProcAddress_v2 (CUDA 12.0+,
// five arguments, reports a symbolStatus) or, where a driver lacks it, the
// CUDA 11.3 cuGetProcAddress (four arguments).
const (
	symGetProcAddressV2 = "cuGetProcAddress_v2"
	symGetProcAddress   = "cuGetProcAddress"
)

// cuGetProcAddress flags and symbolStatus values (CUdriverProcAddress_flags,
// CUdriverProcAddressQueryResult).
const (
	getProcAddressLegacyStream = 1 // CU_GET_PROC_ADDRESS_LEGACY_STREAM

	procStatusSuccess              = 0 // CU_GET_PROC_ADDRESS_SUCCESS
	procStatusSymbolNotFound       = 1 // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
	procStatusVersionNotSufficient = 2 // CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
)
