package vmm

import "errors"

// Sentinel errors for arguments this package rejects before calling the
// driver. Returned errors wrap them with the values at fault; match with
// errors.Is.
var (
	// ErrZeroSize: a size of zero bytes.
	ErrZeroSize = errors.New("vmm: size is zero")
	// ErrNotAligned: a size or offset that is not a multiple of the
	// granularity it must respect.
	ErrNotAligned = errors.New("vmm: not a multiple of the granularity")
	// ErrUnknownDevice: a device the driver does not have.
	ErrUnknownDevice = errors.New("vmm: unknown device")
	// ErrNilHandle: a zero memory handle, a nil object or a nil driver.
	ErrNilHandle = errors.New("vmm: nil handle")
	// ErrClosed: the object was closed already.
	ErrClosed = errors.New("vmm: already closed")
	// ErrOverflow: a size or address computation that does not fit in 64
	// bits.
	ErrOverflow = errors.New("vmm: size overflows")
	// ErrOutOfRange: an offset and size that do not lie inside the range
	// they refer to.
	ErrOutOfRange = errors.New("vmm: out of range")
	// ErrBusy: the object is still in use (a Reservation with open
	// Mappings, a range already mapped).
	ErrBusy = errors.New("vmm: still in use")
)

// More sentinels.
var (
	// ErrNoDevices: an access list with no device in it.
	ErrNoDevices = errors.New("vmm: no devices given")
	// ErrHandleType: a shareable handle type the allocation was not
	// created to export (AllocOptions.Handles), or an unknown one.
	ErrHandleType = errors.New("vmm: handle type not requested at creation")
)
