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
// points this package calls (cuMemGetAllocationGranularity, cuMemCreate,
// cuMemRelease, cuMemAddressReserve, cuMemAddressFree, cuMemMap,
// cuMemUnmap, cuMemSetAccess, cuMemGetAllocationPropertiesFromHandle,
// cuMemExportToShareableHandle, cuMemImportFromShareableHandle) name their
// device explicitly and do not act on the current context, so nothing in
// this package needs one: every constructor, Grow, Shrink, Commit,
// Decommit, SetAccess and Close may be called from any goroutine once the
// driver is initialized (Driver.Init). The gpu-tagged tests check this on
// the real driver by building a Striped range before any context exists.
//
// Using the memory is another matter: cuMemcpy*, cuMemset*, cuMemGetInfo,
// module loads and kernel launches act in the current context, so the
// caller locks its goroutine to its OS thread (runtime.LockOSThread) and
// makes a device's primary context current (Driver.PrimaryCtxRetain,
// Driver.CtxSetCurrent) before copying into a Buffer, Growable, Striped or
// Sparse range. Any device that was granted access will do.
//
// # Errors
//
// Invalid arguments give errors matching the sentinels of this package
// (ErrZeroSize, ErrNotAligned, ErrUnknownDevice, ErrNilHandle, ErrClosed,
// ErrOverflow, ErrOutOfRange, ErrBusy) with errors.Is; failed driver calls
// keep their *cuda.Error, wrapped with what was being done.
package vmm
