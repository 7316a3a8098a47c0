// Package vmm is the CUDA Virtual Memory Management API as typed,
// closeable building blocks over cuda.Driver, and the data structures that
// VMM makes possible.
//
// The building blocks mirror the driver's objects:
//
//   - Reservation: a range of virtual addresses (cuMemAddressReserve /
//     cuMemAddressFree).
//   - Allocation: physical memory on one device (cuMemCreate /
//     cuMemRelease), or one imported from a shareable handle
//     (cuMemImportFromShareableHandle), with export of shareable handles.
//   - Mapping: a memory handle (an Allocation, or any cuda.MemHandle such as
//     a multicast object) mapped into part of a Reservation (cuMemMap /
//     cuMemUnmap), with per-device access rights (cuMemSetAccess).
//   - Buffer: the common case, one Allocation mapped into its own
//     Reservation with access for a set of devices.
//
// Each is an io.Closer. Resources are released in the order the driver
// documents: unmap, then release the physical memory, then free the
// address range. A Reservation refuses to Close while Mappings made with
// Map are still open in it, rather than leave the driver to fail.
//
// On top of them:
//
//   - Growable: a buffer that grows and shrinks without copying (a GPU
//     realloc), keeping its base address while its reservation lasts.
//   - Striped: one contiguous range whose chunks live on different GPUs.
//   - Sparse: a large range whose chunks are committed on demand.
//
// # Contexts and threads
//
// CUDA's current context belongs to the calling OS thread. The VMM entry
// points used here (cuMemGetAllocationGranularity, cuMemCreate,
// cuMemRelease, cuMemAddressReserve, cuMemAddressFree, cuMemMap,
// cuMemUnmap, cuMemSetAccess, cuMemGetAllocationPropertiesFromHandle,
// export and import) name their device explicitly and do not act on the
// current context, so the constructors, Grow, Shrink, Commit, Decommit and
// Close need no particular context; the driver must have been initialized
// (Driver.Init). The helpers that copy or set memory (the Read and Write
// helpers of Growable, Striped and Sparse, when they exist, and anything
// that calls cuMemcpy*/cuMemset*/cuMemGetInfo) act in the current context:
// the caller locks its goroutine to its OS thread (runtime.LockOSThread)
// and makes a device's primary context current first. Each function's
// documentation says when it needs that.
//
// # Errors
//
// Invalid arguments give errors matching the sentinels of this package
// (ErrZeroSize, ErrNotAligned, ErrUnknownDevice, ErrNilHandle, ErrClosed,
// ErrOverflow, ErrOutOfRange, ErrBusy) with errors.Is; failed driver calls
// keep their *cuda.Error, wrapped with what was being done.
package vmm
