package sim

import (
	"sync"
	"time"

	"github.com/nvls-go/nvls/cuda"
)

// mcObject is a multicast object. devices and binds are guarded by mu
// (read on the memory hot path) and changed under Node.mu as well.
type mcObject struct {
	id   uint64
	prop cuda.MulticastProp
	size uint64
	refs int // live handles (Node.mu)

	mu        sync.RWMutex
	devices   []cuda.Device // in the order they were added
	binds     []*mcBind
	everBound bool
	// allAdded is closed when the last of the NumDevices devices is
	// added: binds and mappings wait for it.
	allAdded chan struct{}
}

type mcBind struct {
	dev         cuda.Device
	mcOff, size uint64
	alloc       *physAlloc
	memOff      uint64
}

// bindFor returns device d's bind covering mcOff (caller holds mu).
func (o *mcObject) bindFor(d cuda.Device, mcOff uint64) *mcBind {
	for _, b := range o.binds {
		if b.dev == d && mcOff >= b.mcOff && mcOff < b.mcOff+b.size {
			return b
		}
	}
	return nil
}

func (o *mcObject) hasDevice(d cuda.Device) bool {
	for _, x := range o.devices {
		if x == d {
			return true
		}
	}
	return false
}

func (n *Node) mcUnrefLocked(o *mcObject) {
	o.refs--
	if o.refs > 0 {
		return
	}
	o.mu.Lock()
	binds := o.binds
	o.binds = nil
	o.mu.Unlock()
	for _, b := range binds {
		n.allocUnrefLocked(b.alloc)
	}
	n.mcLive--
}

// mcHandleLocked returns the live multicast object behind h.
func (n *Node) mcHandleLocked(op string, h cuda.MemHandle) (*mcObject, error) {
	hd, err := n.userHandleLocked(op, h)
	if err != nil {
		return nil, err
	}
	if hd.mc == nil {
		return nil, errf(op, cuda.ErrorInvalidValue, "handle %#x is an allocation, not a multicast object", uint64(h))
	}
	return hd.mc, nil
}

func (n *Node) anyMulticast() bool {
	for d := 0; d < n.cfg.Devices; d++ {
		if n.multicastSupported(cuda.Device(d)) {
			return true
		}
	}
	return false
}

// checkMulticastProp checks what cuMulticastGetGranularity and
// cuMulticastCreate check first: multicast on the node, and prop.
func (c *call) checkMulticastProp(prop *cuda.MulticastProp) error {
	n := c.n
	if !n.anyMulticast() {
		return c.errf(cuda.ErrorNotSupported, "multicast is not supported on this node")
	}
	if prop == nil {
		return c.errf(cuda.ErrorInvalidValue, "prop is NULL")
	}
	if prop.NumDevices == 0 || int(prop.NumDevices) > n.cfg.Devices {
		return c.errf(cuda.ErrorInvalidValue, "numDevices %d: must be in [1, %d]", prop.NumDevices, n.cfg.Devices)
	}
	return nil
}

// MulticastGetGranularity is cuMulticastGetGranularity.
func (n *Node) MulticastGetGranularity(prop *cuda.MulticastProp, option cuda.GranularityFlags) (uint64, error) {
	return get(n.call("cuMulticastGetGranularity", -1, uint64(option), 0, 0), func(c *call) (uint64, error) {
		if err := c.checkMulticastProp(prop); err != nil {
			return 0, err
		}
		return c.granularity(option, n.cfg.MulticastGranularityMin, n.cfg.MulticastGranularityRecommended)
	})
}

// MulticastCreate is cuMulticastCreate. The simulator does not look at
// NCCL_NVLS_ENABLE (the real binding and package team do).
func (n *Node) MulticastCreate(prop *cuda.MulticastProp) (cuda.MemHandle, error) {
	var size uint64
	if prop != nil {
		size = prop.Size
	}
	return get(n.call("cuMulticastCreate", -1, 0, 0, size), func(c *call) (cuda.MemHandle, error) {
		if err := c.checkMulticastProp(prop); err != nil {
			return 0, err
		}
		g := n.cfg.MulticastGranularityMin
		if prop.Size == 0 || prop.Size%g != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "size %d is not a non-zero multiple of the multicast granularity %d", prop.Size, g)
		}
		if prop.HandleTypes>>31 != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "handle types %#x are not valid", prop.HandleTypes)
		}
		if err := n.checkCreateHandleTypes(c.op, cuda.HandleType(prop.HandleTypes)); err != nil {
			return 0, err
		}
		if prop.Flags != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "flags %#x: must be 0", prop.Flags)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.mcLive >= n.cfg.MaxMulticastObjects {
			return 0, c.errf(cuda.ErrorOutOfMemory, "the node's %d multicast objects are all in use", n.cfg.MaxMulticastObjects)
		}
		o := &mcObject{id: n.newID(), prop: *prop, size: prop.Size, refs: 1, allAdded: make(chan struct{})}
		n.mcLive++
		hd := &handle{id: cuda.MemHandle(n.newID()), mc: o, userRefs: 1}
		n.handles[hd.id] = hd
		return hd.id, nil
	})
}

// MulticastAddDevice is cuMulticastAddDevice.
func (n *Node) MulticastAddDevice(mc cuda.MemHandle, d cuda.Device) error {
	return n.call("cuMulticastAddDevice", int(d), uint64(mc), 0, 0).do(func(c *call) error {
		if err := c.checkDevice(d); err != nil {
			return err
		}
		if !n.multicastSupported(d) {
			return c.errf(cuda.ErrorNotSupported, "device %d does not support multicast", d)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		o, err := n.mcHandleLocked(c.op, mc)
		if err != nil {
			return err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.everBound {
			return c.errf(cuda.ErrorInvalidValue, "memory was already bound to multicast object %#x: devices must all be added before any bind", o.id)
		}
		if o.hasDevice(d) {
			return c.errf(cuda.ErrorInvalidValue, "device %d was already added to multicast object %#x", d, o.id)
		}
		if len(o.devices) >= int(o.prop.NumDevices) {
			return c.errf(cuda.ErrorInvalidValue, "multicast object %#x already has its numDevices=%d devices", o.id, o.prop.NumDevices)
		}
		if x, ok := n.otherClique(o.devices, d); ok && !n.cfg.CliqueAtMap {
			return c.errf(cuda.ErrorInvalidDevice, "device %d (NVLink clique %d) does not belong to the clique of device %d (clique %d), already added to multicast object %#x", d, n.clique[d], x, n.clique[x], o.id)
		}
		o.devices = append(o.devices, d)
		if len(o.devices) == int(o.prop.NumDevices) {
			close(o.allAdded)
		}
		return nil
	})
}

// otherClique returns a device of devs that is not in d's NVLink clique.
func (n *Node) otherClique(devs []cuda.Device, d cuda.Device) (cuda.Device, bool) {
	for _, x := range devs {
		if n.clique[x] != n.clique[d] {
			return x, true
		}
	}
	return 0, false
}

// awaitAllAdded waits, as the driver does in a bind or a mapping of a
// multicast object, until every device of o was added; the simulator
// gives up after Config.MulticastWait (CUDA_ERROR_TIMEOUT) or when the
// node is closed. The caller holds no lock.
func (c *call) awaitAllAdded(o *mcObject) error {
	select {
	case <-o.allAdded:
		return nil
	default:
	}
	t := time.NewTimer(c.n.cfg.MulticastWait)
	defer t.Stop()
	select {
	case <-o.allAdded:
		return nil
	case <-c.n.done:
		return c.errf(cuda.ErrorDeinitialized, "the node was closed while the call waited for every device of multicast object %#x to be added", o.id)
	case <-t.C:
		o.mu.RLock()
		added := len(o.devices)
		o.mu.RUnlock()
		return c.errf(cuda.ErrorTimeout, "multicast object %#x still has %d of its %d devices added after %v: the driver waits until every device is added (cuMulticastAddDevice); the simulator gives up after Config.MulticastWait", o.id, added, o.prop.NumDevices, c.n.cfg.MulticastWait)
	}
}

// mcAwait resolves the multicast handle h and waits until every device of
// its object was added (awaitAllAdded). Callers resolve h again under
// n.mu afterwards: it may have been released while the call waited.
func (c *call) mcAwait(h cuda.MemHandle) error {
	n := c.n
	n.mu.Lock()
	o, err := n.mcHandleLocked(c.op, h)
	n.mu.Unlock()
	if err != nil {
		return err
	}
	return c.awaitAllAdded(o)
}

// bindLocked binds size bytes of alloc at memOff to o at mcOff.
func (n *Node) bindLocked(op string, o *mcObject, mcOff uint64, a *physAlloc, memOff, size uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	g := n.cfg.MulticastGranularityMin
	if size == 0 || size%g != 0 || mcOff%g != 0 || memOff%g != 0 {
		return errf(op, cuda.ErrorInvalidValue, "mcOffset %d, memOffset %d and size %d must be multiples of the multicast granularity %d (size non-zero)", mcOff, memOff, size, g)
	}
	if mcOff+size > o.size || mcOff+size < mcOff {
		return errf(op, cuda.ErrorInvalidValue, "mcOffset %d + size %d exceeds the multicast object's size %d", mcOff, size, o.size)
	}
	if memOff+size > a.size || memOff+size < memOff {
		return errf(op, cuda.ErrorInvalidValue, "memOffset %d + size %d exceeds the allocation's size %d", memOff, size, a.size)
	}
	if !o.hasDevice(a.dev) {
		return errf(op, cuda.ErrorInvalidDevice, "the memory is on device %d, which was not added to multicast object %#x", a.dev, o.id)
	}
	for _, b := range o.binds {
		if b.dev == a.dev && mcOff < b.mcOff+b.size && b.mcOff < mcOff+size {
			return errf(op, cuda.ErrorInvalidValue, "[%d, +%d) overlaps device %d's bind to multicast object %#x at [%d, +%d)", mcOff, size, a.dev, o.id, b.mcOff, b.size)
		}
	}
	o.binds = append(o.binds, &mcBind{dev: a.dev, mcOff: mcOff, size: size, alloc: a, memOff: memOff})
	o.everBound = true
	a.refs++
	return nil
}

// MulticastBindMem is cuMulticastBindMem.
func (n *Node) MulticastBindMem(mc cuda.MemHandle, mcOffset uint64, mem cuda.MemHandle, memOffset, size uint64) error {
	return n.call("cuMulticastBindMem", -1, uint64(mc), mcOffset, size).do(func(c *call) error {
		if err := c.mcAwait(mc); err != nil {
			return err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		o, err := n.mcHandleLocked(c.op, mc)
		if err != nil {
			return err
		}
		hd, err := n.userHandleLocked(c.op, mem)
		if err != nil {
			return err
		}
		if hd.alloc == nil {
			return c.errf(cuda.ErrorInvalidValue, "handle %#x is a multicast object, not memory", uint64(mem))
		}
		c.device(hd.alloc.dev)
		return n.bindLocked(c.op, o, mcOffset, hd.alloc, memOffset, size)
	})
}

// MulticastBindAddr is cuMulticastBindAddr: the memory mapped at p (one
// mapping) is bound.
func (n *Node) MulticastBindAddr(mc cuda.MemHandle, mcOffset uint64, p cuda.DevicePtr, size uint64) error {
	return n.call("cuMulticastBindAddr", -1, uint64(mc), uint64(p), size).do(func(c *call) error {
		if err := c.mcAwait(mc); err != nil {
			return err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		o, err := n.mcHandleLocked(c.op, mc)
		if err != nil {
			return err
		}
		_, m := n.lookupLocked(uint64(p))
		if m == nil || m.alloc == nil || m.all {
			return c.errf(cuda.ErrorInvalidValue, "%#x is not in a cuMemMap mapping of device memory", uint64(p))
		}
		if uint64(p)+size > m.end() {
			return c.errf(cuda.ErrorInvalidValue, "[%#x, %#x) goes past the mapping's end %#x", uint64(p), uint64(p)+size, m.end())
		}
		c.device(m.alloc.dev)
		return n.bindLocked(c.op, o, mcOffset, m.alloc, m.off+uint64(p)-m.start, size)
	})
}

// MulticastUnbind is cuMulticastUnbind: offset and size must be those of
// one of device d's binds (the driver leaves other values undefined; the
// simulator refuses them).
func (n *Node) MulticastUnbind(mc cuda.MemHandle, d cuda.Device, mcOffset, size uint64) error {
	return n.call("cuMulticastUnbind", int(d), uint64(mc), mcOffset, size).do(func(c *call) error {
		if err := c.checkDevice(d); err != nil {
			return err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		o, err := n.mcHandleLocked(c.op, mc)
		if err != nil {
			return err
		}
		o.mu.Lock()
		k := -1
		var near *mcBind
		for j, b := range o.binds {
			if b.dev != d {
				continue
			}
			if b.mcOff == mcOffset && b.size == size {
				k = j
				break
			}
			if mcOffset < b.mcOff+b.size && b.mcOff < mcOffset+size {
				near = b
			}
		}
		if k < 0 {
			o.mu.Unlock()
			if near != nil {
				return c.errf(cuda.ErrorInvalidValue, "unbind of [%d, +%d) does not match device %d's bind of [%d, +%d)", mcOffset, size, d, near.mcOff, near.size)
			}
			return c.errf(cuda.ErrorInvalidValue, "device %d has no memory bound to multicast object %#x at [%d, +%d)", d, o.id, mcOffset, size)
		}
		found := o.binds[k]
		o.binds = append(o.binds[:k], o.binds[k+1:]...)
		o.mu.Unlock()
		n.allocUnrefLocked(found.alloc)
		return nil
	})
}
