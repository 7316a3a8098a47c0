package sim

import "github.com/nvls-go/nvls/cuda"

// KernelFunc is a Go reference implementation of a kernel entry point. The
// simulated node runs it when a stream reaches a launch of the entry point
// it is given under (Config.Kernels). Returning an error is a kernel fault: the launch's
// context turns sticky-broken the way a real one does after an illegal
// address, and the error surfaces from the next synchronizing call.
type KernelFunc func(l *Launch) error

// Launch is one kernel launch as a KernelFunc sees it.
type Launch struct {
	Name      string
	Device    cuda.Device
	Grid      cuda.Dim3
	Block     cuda.Dim3
	SharedMem uint32
	// Programmatic: launched with programmatic stream serialization
	// (cuda.LaunchConfig.Programmatic).
	Programmatic bool
	// Params holds a copy of the launch's by-value parameter bytes.
	Params []byte
	// Mem is device memory as this launch's device sees it: only ranges
	// mapped and made accessible to this device can be touched.
	Mem Memory
}

// Memory is what a simulated kernel can do to memory. Addresses are
// virtual addresses of the simulated node; each access is checked against
// the mappings and the access rights of the launching device, and fails the
// way the hardware would (an error standing for CUDA_ERROR_ILLEGAL_ADDRESS).
type Memory interface {
	// Load and Store are plain (unicast) accesses. They fail on an
	// address mapped from a multicast object: those may only be
	// accessed with the Multimem* operations.
	Load(addr cuda.DevicePtr, dst []byte) error
	Store(addr cuda.DevicePtr, src []byte) error
	// LoadU32 is an acquire load of an aligned uint32.
	LoadU32(addr cuda.DevicePtr) (uint32, error)
	// AtomicAddU32 is a release atomic add; it returns the old value.
	AtomicAddU32(addr cuda.DevicePtr, delta uint32) (uint32, error)
	// AtomicCASU64 is a compare-and-swap on an aligned uint64.
	AtomicCASU64(addr cuda.DevicePtr, old, new uint64) (uint64, error)

	// MultimemLoad is the load half of multimem.ld_reduce: it returns a
	// copy of n bytes at addr from every allocation bound to the
	// multicast object, in the order the devices were added; the caller
	// reduces them. addr must lie in a multicast mapping; n must be 4, 8
	// or 16 and addr aligned to n (PTX's rule for multimem accesses).
	MultimemLoad(addr cuda.DevicePtr, n int) ([][]byte, error)
	// MultimemStore is multimem.st: src (4, 8 or 16 bytes) lands in every
	// bound allocation.
	MultimemStore(addr cuda.DevicePtr, src []byte) error
	// MultimemAddU32 is multimem.red.add.u32: delta is added to the word
	// in every bound allocation.
	MultimemAddU32(addr cuda.DevicePtr, delta uint32) error

	// GlobalTimer is %globaltimer: nanoseconds, monotonic.
	GlobalTimer() uint64
}
