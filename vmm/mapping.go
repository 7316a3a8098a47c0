package vmm

import (
	"fmt"

	"github.com/nvls-go/nvls/cuda"
)

// Mapping is a memory handle mapped into part of a Reservation
// (cuMemMap). Until SetAccess grants rights, no device may touch it.
type Mapping struct {
	r      *Reservation
	off    uint64
	size   uint64
	h      cuda.MemHandle
	closed bool
}

// Map maps the memory behind h, size bytes, at offset off of r
// (cuMemMap). h is an Allocation's handle or any other handle the driver
// maps, such as a multicast object's. size must be all of it: the driver
// maps only whole objects (part of one is CUDA_ERROR_NOT_SUPPORTED; see
// docs/sim.md), and off a multiple of the handle's granularity (the driver
// checks both). It needs no current context.
func Map(r *Reservation, off uint64, h cuda.MemHandle, size uint64) (*Mapping, error) {
	if r == nil {
		return nil, fmt.Errorf("vmm: map: %w (nil reservation)", ErrNilHandle)
	}
	if r.closed {
		return nil, fmt.Errorf("vmm: map into reservation %#x: %w", r.ptr, ErrClosed)
	}
	if h == 0 {
		return nil, fmt.Errorf("vmm: map at %#x+%d: %w", r.ptr, off, ErrNilHandle)
	}
	if size == 0 {
		return nil, fmt.Errorf("vmm: map at %#x+%d: %w", r.ptr, off, ErrZeroSize)
	}
	if err := r.contains(off, size); err != nil {
		return nil, fmt.Errorf("vmm: map %d bytes at offset %d: %w", size, off, err)
	}
	p := r.ptr + cuda.DevicePtr(off)
	if err := r.d.MemMap(p, size, 0, h); err != nil {
		return nil, fmt.Errorf("vmm: map handle %#x (%d bytes) at %#x: %w", h, size, p, err)
	}
	r.live.Add(1)
	return &Mapping{r: r, off: off, size: size, h: h}, nil
}

// Ptr is the first mapped address.
func (m *Mapping) Ptr() cuda.DevicePtr { return m.r.ptr + cuda.DevicePtr(m.off) }

// Size is the number of bytes mapped.
func (m *Mapping) Size() uint64 { return m.size }

// Offset is where the mapping starts in its Reservation.
func (m *Mapping) Offset() uint64 { return m.off }

// Handle is the memory handle mapped.
func (m *Mapping) Handle() cuda.MemHandle { return m.h }

// SetAccess grants flags (cuda.AccessReadWrite, cuda.AccessRead, or
// cuda.AccessNone to revoke) on the whole mapping to each of devs
// (cuMemSetAccess): the per-mapping peer access of the VMM API, not
// cuCtxEnablePeerAccess. It needs no current context.
func (m *Mapping) SetAccess(devs []cuda.Device, flags cuda.AccessFlags) error {
	if m == nil {
		return fmt.Errorf("vmm: set access: %w", ErrNilHandle)
	}
	if m.closed {
		return fmt.Errorf("vmm: set access at %#x: %w", m.Ptr(), ErrClosed)
	}
	return setAccess(m.r.d, m.Ptr(), m.size, devs, flags)
}

// setAccess checks devs and calls cuMemSetAccess for all of them at once.
func setAccess(d cuda.Driver, p cuda.DevicePtr, size uint64, devs []cuda.Device, flags cuda.AccessFlags) error {
	if len(devs) == 0 {
		return fmt.Errorf("vmm: set access at %#x+%d: %w", p, size, ErrNoDevices)
	}
	if err := checkDevices(d, devs); err != nil {
		return err
	}
	if err := d.MemSetAccess(p, size, accessDescs(devs, flags)); err != nil {
		return fmt.Errorf("vmm: set %v access at %#x+%d for devices %v: %w", flags, p, size, devs, err)
	}
	return nil
}

func accessDescs(devs []cuda.Device, flags cuda.AccessFlags) []cuda.AccessDesc {
	desc := make([]cuda.AccessDesc, len(devs))
	for i, dev := range devs {
		desc[i] = cuda.AccessDesc{Location: cuda.DeviceLocation(dev), Flags: flags}
	}
	return desc
}

// Close unmaps (cuMemUnmap). The memory stays allocated until its handle
// is released. A second Close returns ErrClosed; if the driver fails, the
// Mapping stays open so that Close can be retried.
func (m *Mapping) Close() error {
	if m == nil {
		return fmt.Errorf("vmm: close mapping: %w", ErrNilHandle)
	}
	if m.closed {
		return fmt.Errorf("vmm: unmap %#x: %w", m.Ptr(), ErrClosed)
	}
	if err := m.r.d.MemUnmap(m.Ptr(), m.size); err != nil {
		return fmt.Errorf("vmm: unmap %#x+%d: %w", m.Ptr(), m.size, err)
	}
	m.closed = true
	m.r.live.Add(-1)
	return nil
}

// SetAccess grants flags on [p, p+size) to each of devs (cuMemSetAccess)
// for a range that may span several Mappings; it must be fully mapped,
// and the simulator requires it to be made of whole mappings. It needs no
// current context.
func SetAccess(d cuda.Driver, p cuda.DevicePtr, size uint64, devs []cuda.Device, flags cuda.AccessFlags) error {
	if d == nil {
		return fmt.Errorf("vmm: set access: %w (nil driver)", ErrNilHandle)
	}
	if size == 0 {
		return fmt.Errorf("vmm: set access at %#x: %w", p, ErrZeroSize)
	}
	return setAccess(d, p, size, devs, flags)
}
