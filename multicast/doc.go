// Package multicast is the lifecycle of one CUDA multicast object (NVLink
// SHARP, CUDA 12.1+) as a small state machine over cuda.Driver.
//
// The driver's rules, in the order an Object enforces them before it asks
// the driver anything:
//
//  1. Create (or Import an exported handle, or Attach to a handle created
//     elsewhere in this process) the object for numDevices devices.
//  2. AddDevice for every device. Nothing may be bound or mapped before
//     every device of the object was added. When the devices are added by
//     several processes, each process adds its own and, after a barrier
//     that proves the others did too, says so with ConfirmAllAdded.
//  3. Bind (cuMulticastBindMem) or BindAddr (cuMulticastBindAddr) each
//     device's memory. No device may be added after the first bind.
//  4. MapMC: reserve a range, map the multicast handle into it and grant
//     access to the local device(s): the multicast (MC) alias, on which
//     only multimem instructions may be used. Not before a bind.
//  5. Teardown in reverse: UnmapMC, Unbind (the size and offset of the
//     bind), and release the handle. Close does whatever of it remains, in
//     that order, so one Close undoes whatever was done.
//
// A call out of order returns an *OrderError (errors.Is(err, ErrOrder),
// and the specific sentinel, e.g. ErrNotAllAdded) and does not reach the
// driver. Driver failures are returned wrapped (errors.As to *cuda.Error).
//
// When the fabric cannot serve multicast, the driver says so with a few
// codes: CUDA_ERROR_SYSTEM_NOT_READY (802: the Fabric Manager is not
// running or has not registered the GPU), CUDA_ERROR_ILLEGAL_STATE (401:
// the Fabric Manager or the NVSwitches are in a bad state),
// CUDA_ERROR_NOT_SUPPORTED (801) from a cuMulticast* entry point (no
// multicast offered to this process), CUDA_ERROR_OUT_OF_MEMORY from one
// (the NVSwitch multicast slots, 128 on HGX H100/H200, are all taken),
// CUDA_ERROR_INVALID_DEVICE from cuMulticastAddDevice or the object's
// cuMemMap (devices of different NVLink cliques). Diagnose recognizes them in an error of this package and says what is
// likely wrong and what to check; package team turns that into its
// FabricError and, when the transport was chosen automatically, a
// fallback to unicast. A failed call leaves the Object's books as they
// were (a failed AddDevice or Bind is not recorded), so Close undoes
// exactly what succeeded.
//
// An Object does not make any context current: like every driver call of
// this project, its methods run on a thread where the caller has made the
// right device's context current (see package team).
//
// Granularity: the object's size must be a multiple of the multicast
// granularity, and the bound allocations' sizes a multiple of the
// allocation granularity. Granularity returns the recommended multicast
// granularity rounded up to a common multiple of the allocation granularity
// of every device; sizes rounded up to it satisfy both.
package multicast
