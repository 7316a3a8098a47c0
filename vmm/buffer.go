package vmm

import (
	"fmt"
	"io"

	"github.com/nvls-go/nvls/cuda"
)

// BufferOptions are the choices of NewBuffer beyond device and size.
type BufferOptions struct {
	// Access lists the devices that may read and write the buffer; nil
	// means the owning device alone.
	Access []cuda.Device
	// Flags are the rights granted to Access (cuda.AccessReadWrite when
	// zero).
	Flags cuda.AccessFlags
	// Handles, Compress, GPUDirectRDMA: as in AllocOptions.
	Handles       cuda.HandleType
	Compress      bool
	GPUDirectRDMA bool
	// Recommended rounds the size up to the recommended granularity
	// instead of the minimum.
	Recommended bool
}

// Buffer is one Allocation on a device mapped into its own Reservation,
// accessible to a set of devices: device memory with a stable address,
// made with the VMM API.
type Buffer struct {
	res     *Reservation
	alloc   *Allocation
	m       *Mapping
	access  []cuda.Device
	closing closing
}

// NewBuffer allocates at least size bytes on dev (rounded up to the
// granularity; Size says how much), reserves a range for it, maps it and
// sets access for opts.Access. On failure it undoes what it did. It needs
// no current context.
func NewBuffer(d cuda.Driver, dev cuda.Device, size uint64, opts BufferOptions) (*Buffer, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: buffer: %w (nil driver)", ErrNilHandle)
	}
	if size == 0 {
		return nil, fmt.Errorf("vmm: buffer on device %d: %w", dev, ErrZeroSize)
	}
	access := opts.Access
	if access == nil {
		access = []cuda.Device{dev}
	}
	if err := checkDevices(d, access); err != nil {
		return nil, err
	}
	flags := opts.Flags
	if flags == 0 {
		flags = cuda.AccessReadWrite
	}
	g, err := Granularity(d, dev, opts.Handles, opts.Recommended)
	if err != nil {
		return nil, err
	}
	n, err := AlignUp(size, g)
	if err != nil {
		return nil, err
	}
	a, err := Create(d, dev, n, AllocOptions{Handles: opts.Handles, Compress: opts.Compress, GPUDirectRDMA: opts.GPUDirectRDMA})
	if err != nil {
		return nil, err
	}
	r, err := Reserve(d, n, g, 0)
	if err != nil {
		return nil, closeFirst(err, a)
	}
	m, err := a.MapInto(r, 0)
	if err != nil {
		return nil, closeFirst(err, a, r)
	}
	if err := m.SetAccess(access, flags); err != nil {
		return nil, closeFirst(err, m, a, r)
	}
	return &Buffer{res: r, alloc: a, m: m, access: append([]cuda.Device(nil), access...)}, nil
}

// Ptr is the buffer's first address.
func (b *Buffer) Ptr() cuda.DevicePtr { return b.m.Ptr() }

// Size is the buffer's length: the requested size rounded up to the
// granularity.
func (b *Buffer) Size() uint64 { return b.alloc.Size() }

// Device is the device whose memory backs the buffer.
func (b *Buffer) Device() cuda.Device { return b.alloc.Device() }

// Access is the devices that were granted access.
func (b *Buffer) Access() []cuda.Device { return append([]cuda.Device(nil), b.access...) }

// Allocation is the physical memory (for Export, Compressed, Props).
func (b *Buffer) Allocation() *Allocation { return b.alloc }

// Reservation is the address range.
func (b *Buffer) Reservation() *Reservation { return b.res }

// Mapping is the mapping of the allocation into the range.
func (b *Buffer) Mapping() *Mapping { return b.m }

// Close unmaps, releases and frees, in that order, going on past a
// failure and returning the first error. Close again retries only what
// failed; once all is released it returns ErrClosed.
func (b *Buffer) Close() error {
	if b == nil {
		return fmt.Errorf("vmm: close buffer: %w", ErrNilHandle)
	}
	return b.closing.close("buffer", func() []io.Closer { return []io.Closer{b.m, b.alloc, b.res} })
}

// closing is the state of an object's Close that may fail part-way: the
// first Close releases everything it can and keeps what failed, in order,
// for the next Close to retry.
type closing struct {
	started bool
	left    []io.Closer
}

// close runs the first time with what build returns, later on what is
// left; once everything is released it returns ErrClosed (wrapped with
// what).
func (c *closing) close(what string, build func() []io.Closer) error {
	if c.started && len(c.left) == 0 {
		return fmt.Errorf("vmm: close %s: %w", what, ErrClosed)
	}
	if !c.started {
		c.started = true
		c.left = build()
	}
	var first error
	c.left, first = closeAll(c.left)
	return first
}

// closeAll closes cs in order, going on past failures; it returns those
// that failed, in order, and the first error.
func closeAll(cs []io.Closer) ([]io.Closer, error) {
	var left []io.Closer
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil {
			left = append(left, c)
			if first == nil {
				first = err
			} else {
				log().Debug("close failed too", "err", err)
			}
		}
	}
	return left, first
}

// closeFirst closes cs in order, keeping on after a failure, and returns
// first if it is not nil, else the first Close error. Errors that are not
// returned are logged.
func closeFirst(first error, cs ...io.Closer) error {
	for _, c := range cs {
		if err := c.Close(); err != nil {
			if first == nil {
				first = err
			} else {
				log().Warn("cleanup after an earlier error failed too", "err", err)
			}
		}
	}
	return first
}
