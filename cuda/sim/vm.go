package sim

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/nvls-go/nvls/cuda"
)

// vaBase is where the simulated virtual address space starts.
const vaBase uint64 = 0x7f00_0000_0000

// vaLimit is the end of the simulated virtual address space (48 bits).
const vaLimit uint64 = 1 << 48

// chunkSize is the unit in which backing store is allocated (lazily, on
// the first write).
const chunkSize = 256 << 10

type reservation struct {
	start, size uint64
	internal    bool // made by cuMemAlloc, not by cuMemAddressReserve
}

func (r *reservation) end() uint64 { return r.start + r.size }

// physAlloc is physical memory: a cuMemCreate allocation (or the memory
// behind a cuMemAlloc). Its contents are guarded by mu; refs by Node.mu.
type physAlloc struct {
	id   uint64
	dev  cuda.Device
	size uint64
	prop cuda.AllocationProp
	// refs counts the live handles to it, its mappings, its multicast
	// binds and the open exported file descriptors.
	refs int

	mu     sync.RWMutex
	chunks [][]byte
	freed  bool
	// host backs a cuMemHostAlloc allocation instead of chunks: the
	// caller's memory, accessed a word at a time with atomics (host.go),
	// so that the host may read it while kernels write it.
	host []uint64
}

func newPhysAlloc(id uint64, dev cuda.Device, size uint64) *physAlloc {
	return &physAlloc{id: id, dev: dev, size: size, chunks: make([][]byte, (size+chunkSize-1)/chunkSize)}
}

// read copies len(dst) bytes at off into dst (never-written memory reads
// as zero).
func (a *physAlloc) read(off uint64, dst []byte) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	a.readLocked(off, dst)
}

func (a *physAlloc) readLocked(off uint64, dst []byte) {
	if a.host != nil {
		a.hostRead(off, dst)
		return
	}
	for len(dst) > 0 {
		ci, co := off/chunkSize, off%chunkSize
		k := uint64(len(dst))
		if k > chunkSize-co {
			k = chunkSize - co
		}
		if int(ci) < len(a.chunks) && a.chunks[ci] != nil {
			copy(dst[:k], a.chunks[ci][co:])
		} else {
			clear(dst[:k])
		}
		dst = dst[k:]
		off += k
	}
}

func (a *physAlloc) write(off uint64, src []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writeLocked(off, src)
}

func (a *physAlloc) writeLocked(off uint64, src []byte) {
	if a.host != nil {
		if !a.freed {
			a.hostWrite(off, src)
		}
		return
	}
	for len(src) > 0 {
		ci, co := off/chunkSize, off%chunkSize
		k := uint64(len(src))
		if k > chunkSize-co {
			k = chunkSize - co
		}
		if a.freed || int(ci) >= len(a.chunks) {
			return
		}
		if a.chunks[ci] == nil {
			a.chunks[ci] = make([]byte, chunkSize)
		}
		copy(a.chunks[ci][co:], src[:k])
		src = src[k:]
		off += k
	}
}

// fill sets n bytes at off to the repeating pattern pat (len 1 or 4,
// off aligned to len(pat)).
func (a *physAlloc) fill(off, n uint64, pat []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.freed {
		return
	}
	zero := true
	for _, b := range pat {
		zero = zero && b == 0
	}
	if zero && a.host == nil {
		// A zero fill of untouched chunks needs no backing store.
		for n > 0 {
			ci, co := off/chunkSize, off%chunkSize
			k := min(n, chunkSize-co)
			if c := a.chunks[ci]; c != nil {
				clear(c[co : co+k])
			}
			n -= k
			off += k
		}
		return
	}
	buf := make([]byte, min(n, chunkSize))
	for i := 0; i < len(buf); i += len(pat) {
		copy(buf[i:], pat)
	}
	for n > 0 {
		// off is aligned to len(pat) and chunkSize is a multiple of it, so
		// the pattern's phase is the same at every piece.
		k := min(n, chunkSize-off%chunkSize, uint64(len(buf)))
		a.writeLocked(off, buf[:k])
		n -= k
		off += k
	}
}

// handle is a CUmemGenericAllocationHandle: a physical allocation or a
// multicast object.
type handle struct {
	id    cuda.MemHandle
	alloc *physAlloc
	mc    *mcObject
	// userRefs counts cuMemCreate/import/retain minus cuMemRelease;
	// mapRefs counts mappings made with the handle. The handle lives
	// while either is non-zero; only userRefs > 0 lets the caller use it.
	userRefs, mapRefs int
	// imported: made by cuMemImportFromShareableHandle. Such a handle has
	// no requested handle types (the driver reports none and refuses to
	// export it again).
	imported bool
}

// handleTypes are the shareable handle types h may be exported as.
func (h *handle) handleTypes() cuda.HandleType {
	switch {
	case h.imported:
		return cuda.HandleNone
	case h.alloc != nil:
		return h.alloc.prop.RequestedHandleTypes
	}
	return cuda.HandleType(h.mc.prop.HandleTypes)
}

// mapping is a mapped range of the virtual address space.
type mapping struct {
	start, size uint64
	h           *handle
	alloc       *physAlloc // physical memory mapped, or nil
	off         uint64     // offset into alloc or mc
	mc          *mcObject  // multicast object mapped, or nil
	// access holds the per-device access flags (cuMemSetAccess).
	access []atomic.Int32
	// all: accessible to every device and the host (cuMemAlloc and
	// managed memory).
	all bool
}

func (m *mapping) end() uint64 { return m.start + m.size }

// memAllocation is a cuMemAlloc / cuMemAllocManaged allocation.
type memAllocation struct {
	ctx     *context
	res     *reservation
	m       *mapping
	alloc   *physAlloc
	managed bool
}

func (n *Node) publishLocked() {
	s := append([]*mapping(nil), n.mappings...)
	n.snap.Store(&s)
}

// lookup finds the mapping holding addr in the published snapshot.
func (n *Node) lookup(addr uint64) *mapping {
	s := *n.snap.Load()
	i := sort.Search(len(s), func(i int) bool { return s[i].start > addr })
	if i == 0 {
		return nil
	}
	m := s[i-1]
	if addr >= m.end() {
		return nil
	}
	return m
}

// lookupLocked finds the mapping holding addr (caller holds n.mu).
func (n *Node) lookupLocked(addr uint64) (int, *mapping) {
	s := n.mappings
	i := sort.Search(len(s), func(i int) bool { return s[i].start > addr })
	if i == 0 || addr >= s[i-1].end() {
		return -1, nil
	}
	return i - 1, s[i-1]
}

func (n *Node) insertMappingLocked(m *mapping) {
	i := sort.Search(len(n.mappings), func(i int) bool { return n.mappings[i].start > m.start })
	n.mappings = append(n.mappings, nil)
	copy(n.mappings[i+1:], n.mappings[i:])
	n.mappings[i] = m
	n.publishLocked()
}

func (n *Node) removeMappingLocked(m *mapping) {
	for i, x := range n.mappings {
		if x == m {
			n.mappings = append(n.mappings[:i], n.mappings[i+1:]...)
			break
		}
	}
	n.publishLocked()
	if m.h != nil {
		m.h.mapRefs--
		n.handleUnrefLocked(m.h)
	}
	if m.alloc != nil {
		n.allocUnrefLocked(m.alloc)
	}
}

// handleUnrefLocked drops a dead handle and its reference on its object.
func (n *Node) handleUnrefLocked(h *handle) {
	if h.userRefs+h.mapRefs > 0 {
		return
	}
	delete(n.handles, h.id)
	if h.alloc != nil {
		n.allocUnrefLocked(h.alloc)
	} else if h.mc != nil {
		n.mcUnrefLocked(h.mc)
	}
}

func (n *Node) allocUnrefLocked(a *physAlloc) {
	a.refs--
	if a.refs > 0 {
		return
	}
	if a.host == nil {
		delete(n.allocs, a.id)
		n.used[a.dev] -= a.size
	}
	a.mu.Lock()
	a.chunks = nil
	a.freed = true
	a.mu.Unlock()
}

func (n *Node) overlapsReservationLocked(start, size uint64) bool {
	for _, r := range n.reservations {
		if start < r.end() && r.start < start+size {
			return true
		}
	}
	return false
}

// reserveLocked picks and records a free aligned range.
func (n *Node) reserveLocked(size, align, hint uint64, internal bool) (*reservation, bool) {
	var start uint64
	if hint != 0 && hint%align == 0 && hint >= vaBase && hint+size <= vaLimit && hint+size > hint && !n.overlapsReservationLocked(hint, size) {
		start = hint
	} else {
		start = alignUp(n.nextVA, align)
		for {
			if start+size > vaLimit || start+size < start {
				return nil, false
			}
			moved := false
			for _, r := range n.reservations {
				if start < r.end() && r.start < start+size {
					start = alignUp(r.end(), align)
					moved = true
				}
			}
			if !moved {
				break
			}
		}
		n.nextVA = start + size
	}
	r := &reservation{start: start, size: size, internal: internal}
	i := sort.Search(len(n.reservations), func(i int) bool { return n.reservations[i].start > start })
	n.reservations = append(n.reservations, nil)
	copy(n.reservations[i+1:], n.reservations[i:])
	n.reservations[i] = r
	return r, true
}

func (n *Node) dropReservationLocked(r *reservation) {
	for i, x := range n.reservations {
		if x == r {
			n.reservations = append(n.reservations[:i], n.reservations[i+1:]...)
			return
		}
	}
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

func isPow2(v uint64) bool { return v != 0 && v&(v-1) == 0 }

// MemGetAllocationGranularity is cuMemGetAllocationGranularity. Like the
// driver (580.159.04, internal/simdiff), it does not check that the
// location's id is a device: the answer is the node's granularity.
func (n *Node) MemGetAllocationGranularity(prop *cuda.AllocationProp, option cuda.GranularityFlags) (uint64, error) {
	return get(n.call("cuMemGetAllocationGranularity", propDevice(prop), uint64(option), 0, 0), func(c *call) (uint64, error) {
		if err := c.checkAllocPropKind(prop); err != nil {
			return 0, err
		}
		return c.granularity(option, n.cfg.AllocGranularityMin, n.cfg.AllocGranularityRecommended)
	})
}

// granularity answers a granularity query: min or rec by option.
func (c *call) granularity(option cuda.GranularityFlags, min, rec uint64) (uint64, error) {
	switch option {
	case cuda.GranularityMinimum:
		return min, nil
	case cuda.GranularityRecommended:
		return rec, nil
	}
	return 0, c.errf(cuda.ErrorInvalidValue, "granularity option %d is neither minimum (0) nor recommended (1)", option)
}

// propDevice is the device allocation properties name, for the call log
// (-1 without properties).
func propDevice(prop *cuda.AllocationProp) int {
	if prop == nil {
		return -1
	}
	return int(prop.Location.ID)
}

// checkAllocPropKind checks what cuMemGetAllocationGranularity and
// cuMemCreate check first: the VMM API on the node, and the kind of
// allocation and location prop asks for.
func (c *call) checkAllocPropKind(prop *cuda.AllocationProp) error {
	switch {
	case c.n.cfg.NoVMM:
		return c.errf(cuda.ErrorNotSupported, "virtual memory management is not supported on this node")
	case prop == nil:
		return c.errf(cuda.ErrorInvalidValue, "prop is NULL")
	case prop.Type != cuda.AllocationPinned:
		return c.errf(cuda.ErrorInvalidValue, "allocation type %d: only CU_MEM_ALLOCATION_TYPE_PINNED (1) is supported", prop.Type)
	case prop.Location.Type != cuda.LocationDevice:
		return c.errf(cuda.ErrorInvalidValue, "location type %d: only CU_MEM_LOCATION_TYPE_DEVICE (1) is supported", prop.Location.Type)
	}
	return nil
}

// checkAllocProp is checkAllocPropKind, and the location must be a device
// of the node (cuMemCreate).
func (c *call) checkAllocProp(prop *cuda.AllocationProp) error {
	if err := c.checkAllocPropKind(prop); err != nil {
		return err
	}
	if !c.n.validDevice(cuda.Device(prop.Location.ID)) {
		return c.errf(cuda.ErrorInvalidDevice, "location id %d is not a device of this node", prop.Location.ID)
	}
	return nil
}

// checkCreateHandleTypes is checkHandleTypes for an object being created:
// fabric handles may also be supported but not permitted.
func (n *Node) checkCreateHandleTypes(op string, t cuda.HandleType) error {
	if err := n.checkHandleTypes(op, t); err != nil {
		return err
	}
	if t&cuda.HandleFabric != 0 && n.cfg.FabricNotPermitted {
		return errf(op, cuda.ErrorNotPermitted, "memory exportable as fabric handles is not permitted here (no IMEX channel for this process)")
	}
	return nil
}

// checkHandleTypes says whether the node supports every requested type.
func (n *Node) checkHandleTypes(op string, t cuda.HandleType) error {
	if t&^(cuda.HandlePosixFD|cuda.HandleFabric) != 0 {
		return errf(op, cuda.ErrorNotSupported, "handle types %v: only POSIX FD and fabric handles exist on Linux", t)
	}
	if t&cuda.HandlePosixFD != 0 && n.cfg.NoPosixFD {
		return errf(op, cuda.ErrorNotSupported, "POSIX file descriptor handles are not supported on this node")
	}
	if t&cuda.HandleFabric != 0 && !n.cfg.Fabric {
		return errf(op, cuda.ErrorNotSupported, "fabric handles are not supported on this node")
	}
	return nil
}

// MemCreate is cuMemCreate.
func (n *Node) MemCreate(size uint64, prop *cuda.AllocationProp) (cuda.MemHandle, error) {
	return get(n.call("cuMemCreate", propDevice(prop), 0, 0, size), func(c *call) (cuda.MemHandle, error) {
		if err := c.checkAllocProp(prop); err != nil {
			return 0, err
		}
		if err := n.checkCreateHandleTypes(c.op, prop.RequestedHandleTypes); err != nil {
			return 0, err
		}
		if size == 0 || size%n.cfg.AllocGranularityMin != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "size %d is not a non-zero multiple of the allocation granularity %d", size, n.cfg.AllocGranularityMin)
		}
		p := *prop
		if p.Flags.CompressionType != cuda.CompressionNone && !n.cfg.Compression {
			p.Flags.CompressionType = cuda.CompressionNone
		}
		d := cuda.Device(prop.Location.ID)
		n.mu.Lock()
		defer n.mu.Unlock()
		n.sweepExportsLocked()
		if n.used[d]+size > n.cfg.MemoryPerDevice {
			return 0, c.errf(cuda.ErrorOutOfMemory, "device %d: %d bytes requested, %d of %d in use", d, size, n.used[d], n.cfg.MemoryPerDevice)
		}
		a := newPhysAlloc(n.newID(), d, size)
		a.prop = p
		a.refs = 1
		n.allocs[a.id] = a
		n.used[d] += size
		hd := &handle{id: cuda.MemHandle(n.newID()), alloc: a, userRefs: 1}
		n.handles[hd.id] = hd
		return hd.id, nil
	})
}

// userHandleLocked returns a handle the caller may use (not released).
func (n *Node) userHandleLocked(op string, h cuda.MemHandle) (*handle, error) {
	hd := n.handles[h]
	if hd == nil || hd.userRefs == 0 {
		return nil, errf(op, cuda.ErrorInvalidValue, "handle %#x is not a live allocation or multicast handle (released or never created)", uint64(h))
	}
	return hd, nil
}

// MemRelease is cuMemRelease. It drops the caller's reference: memory
// still mapped (or bound) stays until the last mapping goes, as with the
// driver. Releasing a handle more often than it was created, imported or
// retained fails with CUDA_ERROR_INVALID_VALUE.
func (n *Node) MemRelease(h cuda.MemHandle) error {
	return n.call("cuMemRelease", -1, uint64(h), 0, 0).do(func(c *call) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		hd, err := n.userHandleLocked(c.op, h)
		if err != nil {
			return err
		}
		if hd.alloc != nil {
			c.device(hd.alloc.dev)
		}
		hd.userRefs--
		n.handleUnrefLocked(hd)
		return nil
	})
}

// MemAddressReserve is cuMemAddressReserve. A hint that is not a multiple
// of the alignment is refused with CUDA_ERROR_INVALID_VALUE, as by the
// driver (580.159.04, internal/simdiff); an aligned hint is honoured when
// the range there is free, else another address is chosen.
func (n *Node) MemAddressReserve(size, align uint64, addr cuda.DevicePtr) (cuda.DevicePtr, error) {
	return get(n.call("cuMemAddressReserve", -1, align, uint64(addr), size), func(c *call) (cuda.DevicePtr, error) {
		if n.cfg.NoVMM {
			return 0, c.errf(cuda.ErrorNotSupported, "virtual memory management is not supported on this node")
		}
		g := n.cfg.AllocGranularityMin
		if size == 0 || size%g != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "size %d is not a non-zero multiple of the allocation granularity %d", size, g)
		}
		if align != 0 && !isPow2(align) {
			return 0, c.errf(cuda.ErrorInvalidValue, "alignment %d is not a power of two", align)
		}
		align = max(align, g)
		if addr%cuda.DevicePtr(align) != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "hint %#x is not a multiple of the alignment %d", uint64(addr), align)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		r, ok := n.reserveLocked(size, align, uint64(addr), false)
		if !ok {
			return 0, c.errf(cuda.ErrorOutOfMemory, "no free virtual range of %d bytes", size)
		}
		return cuda.DevicePtr(r.start), nil
	})
}

// MemAddressFree is cuMemAddressFree: p and size must be those of a
// reservation (cuMemAddressReserve's answer and size) with nothing mapped
// in it. The documentation names no rule for mappings left in the range;
// the driver refuses them with CUDA_ERROR_INVALID_VALUE (580.159.04,
// internal/simdiff), and so does the simulator.
func (n *Node) MemAddressFree(p cuda.DevicePtr, size uint64) error {
	return n.call("cuMemAddressFree", -1, 0, uint64(p), size).do(func(c *call) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		var r *reservation
		for _, x := range n.reservations {
			if x.start == uint64(p) && !x.internal {
				r = x
			}
		}
		if r == nil {
			return c.errf(cuda.ErrorInvalidValue, "%#x is not the start of a range reserved with cuMemAddressReserve", uint64(p))
		}
		if r.size != size {
			return c.errf(cuda.ErrorInvalidValue, "size %d does not match the reservation's size %d at %#x", size, r.size, uint64(p))
		}
		for _, m := range n.mappings {
			if m.start < r.end() && r.start < m.end() {
				return c.errf(cuda.ErrorInvalidValue, "range [%#x, %#x) still has a mapping at %#x (size %d): cuMemUnmap it first", r.start, r.end(), m.start, m.size)
			}
		}
		n.dropReservationLocked(r)
		return nil
	})
}

// MemMap is cuMemMap: it maps the whole allocation or multicast object h
// at p (offset 0, size the object's, as the driver requires).
func (n *Node) MemMap(p cuda.DevicePtr, size, offset uint64, h cuda.MemHandle) error {
	return n.call("cuMemMap", -1, uint64(h), uint64(p), size).do(func(c *call) error {
		n.mu.Lock()
		hd, err := n.userHandleLocked(c.op, h)
		if err == nil && hd.mc != nil {
			// A multicast object is mapped once every device was added:
			// wait for that without the lock, then look again.
			n.mu.Unlock()
			if err := c.awaitAllAdded(hd.mc); err != nil {
				return err
			}
			n.mu.Lock()
			hd, err = n.userHandleLocked(c.op, h)
		}
		defer n.mu.Unlock()
		if err != nil {
			return err
		}
		g := n.cfg.AllocGranularityMin
		objSize := uint64(0)
		if hd.alloc != nil {
			c.device(hd.alloc.dev)
			objSize = hd.alloc.size
		} else {
			g = n.cfg.MulticastGranularityMin
			objSize = hd.mc.size
			hd.mc.mu.RLock()
			devs := hd.mc.devices
			hd.mc.mu.RUnlock()
			for _, d := range devs {
				if x, ok := n.otherClique(devs, d); ok {
					return c.errf(cuda.ErrorInvalidDevice, "the devices of multicast object %#x are in different NVLink cliques (device %d in clique %d, device %d in clique %d)", uint64(h), d, n.clique[d], x, n.clique[x])
				}
			}
		}
		// The driver maps only whole objects: it refuses an offset (its
		// documentation says it must currently be 0) or a size other than
		// the object's with CUDA_ERROR_NOT_SUPPORTED, before it looks at
		// the address (580.159.04 on an H100, internal/simdiff).
		if offset != 0 {
			return c.errf(cuda.ErrorNotSupported, "offset %d into the object: it must currently be 0", offset)
		}
		if size != objSize {
			return c.errf(cuda.ErrorNotSupported, "size %d is not the object's size %d: only whole objects are mapped", size, objSize)
		}
		start := uint64(p)
		if start%g != 0 {
			return c.errf(cuda.ErrorInvalidValue, "address %#x is not a multiple of the granularity %d", start, g)
		}
		inside := false
		for _, r := range n.reservations {
			if !r.internal && start >= r.start && start+size <= r.end() {
				inside = true
			}
		}
		if !inside {
			return c.errf(cuda.ErrorInvalidValue, "range [%#x, %#x) is not inside one range reserved with cuMemAddressReserve", start, start+size)
		}
		for _, m := range n.mappings {
			if start < m.end() && m.start < start+size {
				return c.errf(cuda.ErrorInvalidValue, "range [%#x, %#x) overlaps the mapping at [%#x, %#x)", start, start+size, m.start, m.end())
			}
		}
		m := &mapping{start: start, size: size, h: hd, off: offset, access: make([]atomic.Int32, n.cfg.Devices)}
		hd.mapRefs++
		if hd.alloc != nil {
			m.alloc = hd.alloc
			hd.alloc.refs++
		} else {
			m.mc = hd.mc
		}
		n.insertMappingLocked(m)
		return nil
	})
}

// mappingsCoveringLocked returns the mappings that exactly tile
// [start, start+size), or nil.
func (n *Node) mappingsCoveringLocked(start, size uint64) []*mapping {
	k, m := n.lookupLocked(start)
	if m == nil || m.start != start {
		return nil
	}
	var out []*mapping
	at := start
	for ; k < len(n.mappings) && at < start+size; k++ {
		m := n.mappings[k]
		if m.start != at {
			return nil
		}
		out = append(out, m)
		at = m.end()
	}
	if at != start+size {
		return nil
	}
	return out
}

// MemUnmap is cuMemUnmap: the range must be exactly one or more whole
// mappings.
func (n *Node) MemUnmap(p cuda.DevicePtr, size uint64) error {
	return n.call("cuMemUnmap", -1, 0, uint64(p), size).do(func(c *call) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		ms := n.mappingsCoveringLocked(uint64(p), size)
		if ms == nil || ms[0].all {
			return c.errf(cuda.ErrorInvalidValue, "range [%#x, %#x) is not exactly a set of whole cuMemMap mappings", uint64(p), uint64(p)+size)
		}
		for _, m := range ms {
			if m.all {
				return c.errf(cuda.ErrorInvalidValue, "range [%#x, %#x) holds cuMemAlloc memory", uint64(p), uint64(p)+size)
			}
		}
		for _, m := range ms {
			n.removeMappingLocked(m)
		}
		return nil
	})
}

// MemSetAccess is cuMemSetAccess. The range must be mapped, and made of
// whole mappings (the simulator keeps access per mapping). As from the
// driver (580.159.04, internal/simdiff): a location id that is no device
// is CUDA_ERROR_INVALID_VALUE; the host may be given no access (which
// changes nothing), and asking more for it is CUDA_ERROR_NOT_SUPPORTED.
func (n *Node) MemSetAccess(p cuda.DevicePtr, size uint64, desc []cuda.AccessDesc) error {
	return n.call("cuMemSetAccess", -1, uint64(len(desc)), uint64(p), size).do(func(c *call) error {
		if len(desc) == 0 {
			return c.errf(cuda.ErrorInvalidValue, "no access descriptors")
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		ms := n.mappingsCoveringLocked(uint64(p), size)
		if ms == nil {
			return c.errf(cuda.ErrorInvalidValue, "range [%#x, %#x) is not fully mapped by whole mappings", uint64(p), uint64(p)+size)
		}
		for _, d := range desc {
			switch d.Flags {
			case cuda.AccessNone, cuda.AccessRead, cuda.AccessReadWrite:
			default:
				return c.errf(cuda.ErrorInvalidValue, "access flags %d are not valid", d.Flags)
			}
			switch d.Location.Type {
			case cuda.LocationDevice:
			case cuda.LocationHost:
				if d.Flags != cuda.AccessNone {
					return c.errf(cuda.ErrorNotSupported, "the host cannot be given %v access to device memory", d.Flags)
				}
				continue
			default:
				return c.errf(cuda.ErrorInvalidValue, "location type %d: only devices (and the host, for no access) can be named", d.Location.Type)
			}
			dev := cuda.Device(d.Location.ID)
			if !n.validDevice(dev) {
				return c.errf(cuda.ErrorInvalidValue, "location id %d is not a device of this node", d.Location.ID)
			}
			for _, m := range ms {
				if m.all {
					return c.errf(cuda.ErrorInvalidValue, "range [%#x, %#x) holds cuMemAlloc memory", uint64(p), uint64(p)+size)
				}
				if m.alloc != nil && d.Flags != cuda.AccessNone && !n.peerOK(dev, m.alloc.dev) {
					return c.errf(cuda.ErrorInvalidDevice, "device %d cannot access the memory of device %d (no peer access between them)", dev, m.alloc.dev)
				}
			}
		}
		for _, d := range desc {
			if d.Location.Type != cuda.LocationDevice {
				continue
			}
			for _, m := range ms {
				m.access[d.Location.ID].Store(int32(d.Flags))
			}
		}
		return nil
	})
}

// MemGetAccess is cuMemGetAccess: the rights cuMemSetAccess gave loc to
// the mapping at p. Memory no cuMemMap mapped (cuMemAlloc, managed and
// mapped host memory) has none to report: the driver answers success with
// no access, though every device may reach it (580.159.04, internal/simdiff:
// the start of 3 cuMemAlloc and 2 managed allocations).
func (n *Node) MemGetAccess(loc cuda.MemLocation, p cuda.DevicePtr) (cuda.AccessFlags, error) {
	return get(n.call("cuMemGetAccess", int(loc.ID), 0, uint64(p), 0), func(c *call) (cuda.AccessFlags, error) {
		if loc.Type != cuda.LocationDevice || !n.validDevice(cuda.Device(loc.ID)) {
			return 0, c.errf(cuda.ErrorInvalidDevice, "location {type %d, id %d} is not a device of this node", loc.Type, loc.ID)
		}
		m := n.lookup(uint64(p))
		if m == nil {
			return 0, c.errf(cuda.ErrorInvalidValue, "%#x is not mapped", uint64(p))
		}
		if m.all {
			return cuda.AccessNone, nil
		}
		return cuda.AccessFlags(m.access[loc.ID].Load()), nil
	})
}

// MemGetAllocationPropertiesFromHandle is
// cuMemGetAllocationPropertiesFromHandle. A compression request the node
// does not support reads back as none, as it does from the driver; so do
// the requested handle types of an imported handle (580.159.04,
// internal/simdiff).
func (n *Node) MemGetAllocationPropertiesFromHandle(h cuda.MemHandle) (cuda.AllocationProp, error) {
	return get(n.call("cuMemGetAllocationPropertiesFromHandle", -1, uint64(h), 0, 0), func(c *call) (cuda.AllocationProp, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		hd, err := n.userHandleLocked(c.op, h)
		if err != nil {
			return cuda.AllocationProp{}, err
		}
		if hd.alloc == nil {
			return cuda.AllocationProp{}, c.errf(cuda.ErrorInvalidValue, "handle %#x is a multicast object, not an allocation", uint64(h))
		}
		p := hd.alloc.prop
		p.RequestedHandleTypes = hd.handleTypes()
		return p, nil
	})
}

// MemRetainAllocationHandle is cuMemRetainAllocationHandle: it returns
// the handle mapped at p with one more reference (release it with
// MemRelease).
func (n *Node) MemRetainAllocationHandle(p cuda.DevicePtr) (cuda.MemHandle, error) {
	return get(n.call("cuMemRetainAllocationHandle", -1, 0, uint64(p), 0), func(c *call) (cuda.MemHandle, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		_, m := n.lookupLocked(uint64(p))
		if m == nil || m.h == nil {
			return 0, c.errf(cuda.ErrorInvalidValue, "%#x is not in a cuMemMap mapping", uint64(p))
		}
		m.h.userRefs++
		return m.h.id, nil
	})
}

// memAllocLocked makes a cuMemAlloc-style allocation (mapped, accessible
// everywhere).
func (n *Node) memAllocLocked(op string, ctx *context, size uint64, managed bool) (cuda.DevicePtr, error) {
	n.sweepExportsLocked()
	d := ctx.dev
	rounded := alignUp(size, 512)
	if n.used[d]+rounded > n.cfg.MemoryPerDevice {
		return 0, errf(op, cuda.ErrorOutOfMemory, "device %d: %d bytes requested, %d of %d in use", d, size, n.used[d], n.cfg.MemoryPerDevice)
	}
	r, ok := n.reserveLocked(alignUp(size, n.cfg.AllocGranularityMin), n.cfg.AllocGranularityMin, 0, true)
	if !ok {
		return 0, errf(op, cuda.ErrorOutOfMemory, "no free virtual range of %d bytes", size)
	}
	a := newPhysAlloc(n.newID(), d, rounded)
	a.prop = cuda.DeviceAllocationProp(d, cuda.HandleNone)
	a.refs = 1 // the mapping's
	n.allocs[a.id] = a
	n.used[d] += rounded
	m := &mapping{start: r.start, size: size, alloc: a, all: true}
	n.insertMappingLocked(m)
	n.memAlloc[cuda.DevicePtr(r.start)] = &memAllocation{ctx: ctx, res: r, m: m, alloc: a, managed: managed}
	return cuda.DevicePtr(r.start), nil
}

func (n *Node) freeMemAllocLocked(p cuda.DevicePtr, a *memAllocation) {
	delete(n.memAlloc, p)
	n.removeMappingLocked(a.m)
	n.dropReservationLocked(a.res)
}

// MemAlloc is cuMemAlloc on the current context's device. The simulator
// lets every device reach it (the real driver needs peer access enabled
// for other devices to).
func (n *Node) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	return get(n.ctxCall("cuMemAlloc", 0, 0, size), func(c *call) (cuda.DevicePtr, error) {
		ctx := c.ctx
		if size == 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "size is 0")
		}
		if err := ctx.stickyErr(c.op); err != nil {
			return 0, err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.memAllocLocked(c.op, ctx, size, false)
	})
}

// MemFree is cuMemFree.
func (n *Node) MemFree(p cuda.DevicePtr) error {
	return n.call("cuMemFree", -1, 0, uint64(p), 0).do(func(c *call) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		a := n.memAlloc[p]
		if a == nil {
			return c.errf(cuda.ErrorInvalidValue, "%#x is not the start of a cuMemAlloc allocation", uint64(p))
		}
		c.device(a.ctx.dev)
		n.freeMemAllocLocked(p, a)
		return nil
	})
}

// MemAllocManaged is cuMemAllocManaged: memory every device and the host
// can reach. It is charged to the current context's device.
func (n *Node) MemAllocManaged(size uint64, flags uint32) (cuda.DevicePtr, error) {
	return get(n.ctxCall("cuMemAllocManaged", uint64(flags), 0, size), func(c *call) (cuda.DevicePtr, error) {
		ctx := c.ctx
		if size == 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "size is 0")
		}
		if flags != cuda.MemAttachGlobal && flags != 2 /* CU_MEM_ATTACH_HOST */ {
			return 0, c.errf(cuda.ErrorInvalidValue, "flags %d: must be CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST", flags)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.memAllocLocked(c.op, ctx, size, true)
	})
}

// MemPrefetchAsync is cuMemPrefetchAsync. It checks its arguments and
// orders itself on the stream; data does not move in the simulator.
func (n *Node) MemPrefetchAsync(p cuda.DevicePtr, size uint64, dst cuda.Device, s cuda.Stream) error {
	return n.call("cuMemPrefetchAsync", int(dst), uint64(s), uint64(p), size).do(func(c *call) error {
		if dst != cuda.CPUDevice && !n.validDevice(dst) {
			return c.errf(cuda.ErrorInvalidDevice, "device %d does not exist", dst)
		}
		n.mu.Lock()
		var found *memAllocation
		for _, a := range n.memAlloc {
			if a.managed && uint64(p) >= a.m.start && uint64(p)+size <= a.m.end() {
				found = a
			}
		}
		n.mu.Unlock()
		if found == nil {
			return c.errf(cuda.ErrorInvalidValue, "[%#x, %#x) is not inside a managed allocation", uint64(p), uint64(p)+size)
		}
		st, err := n.streamFor(c.op, s)
		if err != nil {
			return err
		}
		return st.submit(c.op, func() error { return nil })
	})
}

// MemGetInfo is cuMemGetInfo for the current context's device.
func (n *Node) MemGetInfo() (free, total uint64, err error) {
	err = n.ctxCall("cuMemGetInfo", 0, 0, 0).do(func(c *call) error {
		ctx := c.ctx
		n.mu.Lock()
		defer n.mu.Unlock()
		n.sweepExportsLocked()
		free, total = n.cfg.MemoryPerDevice-n.used[ctx.dev], n.cfg.MemoryPerDevice
		return nil
	})
	return free, total, err
}

// PointerGetAttribute is cuPointerGetAttribute for device addresses:
// context, memory type, device ordinal, range start and size, mapped. The
// range of a cuMemAlloc (or managed, or mapped host) address is its
// allocation; that of a cuMemMap address is the whole reservation it was
// mapped into (rangeLocked).
func (n *Node) PointerGetAttribute(attr cuda.PointerAttribute, p cuda.DevicePtr) (uint64, error) {
	return get(n.call("cuPointerGetAttribute", -1, uint64(attr), uint64(p), 0), func(c *call) (uint64, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		_, m := n.lookupLocked(uint64(p))
		if m == nil {
			return 0, c.errf(cuda.ErrorInvalidValue, "%#x is not a mapped device address", uint64(p))
		}
		if m.mc != nil && (attr == cuda.PointerAttrDeviceOrdinal || attr == cuda.PointerAttrContext) {
			return 0, c.errf(cuda.ErrorInvalidValue, "%#x is a multicast address: it belongs to no single device", uint64(p))
		}
		if h := n.hostOfMappingLocked(m); h != nil {
			switch attr {
			case cuda.PointerAttrContext:
				return uint64(h.ctx.handle), nil
			case cuda.PointerAttrMemoryType:
				return 1, nil // CU_MEMORYTYPE_HOST
			}
		}
		switch attr {
		case cuda.PointerAttrContext:
			if m.all {
				return uint64(n.ctxs[m.alloc.dev].handle), nil
			}
			return 0, nil
		case cuda.PointerAttrMemoryType:
			return 2, nil // CU_MEMORYTYPE_DEVICE
		case cuda.PointerAttrDeviceOrdinal:
			return uint64(m.alloc.dev), nil
		case cuda.PointerAttrRangeStart:
			start, _ := n.rangeLocked(m)
			return start, nil
		case cuda.PointerAttrRangeSize:
			_, size := n.rangeLocked(m)
			return size, nil
		case cuda.PointerAttrMapped:
			return 1, nil
		}
		return 0, c.errf(cuda.ErrorInvalidValue, "pointer attribute %d is not modelled by the simulator", attr)
	})
}

// rangeLocked is the address range cuPointerGetAttribute reports for an
// address in m: its allocation for cuMemAlloc-style memory, else the
// cuMemAddressReserve range m lies in (which outlives its mappings). The
// driver reports the reservation's start for a mapping at any offset of
// it, with or without other mappings there, of the same allocation or
// not (580.159.04, internal/simdiff: 5 cases, mappings at +0, +2 and
// +4 MiB); the size is the reservation's by analogy (not yet seen).
func (n *Node) rangeLocked(m *mapping) (start, size uint64) {
	if m.all {
		return m.start, m.size
	}
	for _, r := range n.reservations {
		if !r.internal && m.start >= r.start && m.end() <= r.end() {
			return r.start, r.size
		}
	}
	return m.start, m.size
}
