package cuda_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/nvls-go/nvls/cuda"
)

// The sizes and offsets below are those of the CUDA 12/13 headers' structs
// on 64-bit Linux (cuda.h: CUmemAllocationProp, CUmemLocation,
// CUmemAccessDesc, CUmulticastObjectProp, CUmemFabricHandle), written here
// as numbers: the binding passes pointers to these Go types to the driver.
func TestStructLayout(t *testing.T) {
	var p cuda.AllocationProp
	assert.EqualValues(t, 32, unsafe.Sizeof(p), "CUmemAllocationProp")
	assert.EqualValues(t, 0, unsafe.Offsetof(p.Type), "type")
	assert.EqualValues(t, 4, unsafe.Offsetof(p.RequestedHandleTypes), "requestedHandleTypes")
	assert.EqualValues(t, 8, unsafe.Offsetof(p.Location), "location")
	assert.EqualValues(t, 16, unsafe.Offsetof(p.Win32HandleMetaData), "win32HandleMetaData")
	assert.EqualValues(t, 24, unsafe.Offsetof(p.Flags), "allocFlags")
	assert.EqualValues(t, 4, unsafe.Sizeof(p.Type))
	assert.EqualValues(t, 4, unsafe.Sizeof(p.RequestedHandleTypes))
	assert.EqualValues(t, 8, unsafe.Sizeof(p.Win32HandleMetaData))

	var loc cuda.MemLocation
	assert.EqualValues(t, 8, unsafe.Sizeof(loc), "CUmemLocation")
	assert.EqualValues(t, 0, unsafe.Offsetof(loc.Type), "location.type")
	assert.EqualValues(t, 4, unsafe.Offsetof(loc.ID), "location.id")
	assert.EqualValues(t, 4, unsafe.Sizeof(loc.Type))

	var f cuda.AllocFlags
	assert.EqualValues(t, 8, unsafe.Sizeof(f), "allocFlags")
	assert.EqualValues(t, 0, unsafe.Offsetof(f.CompressionType), "compressionType")
	assert.EqualValues(t, 1, unsafe.Offsetof(f.GPUDirectRDMACapable), "gpuDirectRDMACapable")
	assert.EqualValues(t, 2, unsafe.Offsetof(f.Usage), "usage")
	assert.EqualValues(t, 4, unsafe.Offsetof(f.Reserved), "reserved")
	assert.EqualValues(t, 1, unsafe.Sizeof(f.CompressionType))
	assert.EqualValues(t, 2, unsafe.Sizeof(f.Usage))
	assert.EqualValues(t, 4, unsafe.Sizeof(f.Reserved))

	var a cuda.AccessDesc
	assert.EqualValues(t, 12, unsafe.Sizeof(a), "CUmemAccessDesc")
	assert.EqualValues(t, 0, unsafe.Offsetof(a.Location), "location")
	assert.EqualValues(t, 8, unsafe.Offsetof(a.Flags), "flags")
	assert.EqualValues(t, 4, unsafe.Sizeof(a.Flags))
	assert.EqualValues(t, 24, unsafe.Sizeof([2]cuda.AccessDesc{}), "arrays of descriptors are packed")

	var m cuda.MulticastProp
	assert.EqualValues(t, 32, unsafe.Sizeof(m), "CUmulticastObjectProp")
	assert.EqualValues(t, 0, unsafe.Offsetof(m.NumDevices), "numDevices")
	assert.EqualValues(t, 8, unsafe.Offsetof(m.Size), "size")
	assert.EqualValues(t, 16, unsafe.Offsetof(m.HandleTypes), "handleTypes")
	assert.EqualValues(t, 24, unsafe.Offsetof(m.Flags), "flags")
	assert.EqualValues(t, 4, unsafe.Sizeof(m.NumDevices))

	assert.EqualValues(t, 64, unsafe.Sizeof(cuda.FabricHandle{}), "CUmemFabricHandle")

	var d cuda.Dim3
	assert.EqualValues(t, 12, unsafe.Sizeof(d), "three unsigned ints")
	assert.EqualValues(t, 4, unsafe.Offsetof(d.Y))
	assert.EqualValues(t, 8, unsafe.Offsetof(d.Z))

	// Handles are the width of what the driver writes through their
	// pointers: CUdevice (int), CUdeviceptr and
	// CUmemGenericAllocationHandle (unsigned long long), pointers.
	assert.EqualValues(t, 4, unsafe.Sizeof(cuda.Device(0)))
	assert.EqualValues(t, 8, unsafe.Sizeof(cuda.DevicePtr(0)))
	assert.EqualValues(t, 8, unsafe.Sizeof(cuda.MemHandle(0)))
	for _, sz := range []uintptr{unsafe.Sizeof(cuda.Context(0)), unsafe.Sizeof(cuda.Stream(0)), unsafe.Sizeof(cuda.Event(0)),
		unsafe.Sizeof(cuda.Module(0)), unsafe.Sizeof(cuda.Function(0)), unsafe.Sizeof(cuda.Graph(0)), unsafe.Sizeof(cuda.GraphExec(0))} {
		assert.EqualValues(t, 8, sz)
	}
}
