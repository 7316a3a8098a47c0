package multicast

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nvls-go/nvls/cuda"
)

// Origin says where an Object's handle came from, and so whether Close
// releases it.
type Origin int

// Origins.
const (
	// Created: this Object made the multicast object (cuMulticastCreate);
	// Close releases the handle.
	Created Origin = iota
	// Imported: the handle was imported from a shareable handle another
	// process exported (cuMemImportFromShareableHandle); Close releases
	// this process's reference.
	Imported
	// Attached: the handle belongs to another Object of this process (the
	// in-process team shares it by value); Close unmaps and unbinds what
	// this Object did but does not release the handle.
	Attached
)

func (o Origin) String() string {
	switch o {
	case Created:
		return "created"
	case Imported:
		return "imported"
	case Attached:
		return "attached"
	}
	return fmt.Sprintf("Origin(%d)", int(o))
}

type binding struct {
	dev      cuda.Device
	mcOffset uint64
	size     uint64
}

type mapping struct {
	ptr  cuda.DevicePtr
	size uint64
	// mapped is false once unmapped while the range still waits to be
	// freed (its cuMemAddressFree failed): a later UnmapMC or Close
	// retries it.
	mapped bool
}

// Object is one multicast object as this process sees it. Its methods are
// safe for concurrent use; each driver call they make must still run where
// the right context is current.
type Object struct {
	mu         sync.Mutex
	d          cuda.Driver
	h          cuda.MemHandle
	numDevices int
	size       uint64
	handleType cuda.HandleType
	origin     Origin

	added     []cuda.Device
	confirmed bool
	binds     []binding
	bound     bool // a bind ever happened (adds are over)
	maps      []mapping
	released  bool
	// closing: Close was called; closed: it finished with nothing left.
	closing bool
	closed  bool
}

// Create makes a multicast object of size bytes (a multiple of the
// multicast granularity) for numDevices devices, exportable as handleType
// (cuda.HandleNone when it stays in this process).
func Create(d cuda.Driver, numDevices int, size uint64, handleType cuda.HandleType) (*Object, error) {
	if numDevices <= 0 {
		return nil, invalid("Create", "numDevices %d", numDevices)
	}
	if size == 0 {
		return nil, invalid("Create", "size 0")
	}
	prop := cuda.MulticastProp{NumDevices: uint32(numDevices), Size: size, HandleTypes: uint64(handleType)}
	h, err := d.MulticastCreate(&prop)
	if err != nil {
		return nil, fmt.Errorf("multicast: create (%d devices, %d bytes): %w", numDevices, size, err)
	}
	return &Object{d: d, h: h, numDevices: numDevices, size: size, handleType: handleType, origin: Created}, nil
}

// Import imports a multicast object another process created and exported
// (Export). numDevices and size must be the creator's. Import does not
// close a POSIX FD: the caller does, once Import returned.
func Import(d cuda.Driver, sh cuda.ShareableHandle, numDevices int, size uint64) (*Object, error) {
	if numDevices <= 0 {
		return nil, invalid("Import", "numDevices %d", numDevices)
	}
	if size == 0 {
		return nil, invalid("Import", "size 0")
	}
	switch sh.Type {
	case cuda.HandlePosixFD:
		if sh.FD < 0 {
			return nil, invalid("Import", "POSIX FD %d", sh.FD)
		}
	case cuda.HandleFabric:
	default:
		return nil, invalid("Import", "handle type %v", sh.Type)
	}
	h, err := d.MemImportFromShareableHandle(sh)
	if err != nil {
		return nil, fmt.Errorf("multicast: import %v handle: %w", sh.Type, err)
	}
	return &Object{d: d, h: h, numDevices: numDevices, size: size, handleType: sh.Type, origin: Imported}, nil
}

// Attach wraps a multicast handle that another Object of this process
// created, so that a second user (another rank of an in-process team) can
// add its device, bind and map with the same checks. The Attached Object
// never releases the handle: its creator does, after every Attached
// Object has been closed.
func Attach(d cuda.Driver, h cuda.MemHandle, numDevices int, size uint64, handleType cuda.HandleType) (*Object, error) {
	if numDevices <= 0 {
		return nil, invalid("Attach", "numDevices %d", numDevices)
	}
	if size == 0 {
		return nil, invalid("Attach", "size 0")
	}
	if h == 0 {
		return nil, invalid("Attach", "nil handle")
	}
	return &Object{d: d, h: h, numDevices: numDevices, size: size, handleType: handleType, origin: Attached}, nil
}

// Handle is the multicast handle (cuda.MemHandle of the object).
func (o *Object) Handle() cuda.MemHandle { return o.h }

// Size is the object's size in bytes.
func (o *Object) Size() uint64 { return o.size }

// NumDevices is the number of devices the object was created for.
func (o *Object) NumDevices() int { return o.numDevices }

// HandleType is the set of handle types the object can be exported as.
func (o *Object) HandleType() cuda.HandleType { return o.handleType }

// Origin says whether this Object created, imported or attached to the
// handle.
func (o *Object) Origin() Origin { return o.origin }

// Added returns the devices added through this Object, in order.
func (o *Object) Added() []cuda.Device {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.added)
}

// AllAdded reports whether binding is allowed: every device was added
// through this Object, or ConfirmAllAdded said the others were added
// elsewhere.
func (o *Object) AllAdded() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.allAdded()
}

func (o *Object) allAdded() bool { return o.confirmed || len(o.added) == o.numDevices }

// AddDevice adds dev to the object (cuMulticastAddDevice).
func (o *Object) AddDevice(dev cuda.Device) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	const op = "AddDevice"
	switch {
	case o.closing:
		return orderErr(op, ErrClosed, "device %d", dev)
	case o.bound:
		return orderErr(op, ErrAddAfterBind, "device %d", dev)
	case o.confirmed:
		return orderErr(op, ErrAddAfterBind, "device %d after ConfirmAllAdded", dev)
	case slices.Contains(o.added, dev):
		return orderErr(op, ErrAlreadyAdded, "device %d", dev)
	case len(o.added) >= o.numDevices:
		return orderErr(op, ErrTooManyDevices, "device %d: %d of %d already added", dev, len(o.added), o.numDevices)
	}
	if err := o.d.MulticastAddDevice(o.h, dev); err != nil {
		return fmt.Errorf("multicast: add device %d: %w", dev, err)
	}
	o.added = append(o.added, dev)
	return nil
}

// ConfirmAllAdded records that every device of the object has been added,
// some of them by other processes (or other Objects of this process): the
// caller has passed a barrier after which no device is added any more.
// This Object must have added at least one device itself.
func (o *Object) ConfirmAllAdded() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	const op = "ConfirmAllAdded"
	switch {
	case o.closing:
		return orderErr(op, ErrClosed, "")
	case len(o.added) == 0:
		return orderErr(op, ErrNotAdded, "no device was added through this object")
	}
	o.confirmed = true
	return nil
}

func (o *Object) checkBind(op string, dev cuda.Device, mcOffset, size uint64) error {
	switch {
	case o.closing:
		return orderErr(op, ErrClosed, "device %d", dev)
	case !o.allAdded():
		return orderErr(op, ErrNotAllAdded, "%d of %d added, not confirmed", len(o.added), o.numDevices)
	case !slices.Contains(o.added, dev):
		return orderErr(op, ErrNotAdded, "device %d", dev)
	case size == 0:
		return invalid(op, "size 0")
	case mcOffset >= o.size || size > o.size-mcOffset:
		return invalid(op, "range [%d, +%d) outside the object's %d bytes", mcOffset, size, o.size)
	}
	for _, b := range o.binds {
		if b.dev == dev && mcOffset < b.mcOffset+b.size && b.mcOffset < mcOffset+size {
			return invalid(op, "device %d: range [%d, +%d) overlaps the bind at [%d, +%d)", dev, mcOffset, size, b.mcOffset, b.size)
		}
	}
	return nil
}

// Bind binds size bytes of allocation mem (a cuMemCreate handle on device
// dev), from memOffset, at mcOffset of the object (cuMulticastBindMem).
func (o *Object) Bind(dev cuda.Device, mcOffset uint64, mem cuda.MemHandle, memOffset, size uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.checkBind("Bind", dev, mcOffset, size); err != nil {
		return err
	}
	if mem == 0 {
		return invalid("Bind", "nil memory handle")
	}
	if err := o.d.MulticastBindMem(o.h, mcOffset, mem, memOffset, size); err != nil {
		return fmt.Errorf("multicast: bind memory of device %d: %w", dev, err)
	}
	o.binds = append(o.binds, binding{dev: dev, mcOffset: mcOffset, size: size})
	o.bound = true
	return nil
}

// BindAddr binds size bytes of device dev's memory mapped at p at mcOffset
// of the object (cuMulticastBindAddr).
func (o *Object) BindAddr(dev cuda.Device, mcOffset uint64, p cuda.DevicePtr, size uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.checkBind("BindAddr", dev, mcOffset, size); err != nil {
		return err
	}
	if p == 0 {
		return invalid("BindAddr", "nil address")
	}
	if err := o.d.MulticastBindAddr(o.h, mcOffset, p, size); err != nil {
		return fmt.Errorf("multicast: bind address of device %d: %w", dev, err)
	}
	o.binds = append(o.binds, binding{dev: dev, mcOffset: mcOffset, size: size})
	o.bound = true
	return nil
}

// Unbind undoes the bind of device dev at mcOffset of size bytes
// (cuMulticastUnbind); offset and size are those of the bind. Every
// mapping this Object made must have been unmapped first.
func (o *Object) Unbind(dev cuda.Device, mcOffset, size uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	const op = "Unbind"
	if o.closing {
		return orderErr(op, ErrClosed, "device %d", dev)
	}
	i := slices.Index(o.binds, binding{dev: dev, mcOffset: mcOffset, size: size})
	if i < 0 {
		return orderErr(op, ErrNotBound, "device %d at [%d, +%d)", dev, mcOffset, size)
	}
	if n := o.liveMaps(); n > 0 {
		return orderErr(op, ErrStillMapped, "%d mapping(s)", n)
	}
	return o.unbind(i)
}

func (o *Object) unbind(i int) error {
	b := o.binds[i]
	if err := o.d.MulticastUnbind(o.h, b.dev, b.mcOffset, b.size); err != nil {
		return fmt.Errorf("multicast: unbind device %d: %w", b.dev, err)
	}
	o.binds = slices.Delete(o.binds, i, i+1)
	return nil
}

func (o *Object) liveMaps() int {
	n := 0
	for _, m := range o.maps {
		if m.mapped {
			n++
		}
	}
	return n
}

// Binds returns the number of live binds of this Object.
func (o *Object) Binds() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.binds)
}

// MapMC reserves a range of the object's size (aligned to the multicast
// granularity), maps the multicast handle into it and grants read-write
// access to devs (each added through this Object). It returns the base of
// the multicast alias. At least one bind must have been made here.
func (o *Object) MapMC(devs ...cuda.Device) (cuda.DevicePtr, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	const op = "MapMC"
	switch {
	case o.closing:
		return 0, orderErr(op, ErrClosed, "")
	case !o.allAdded():
		return 0, orderErr(op, ErrNotAllAdded, "%d of %d added, not confirmed", len(o.added), o.numDevices)
	case len(o.binds) == 0:
		return 0, orderErr(op, ErrNotBound, "map before bind")
	case len(devs) == 0:
		return 0, invalid(op, "no device to grant access to")
	}
	for _, dev := range devs {
		if !slices.Contains(o.added, dev) {
			return 0, orderErr(op, ErrNotAdded, "device %d", dev)
		}
	}
	prop := cuda.MulticastProp{NumDevices: uint32(o.numDevices), Size: o.size, HandleTypes: uint64(o.handleType)}
	align, err := o.d.MulticastGetGranularity(&prop, cuda.GranularityMinimum)
	if err != nil {
		return 0, fmt.Errorf("multicast: map: granularity: %w", err)
	}
	p, err := o.d.MemAddressReserve(o.size, align, 0)
	if err != nil {
		return 0, fmt.Errorf("multicast: map: reserve %d bytes: %w", o.size, err)
	}
	if err := o.d.MemMap(p, o.size, 0, o.h); err != nil {
		err = fmt.Errorf("multicast: map: %w", err)
		if ferr := o.d.MemAddressFree(p, o.size); ferr != nil {
			err = errors.Join(err, fmt.Errorf("multicast: map: free range: %w", ferr))
		}
		return 0, err
	}
	desc := make([]cuda.AccessDesc, len(devs))
	for i, dev := range devs {
		desc[i] = cuda.AccessDesc{Location: cuda.DeviceLocation(dev), Flags: cuda.AccessReadWrite}
	}
	if err := o.d.MemSetAccess(p, o.size, desc); err != nil {
		err = fmt.Errorf("multicast: map: set access: %w", err)
		if uerr := o.d.MemUnmap(p, o.size); uerr != nil {
			err = errors.Join(err, fmt.Errorf("multicast: map: unmap: %w", uerr))
		} else if ferr := o.d.MemAddressFree(p, o.size); ferr != nil {
			err = errors.Join(err, fmt.Errorf("multicast: map: free range: %w", ferr))
		}
		return 0, err
	}
	o.maps = append(o.maps, mapping{ptr: p, size: o.size, mapped: true})
	return p, nil
}

// UnmapMC unmaps a multicast alias MapMC returned and frees its range.
func (o *Object) UnmapMC(p cuda.DevicePtr) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	const op = "UnmapMC"
	if o.closing {
		return orderErr(op, ErrClosed, "")
	}
	i := slices.IndexFunc(o.maps, func(m mapping) bool { return m.ptr == p })
	if i < 0 {
		return orderErr(op, ErrNotMapped, "address %#x", uint64(p))
	}
	return o.unmap(i)
}

func (o *Object) unmap(i int) error {
	m := &o.maps[i]
	if m.mapped {
		if err := o.d.MemUnmap(m.ptr, m.size); err != nil {
			return fmt.Errorf("multicast: unmap %#x: %w", uint64(m.ptr), err)
		}
		m.mapped = false
	}
	if err := o.d.MemAddressFree(m.ptr, m.size); err != nil {
		return fmt.Errorf("multicast: free range %#x: %w", uint64(m.ptr), err)
	}
	o.maps = slices.Delete(o.maps, i, i+1)
	return nil
}

// Mappings returns the number of live multicast aliases of this Object.
func (o *Object) Mappings() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.liveMaps()
}

// Export exports the handle as t (one of the object's handle types) for
// another process to Import. A returned POSIX FD belongs to the caller.
func (o *Object) Export(t cuda.HandleType) (cuda.ShareableHandle, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closing {
		return cuda.ShareableHandle{}, orderErr("Export", ErrClosed, "")
	}
	if t != cuda.HandlePosixFD && t != cuda.HandleFabric {
		return cuda.ShareableHandle{}, invalid("Export", "handle type %v", t)
	}
	if o.handleType&t == 0 {
		return cuda.ShareableHandle{}, invalid("Export", "the object was made exportable as %v, not %v", o.handleType, t)
	}
	sh, err := o.d.MemExportToShareableHandle(o.h, t)
	if err != nil {
		return cuda.ShareableHandle{}, fmt.Errorf("multicast: export as %v: %w", t, err)
	}
	return sh, nil
}

// Close undoes whatever was done, in reverse order: it unmaps the
// multicast aliases (freeing their ranges), unbinds every bind and, for a
// created or imported object, releases the handle. It goes on past a
// failed step and returns every failure; what failed stays in the books,
// so that calling Close again retries it. Once Close has been called, every
// other method returns ErrClosed. Close after a Close that succeeded
// returns nil.
func (o *Object) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closing = true
	var errs []error
	for i := len(o.maps) - 1; i >= 0; i-- {
		if err := o.unmap(i); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(o.binds) - 1; i >= 0; i-- {
		if err := o.unbind(i); err != nil {
			errs = append(errs, err)
		}
	}
	// Release only once nothing is left mapped or bound: a failed unmap or
	// unbind is retried by the next Close, which needs the handle.
	if len(errs) == 0 && o.origin != Attached && !o.released {
		if err := o.d.MemRelease(o.h); err != nil {
			errs = append(errs, fmt.Errorf("multicast: release %s handle: %w", o.origin, err))
		} else {
			o.released = true
		}
	}
	if len(errs) == 0 {
		o.closed = true
	}
	return errors.Join(errs...)
}
