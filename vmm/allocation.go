package vmm

import (
	"fmt"

	"github.com/nvls-go/nvls/cuda"
)

// AllocOptions are the choices of Create beyond device and size.
type AllocOptions struct {
	// Handles are the shareable handle types the allocation may be
	// exported as (cuda.HandlePosixFD, cuda.HandleFabric, or both);
	// cuda.HandleNone for memory that is never exported.
	Handles cuda.HandleType
	// Compress asks for generic compression (cuda.CompressionGeneric)
	// where the device reports cuda.AttrGenericCompressionSupported; the
	// driver may still not grant it: Allocation.Compressed says.
	Compress bool
	// GPUDirectRDMA marks the memory as usable for GPUDirect RDMA.
	GPUDirectRDMA bool
	// Granularity, when not 0, is the device's allocation granularity
	// for Handles as the caller already asked the driver for it
	// (Granularity; the recommended value is a multiple of the minimum):
	// Create checks the size against it instead of asking again.
	Granularity uint64
}

// Allocation is physical memory: created on a device with cuMemCreate, or
// imported from a shareable handle. Close releases it (cuMemRelease); the
// memory itself lives until its last mapping is unmapped.
type Allocation struct {
	d          cuda.Driver
	h          cuda.MemHandle
	dev        cuda.Device
	size       uint64
	handles    cuda.HandleType
	imported   bool
	compressed bool
	closed     bool
}

// Create allocates size bytes of physical memory on dev (cuMemCreate with
// a pinned-device cuda.AllocationProp built from opts). size must be a
// multiple of the device's minimum granularity for opts.Handles (see
// Granularity and RoundUp). With opts.Compress it asks for compression
// only where the device supports it, reads the allocation's properties
// back and logs whether compression was granted. It needs no current
// context.
func Create(d cuda.Driver, dev cuda.Device, size uint64, opts AllocOptions) (*Allocation, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: create: %w (nil driver)", ErrNilHandle)
	}
	if size == 0 {
		return nil, fmt.Errorf("vmm: create on device %d: %w", dev, ErrZeroSize)
	}
	g := opts.Granularity
	if g == 0 {
		var err error
		if g, err = Granularity(d, dev, opts.Handles, false); err != nil {
			return nil, err
		}
	} else if err := checkDevice(d, dev); err != nil {
		return nil, err
	}
	if err := checkAligned(fmt.Sprintf("create on device %d: size", dev), size, g); err != nil {
		return nil, err
	}
	prop, err := allocProp(d, dev, opts)
	if err != nil {
		return nil, err
	}
	return create(d, size, prop)
}

// allocProp builds the property set for opts, asking for compression only
// where the device supports it.
func allocProp(d cuda.Driver, dev cuda.Device, opts AllocOptions) (cuda.AllocationProp, error) {
	prop := cuda.DeviceAllocationProp(dev, opts.Handles)
	if opts.GPUDirectRDMA {
		prop.Flags.GPUDirectRDMACapable = 1
	}
	if opts.Compress {
		ok, err := d.DeviceAttribute(cuda.AttrGenericCompressionSupported, dev)
		if err != nil {
			return prop, fmt.Errorf("vmm: compression support of device %d: %w", dev, err)
		}
		if ok != 0 {
			prop.Flags.CompressionType = cuda.CompressionGeneric
		} else {
			log().Info("compression requested but not supported by the device; allocating uncompressed", "device", dev)
		}
	}
	return prop, nil
}

// CreateProp allocates size bytes with a full property set as the caller
// built it (cuMemCreate). When prop asks for compression it reads the
// properties back to learn whether it was granted. It checks the device
// and the size against the granularity like Create. It needs no current
// context.
func CreateProp(d cuda.Driver, size uint64, prop cuda.AllocationProp) (*Allocation, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: create: %w (nil driver)", ErrNilHandle)
	}
	if size == 0 {
		return nil, fmt.Errorf("vmm: create: %w", ErrZeroSize)
	}
	if prop.Location.Type != cuda.LocationDevice {
		return nil, fmt.Errorf("vmm: create: location type %d is not a device: %w", prop.Location.Type, ErrUnknownDevice)
	}
	dev := cuda.Device(prop.Location.ID)
	if err := checkDevice(d, dev); err != nil {
		return nil, err
	}
	g, err := d.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
	if err != nil {
		return nil, fmt.Errorf("vmm: granularity of device %d: %w", dev, err)
	}
	if err := checkAligned(fmt.Sprintf("create on device %d: size", dev), size, g); err != nil {
		return nil, err
	}
	return create(d, size, prop)
}

// create is cuMemCreate, then the compression read-back; arguments are
// checked by the callers.
func create(d cuda.Driver, size uint64, prop cuda.AllocationProp) (*Allocation, error) {
	dev := cuda.Device(prop.Location.ID)
	h, err := d.MemCreate(size, &prop)
	if err != nil {
		return nil, fmt.Errorf("vmm: create %d bytes on device %d: %w", size, dev, err)
	}
	a := &Allocation{d: d, h: h, dev: dev, size: size, handles: prop.RequestedHandleTypes}
	if prop.Flags.CompressionType != cuda.CompressionNone {
		got, err := d.MemGetAllocationPropertiesFromHandle(h)
		if err != nil {
			rerr := d.MemRelease(h)
			if rerr != nil {
				return nil, fmt.Errorf("vmm: properties of new allocation on device %d: %w (and releasing it: %v)", dev, err, rerr)
			}
			return nil, fmt.Errorf("vmm: properties of new allocation on device %d: %w", dev, err)
		}
		a.compressed = got.Flags.CompressionType == cuda.CompressionGeneric
		log().Info("compression", "device", dev, "bytes", size, "granted", a.compressed)
	}
	return a, nil
}

// Import imports an allocation exported by Export, possibly in another
// process (cuMemImportFromShareableHandle), and reads its properties to
// learn its device. A POSIX FD in sh stays open: the caller closes it
// once imported. The size of the memory is not known from the handle:
// Size returns 0 unless the allocation was imported with ImportSized.
// It needs no current context.
func Import(d cuda.Driver, sh cuda.ShareableHandle) (*Allocation, error) {
	return ImportSized(d, sh, 0)
}

// ImportSized is Import for an allocation the caller knows to be size
// bytes long (the exporter says so), so that Size and MapInto work.
func ImportSized(d cuda.Driver, sh cuda.ShareableHandle, size uint64) (*Allocation, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: import: %w (nil driver)", ErrNilHandle)
	}
	switch sh.Type {
	case cuda.HandlePosixFD:
		if sh.FD < 0 {
			return nil, fmt.Errorf("vmm: import: file descriptor %d: %w", sh.FD, ErrNilHandle)
		}
	case cuda.HandleFabric:
		if sh.Fabric == (cuda.FabricHandle{}) {
			return nil, fmt.Errorf("vmm: import: empty fabric handle: %w", ErrNilHandle)
		}
	default:
		return nil, fmt.Errorf("vmm: import: %v: %w", sh.Type, ErrHandleType)
	}
	h, err := d.MemImportFromShareableHandle(sh)
	if err != nil {
		return nil, fmt.Errorf("vmm: import %v handle: %w", sh.Type, err)
	}
	prop, err := d.MemGetAllocationPropertiesFromHandle(h)
	if err != nil {
		if rerr := d.MemRelease(h); rerr != nil {
			return nil, fmt.Errorf("vmm: properties of imported allocation: %w (and releasing it: %v)", err, rerr)
		}
		return nil, fmt.Errorf("vmm: properties of imported allocation: %w", err)
	}
	return &Allocation{
		d:          d,
		h:          h,
		dev:        cuda.Device(prop.Location.ID),
		size:       size,
		handles:    prop.RequestedHandleTypes,
		imported:   true,
		compressed: prop.Flags.CompressionType == cuda.CompressionGeneric,
	}, nil
}

// Handle is the driver's handle of the allocation.
func (a *Allocation) Handle() cuda.MemHandle { return a.h }

// Device is the device whose memory this is.
func (a *Allocation) Device() cuda.Device { return a.dev }

// Size is the allocation's length in bytes (0 for an allocation imported
// with Import, whose size the handle does not tell).
func (a *Allocation) Size() uint64 { return a.size }

// Imported reports whether the allocation came from Import rather than
// Create.
func (a *Allocation) Imported() bool { return a.imported }

// Compressed reports whether the driver granted generic compression
// (from the properties read back after creation or import).
func (a *Allocation) Compressed() bool { return a.compressed }

// Props reads the allocation's properties from the driver
// (cuMemGetAllocationPropertiesFromHandle).
func (a *Allocation) Props() (cuda.AllocationProp, error) {
	if a == nil {
		return cuda.AllocationProp{}, fmt.Errorf("vmm: properties: %w", ErrNilHandle)
	}
	if a.closed {
		return cuda.AllocationProp{}, fmt.Errorf("vmm: properties of handle %#x: %w", a.h, ErrClosed)
	}
	p, err := a.d.MemGetAllocationPropertiesFromHandle(a.h)
	if err != nil {
		return p, fmt.Errorf("vmm: properties of handle %#x: %w", a.h, err)
	}
	return p, nil
}

// Export exports the allocation as a shareable handle of type t
// (cuMemExportToShareableHandle), which must be one of the types it was
// created with (AllocOptions.Handles). A returned POSIX FD belongs to the
// caller, who closes it.
func (a *Allocation) Export(t cuda.HandleType) (cuda.ShareableHandle, error) {
	if a == nil {
		return cuda.ShareableHandle{}, fmt.Errorf("vmm: export: %w", ErrNilHandle)
	}
	if a.closed {
		return cuda.ShareableHandle{}, fmt.Errorf("vmm: export handle %#x: %w", a.h, ErrClosed)
	}
	if (t != cuda.HandlePosixFD && t != cuda.HandleFabric) || a.handles&t == 0 {
		return cuda.ShareableHandle{}, fmt.Errorf("vmm: export handle %#x as %v (created with %v): %w", a.h, t, a.handles, ErrHandleType)
	}
	sh, err := a.d.MemExportToShareableHandle(a.h, t)
	if err != nil {
		return sh, fmt.Errorf("vmm: export handle %#x as %v: %w", a.h, t, err)
	}
	return sh, nil
}

// MapInto maps the whole allocation at offset off of r (see Map).
func (a *Allocation) MapInto(r *Reservation, off uint64) (*Mapping, error) {
	if a == nil {
		return nil, fmt.Errorf("vmm: map allocation: %w", ErrNilHandle)
	}
	if a.closed {
		return nil, fmt.Errorf("vmm: map handle %#x: %w", a.h, ErrClosed)
	}
	if a.size == 0 {
		return nil, fmt.Errorf("vmm: map handle %#x of unknown size (use ImportSized or Map): %w", a.h, ErrZeroSize)
	}
	return Map(r, off, a.h, a.size)
}

// Close releases the handle (cuMemRelease). Mappings of it keep the memory
// alive until they are unmapped; the documented order is to unmap first.
// A second Close returns ErrClosed; if the driver fails, the Allocation
// stays open so that Close can be retried.
func (a *Allocation) Close() error {
	if a == nil {
		return fmt.Errorf("vmm: release: %w", ErrNilHandle)
	}
	if a.closed {
		return fmt.Errorf("vmm: release handle %#x: %w", a.h, ErrClosed)
	}
	if err := a.d.MemRelease(a.h); err != nil {
		return fmt.Errorf("vmm: release handle %#x (device %d): %w", a.h, a.dev, err)
	}
	a.closed = true
	return nil
}
