package vmm

import (
	"fmt"
	"math/bits"

	"github.com/nvls-go/nvls/cuda"
)

// Granularity returns the allocation granularity of device dev for
// physical memory shareable through handles (cuMemGetAllocationGranularity):
// the recommended value when recommended is true, the minimum otherwise.
// Sizes of allocations and mappings, and offsets of mappings, are
// multiples of the minimum granularity. It needs no current context.
func Granularity(d cuda.Driver, dev cuda.Device, handles cuda.HandleType, recommended bool) (uint64, error) {
	if d == nil {
		return 0, fmt.Errorf("vmm: granularity: %w (nil driver)", ErrNilHandle)
	}
	if err := checkDevice(d, dev); err != nil {
		return 0, err
	}
	prop := cuda.DeviceAllocationProp(dev, handles)
	opt := cuda.GranularityMinimum
	if recommended {
		opt = cuda.GranularityRecommended
	}
	g, err := d.MemGetAllocationGranularity(&prop, opt)
	if err != nil {
		return 0, fmt.Errorf("vmm: granularity of device %d (%v): %w", dev, handles, err)
	}
	if g == 0 {
		return 0, fmt.Errorf("vmm: granularity of device %d: driver returned %w", dev, ErrZeroSize)
	}
	return g, nil
}

// RoundUp returns the smallest multiple of g that is at least n. It
// returns 0 when g is 0 or when that multiple does not fit in a uint64
// (so a result of 0 for a non-zero n means "cannot"); AlignUp says why.
func RoundUp(n, g uint64) uint64 {
	r, err := AlignUp(n, g)
	if err != nil {
		return 0
	}
	return r
}

// AlignUp is RoundUp with an error: ErrZeroSize for a zero granularity,
// ErrOverflow when the rounded value does not fit in a uint64.
func AlignUp(n, g uint64) (uint64, error) {
	if g == 0 {
		return 0, fmt.Errorf("vmm: round %d up to granularity 0: %w", n, ErrZeroSize)
	}
	rem := n % g
	if rem == 0 {
		return n, nil
	}
	r, carry := bits.Add64(n, g-rem, 0)
	if carry != 0 {
		return 0, fmt.Errorf("vmm: round %d up to a multiple of %d: %w", n, g, ErrOverflow)
	}
	return r, nil
}

// checkAligned reports ErrZeroSize or ErrNotAligned for a size that cannot
// be used with granularity g; what names the quantity in the message.
func checkAligned(what string, n, g uint64) error {
	if n == 0 {
		return fmt.Errorf("vmm: %s: %w", what, ErrZeroSize)
	}
	if g != 0 && n%g != 0 {
		return fmt.Errorf("vmm: %s %d is not a multiple of the granularity %d: %w", what, n, g, ErrNotAligned)
	}
	return nil
}

// addOK returns a+b, or ErrOverflow.
func addOK(a, b uint64) (uint64, error) {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return 0, fmt.Errorf("vmm: %d + %d: %w", a, b, ErrOverflow)
	}
	return s, nil
}

// mulOK returns a*b, or ErrOverflow.
func mulOK(a, b uint64) (uint64, error) {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return 0, fmt.Errorf("vmm: %d * %d: %w", a, b, ErrOverflow)
	}
	return lo, nil
}

// checkDevice reports ErrUnknownDevice unless dev is one of the driver's
// devices (a Device is its ordinal, as on Linux).
func checkDevice(d cuda.Driver, dev cuda.Device) error {
	n, err := d.DeviceCount()
	if err != nil {
		return fmt.Errorf("vmm: device count: %w", err)
	}
	if dev < 0 || int(dev) >= n {
		return fmt.Errorf("vmm: device %d (the driver has %d): %w", dev, n, ErrUnknownDevice)
	}
	return nil
}

// checkDevices checks every device of devs, with one DeviceCount call.
func checkDevices(d cuda.Driver, devs []cuda.Device) error {
	n, err := d.DeviceCount()
	if err != nil {
		return fmt.Errorf("vmm: device count: %w", err)
	}
	for _, dev := range devs {
		if dev < 0 || int(dev) >= n {
			return fmt.Errorf("vmm: device %d (the driver has %d): %w", dev, n, ErrUnknownDevice)
		}
	}
	return nil
}
