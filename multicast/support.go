package multicast

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
)

// MinDriverVersion is the first driver API version with the multicast
// object API (CUDA 12.1).
const MinDriverVersion = 12010

// ErrUnsupported matches Support.Usable's errors: the device, its driver
// or its handle types cannot do what a multicast object needs.
var ErrUnsupported = errors.New("multicast: not supported")

// Support is what one device offers for multicast.
type Support struct {
	Device cuda.Device
	// DriverVersion is cuDriverGetVersion's.
	DriverVersion int
	// VMM: CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED.
	VMM bool
	// Multicast: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, and a driver of
	// at least MinDriverVersion.
	Multicast bool
	// PosixFD and Fabric: the shareable handle types the device exports.
	PosixFD bool
	Fabric  bool
}

// HandleTypes is the set of shareable handle types the device supports.
func (s Support) HandleTypes() cuda.HandleType {
	var h cuda.HandleType
	if s.PosixFD {
		h |= cuda.HandlePosixFD
	}
	if s.Fabric {
		h |= cuda.HandleFabric
	}
	return h
}

// Usable returns nil when the device can take part in a multicast object
// whose handles are of type need (cuda.HandleNone when nothing is
// exported), or an error that says what is missing.
func (s Support) Usable(need cuda.HandleType) error {
	switch {
	case s.DriverVersion < MinDriverVersion:
		return fmt.Errorf("%w: device %d: driver API version %d is older than %d (CUDA 12.1), which brought multicast objects",
			ErrUnsupported, s.Device, s.DriverVersion, MinDriverVersion)
	case !s.VMM:
		return fmt.Errorf("%w: device %d: virtual memory management not supported", ErrUnsupported, s.Device)
	case !s.Multicast:
		return fmt.Errorf("%w: device %d: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0", ErrUnsupported, s.Device)
	case need&^s.HandleTypes() != 0:
		return fmt.Errorf("%w: device %d: handle type %v not supported (the device supports %v)",
			ErrUnsupported, s.Device, need, s.HandleTypes())
	}
	return nil
}

// Query asks the driver what device dev supports. It calls no cuMulticast*
// entry point: only cuDriverGetVersion and cuDeviceGetAttribute, and the
// multicast attribute only on a driver that knows it.
func Query(d cuda.Driver, dev cuda.Device) (Support, error) {
	s := Support{Device: dev}
	v, err := d.DriverVersion()
	if err != nil {
		return s, fmt.Errorf("multicast: device %d: driver version: %w", dev, err)
	}
	s.DriverVersion = v
	attr := func(a cuda.DeviceAttribute, name string) (bool, error) {
		x, err := d.DeviceAttribute(a, dev)
		if err != nil {
			return false, fmt.Errorf("multicast: device %d: attribute %s: %w", dev, name, err)
		}
		return x != 0, nil
	}
	if s.VMM, err = attr(cuda.AttrVirtualMemoryManagement, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"); err != nil {
		return s, err
	}
	if s.PosixFD, err = attr(cuda.AttrHandleTypePosixFDSupported, "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"); err != nil {
		return s, err
	}
	if s.Fabric, err = attr(cuda.AttrHandleTypeFabricSupported, "HANDLE_TYPE_FABRIC_SUPPORTED"); err != nil {
		return s, err
	}
	if v >= MinDriverVersion {
		if s.Multicast, err = attr(cuda.AttrMulticastSupported, "MULTICAST_SUPPORTED"); err != nil {
			return s, err
		}
	}
	return s, nil
}

// QueryAll is Query for every device, in order.
func QueryAll(d cuda.Driver, devs []cuda.Device) ([]Support, error) {
	out := make([]Support, len(devs))
	for i, dev := range devs {
		s, err := Query(d, dev)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// Granularities are the sizes an object and its bound memory must be
// multiples of.
type Granularities struct {
	// Multicast is cuMulticastGetGranularity's recommended value.
	Multicast uint64
	// Allocation is the least common multiple of every device's
	// recommended allocation granularity (cuMemGetAllocationGranularity)
	// for allocations exportable as the handle type.
	Allocation uint64
	// Size is the least common multiple of the two: round sizes up to it.
	Size uint64
}

// ObjectGranularity asks the driver for the recommended granularity of a
// multicast object of numDevices devices and about size bytes exporting
// handle types handleType (cuMulticastGetGranularity), alone: for a
// caller that has the devices' allocation granularity already.
func ObjectGranularity(d cuda.Driver, numDevices int, size uint64, handleType cuda.HandleType) (uint64, error) {
	if numDevices <= 0 {
		return 0, invalid("ObjectGranularity", "numDevices %d", numDevices)
	}
	prop := cuda.MulticastProp{NumDevices: uint32(numDevices), Size: size, HandleTypes: uint64(handleType)}
	mc, err := d.MulticastGetGranularity(&prop, cuda.GranularityRecommended)
	if err != nil {
		return 0, fmt.Errorf("multicast: granularity: %w", err)
	}
	if mc == 0 {
		return 0, fmt.Errorf("multicast: granularity: driver returned 0: %w", cuda.ErrInvalidValue)
	}
	return mc, nil
}

// Granularity asks the driver for the granularities of a multicast object
// of numDevices devices and about size bytes exporting handle types
// handleType, with memory bound from devices devs.
func Granularity(d cuda.Driver, devs []cuda.Device, numDevices int, size uint64, handleType cuda.HandleType) (Granularities, error) {
	var g Granularities
	if numDevices <= 0 {
		return g, invalid("Granularity", "numDevices %d", numDevices)
	}
	if len(devs) == 0 {
		return g, invalid("Granularity", "no devices")
	}
	mc, err := ObjectGranularity(d, numDevices, size, handleType)
	if err != nil {
		return g, err
	}
	g.Multicast = mc
	g.Allocation = 1
	for _, dev := range devs {
		ap := cuda.DeviceAllocationProp(dev, handleType)
		a, err := d.MemGetAllocationGranularity(&ap, cuda.GranularityRecommended)
		if err != nil {
			return g, fmt.Errorf("multicast: device %d: allocation granularity: %w", dev, err)
		}
		if a == 0 {
			return g, fmt.Errorf("multicast: device %d: allocation granularity: driver returned 0: %w", dev, cuda.ErrInvalidValue)
		}
		g.Allocation = LCM(g.Allocation, a)
	}
	g.Size = LCM(g.Multicast, g.Allocation)
	return g, nil
}

// RoundUp rounds n up to a multiple of g (g > 0).
func RoundUp(n, g uint64) uint64 {
	if r := n % g; r != 0 {
		return n + g - r
	}
	return n
}

// LCM is the least common multiple of a and b (both > 0).
func LCM(a, b uint64) uint64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}
