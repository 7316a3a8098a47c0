package vmm

import (
	"fmt"
	"sync/atomic"

	"github.com/nvls-go/nvls/cuda"
)

// Reservation is a range of virtual addresses reserved with
// cuMemAddressReserve. It holds no memory: Mappings put memory into it.
// A Reservation is not safe for concurrent Close with Map.
type Reservation struct {
	d      cuda.Driver
	ptr    cuda.DevicePtr
	size   uint64
	live   atomic.Int64 // open Mappings made by Map
	closed bool
}

// Reserve reserves size bytes of virtual address space aligned to align (0
// for the driver's default; otherwise a power of two), preferably at hint
// (0 for no preference; the driver may place the range elsewhere: compare
// Ptr with the hint). size should be a multiple of the allocation
// granularity of the memory that will be mapped into it. It needs no
// current context.
func Reserve(d cuda.Driver, size, align uint64, hint cuda.DevicePtr) (*Reservation, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: reserve: %w (nil driver)", ErrNilHandle)
	}
	if size == 0 {
		return nil, fmt.Errorf("vmm: reserve: %w", ErrZeroSize)
	}
	if align&(align-1) != 0 {
		return nil, fmt.Errorf("vmm: reserve: alignment %d is not a power of two: %w", align, ErrNotAligned)
	}
	if _, err := addOK(uint64(hint), size); err != nil {
		return nil, fmt.Errorf("vmm: reserve %d bytes at hint %#x: %w", size, hint, err)
	}
	p, err := d.MemAddressReserve(size, align, hint)
	if err != nil {
		return nil, fmt.Errorf("vmm: reserve %d bytes (align %d, hint %#x): %w", size, align, hint, err)
	}
	return &Reservation{d: d, ptr: p, size: size}, nil
}

// Ptr is the first address of the range.
func (r *Reservation) Ptr() cuda.DevicePtr { return r.ptr }

// Size is the length of the range in bytes.
func (r *Reservation) Size() uint64 { return r.size }

// End is the first address after the range.
func (r *Reservation) End() cuda.DevicePtr { return r.ptr + cuda.DevicePtr(r.size) }

// Driver is the driver the range was reserved with.
func (r *Reservation) Driver() cuda.Driver { return r.d }

// Mapped is the number of Mappings open in the range.
func (r *Reservation) Mapped() int { return int(r.live.Load()) }

// contains checks that [off, off+n) lies in the range.
func (r *Reservation) contains(off, n uint64) error {
	end, err := addOK(off, n)
	if err != nil {
		return err
	}
	if end > r.size {
		return fmt.Errorf("vmm: [%d, %d) in a reservation of %d bytes: %w", off, end, r.size, ErrOutOfRange)
	}
	return nil
}

// Close frees the range (cuMemAddressFree). It refuses, with ErrBusy and
// without calling the driver, while Mappings made with Map are open in it:
// unmap first. A second Close returns ErrClosed. If the driver fails, the
// Reservation stays open so that Close can be retried.
func (r *Reservation) Close() error {
	if r == nil {
		return fmt.Errorf("vmm: close reservation: %w", ErrNilHandle)
	}
	if r.closed {
		return fmt.Errorf("vmm: close reservation %#x: %w", r.ptr, ErrClosed)
	}
	if n := r.live.Load(); n > 0 {
		return fmt.Errorf("vmm: free reservation %#x+%d with %d mappings open: %w", r.ptr, r.size, n, ErrBusy)
	}
	if err := r.d.MemAddressFree(r.ptr, r.size); err != nil {
		return fmt.Errorf("vmm: free reservation %#x+%d: %w", r.ptr, r.size, err)
	}
	r.closed = true
	return nil
}
