package team

import (
	"sync"

	"github.com/nvls-go/nvls/cuda"
)

// hookDriver wraps a driver and calls before(device) ahead of every call
// of the entry point op, one of those that tests aim at one rank: the
// multicast entry points of the bring-up, cuMemCreate and cuMemMap. The device is
// the call's own where it has one, else the one whose memory is bound,
// else the device of the context current on the calling thread (every
// rank's worker has its device's primary context current). A non-nil
// error from before is the call's result, and the driver is not called.
type hookDriver struct {
	cuda.Driver
	op     string
	before func(dev cuda.Device) error

	mu     sync.Mutex
	ctxDev map[cuda.Context]cuda.Device
	memDev map[cuda.MemHandle]cuda.Device
}

func newHookDriver(d cuda.Driver, op string, before func(dev cuda.Device) error) *hookDriver {
	return &hookDriver{Driver: d, op: op, before: before, ctxDev: map[cuda.Context]cuda.Device{}, memDev: map[cuda.MemHandle]cuda.Device{}}
}

// hook runs before for a call of op; dev says the call's device.
func (h *hookDriver) hook(op string, dev func() cuda.Device) error {
	if op != h.op {
		return nil
	}
	return h.before(dev())
}

func (h *hookDriver) PrimaryCtxRetain(d cuda.Device) (cuda.Context, error) {
	c, err := h.Driver.PrimaryCtxRetain(d)
	if err == nil {
		h.mu.Lock()
		h.ctxDev[c] = d
		h.mu.Unlock()
	}
	return c, err
}

// current is the device of the calling thread's current context (-1 when
// none is known).
func (h *hookDriver) current() cuda.Device {
	c, err := h.Driver.CtxGetCurrent()
	h.mu.Lock()
	defer h.mu.Unlock()
	if d, ok := h.ctxDev[c]; ok && err == nil {
		return d
	}
	return -1
}

func (h *hookDriver) MemCreate(size uint64, prop *cuda.AllocationProp) (cuda.MemHandle, error) {
	dev := cuda.Device(prop.Location.ID)
	if err := h.hook("cuMemCreate", func() cuda.Device { return dev }); err != nil {
		return 0, err
	}
	m, err := h.Driver.MemCreate(size, prop)
	if err == nil {
		h.mu.Lock()
		h.memDev[m] = dev
		h.mu.Unlock()
	}
	return m, err
}

func (h *hookDriver) MulticastGetGranularity(prop *cuda.MulticastProp, option cuda.GranularityFlags) (uint64, error) {
	if err := h.hook("cuMulticastGetGranularity", h.current); err != nil {
		return 0, err
	}
	return h.Driver.MulticastGetGranularity(prop, option)
}

func (h *hookDriver) MulticastCreate(prop *cuda.MulticastProp) (cuda.MemHandle, error) {
	if err := h.hook("cuMulticastCreate", h.current); err != nil {
		return 0, err
	}
	return h.Driver.MulticastCreate(prop)
}

func (h *hookDriver) MulticastAddDevice(mc cuda.MemHandle, d cuda.Device) error {
	if err := h.hook("cuMulticastAddDevice", func() cuda.Device { return d }); err != nil {
		return err
	}
	return h.Driver.MulticastAddDevice(mc, d)
}

func (h *hookDriver) MulticastBindMem(mc cuda.MemHandle, mcOffset uint64, mem cuda.MemHandle, memOffset, size uint64) error {
	dev := func() cuda.Device {
		h.mu.Lock()
		defer h.mu.Unlock()
		if d, ok := h.memDev[mem]; ok {
			return d
		}
		return -1
	}
	if err := h.hook("cuMulticastBindMem", dev); err != nil {
		return err
	}
	return h.Driver.MulticastBindMem(mc, mcOffset, mem, memOffset, size)
}

func (h *hookDriver) MemMap(p cuda.DevicePtr, size, offset uint64, mem cuda.MemHandle) error {
	if err := h.hook("cuMemMap", h.current); err != nil {
		return err
	}
	return h.Driver.MemMap(p, size, offset, mem)
}

// failOnce wraps d so that the first call of op on dev fails with code;
// fired says how many times it did.
func failOnce(d cuda.Driver, op string, dev cuda.Device, code cuda.Result) (drv *hookDriver, fired func() int) {
	return failN(d, op, dev, 1, code)
}

// failN wraps d so that the first k calls of op on dev fail with code
// (the driver is not called); fired says how many did.
func failN(d cuda.Driver, op string, dev cuda.Device, k int, code cuda.Result) (drv *hookDriver, fired func() int) {
	var mu sync.Mutex
	n := 0
	drv = newHookDriver(d, op, func(got cuda.Device) error {
		mu.Lock()
		defer mu.Unlock()
		if got != dev || n >= k {
			return nil
		}
		n++
		return cuda.NewError(op, code, "injected by the test")
	})
	return drv, func() int { mu.Lock(); defer mu.Unlock(); return n }
}
