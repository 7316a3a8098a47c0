package sim

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
)

// hostAlloc is a cuMemHostAlloc allocation: memory the node holds (Go
// memory, kept alive until cuMemFreeHost) and hands out by its host
// address. With CU_MEMHOSTALLOC_DEVICEMAP it is also mapped at a device
// address of the simulated address space (an address of its own, unlike
// the driver's unified addressing, so that a caller that gives a kernel
// the host pointer instead is caught), backed by the same words: what a
// kernel stores there, the host reads at the host address.
type hostAlloc struct {
	words []uint64
	size  uint64
	flags uint32
	ctx   *context
	res   *reservation // DEVICEMAP only
	m     *mapping
}

func (h *hostAlloc) base() uintptr { return uintptr(unsafe.Pointer(&h.words[0])) }

// hostFlags are the CU_MEMHOSTALLOC_* bits cuMemHostAlloc takes.
const hostFlags = cuda.MemHostAllocPortable | cuda.MemHostAllocDeviceMap | cuda.MemHostAllocWriteCombined

// MemHostAlloc is cuMemHostAlloc in the current context.
func (n *Node) MemHostAlloc(size uint64, flags uint32) (unsafe.Pointer, error) {
	return get(n.ctxCall("cuMemHostAlloc", uint64(flags), 0, size), func(c *call) (unsafe.Pointer, error) {
		if size == 0 {
			return nil, c.errf(cuda.ErrorInvalidValue, "size is 0")
		}
		if flags&^hostFlags != 0 {
			return nil, c.errf(cuda.ErrorInvalidValue, "flags %#x: CU_MEMHOSTALLOC_PORTABLE, _DEVICEMAP and _WRITECOMBINED are the only bits", flags)
		}
		h := &hostAlloc{words: make([]uint64, (size+7)/8), size: size, flags: flags, ctx: c.ctx}
		n.mu.Lock()
		defer n.mu.Unlock()
		if flags&cuda.MemHostAllocDeviceMap != 0 {
			r, ok := n.reserveLocked(alignUp(size, n.cfg.AllocGranularityMin), n.cfg.AllocGranularityMin, 0, true)
			if !ok {
				return nil, c.errf(cuda.ErrorOutOfMemory, "no free virtual range of %d bytes", size)
			}
			a := newPhysAlloc(n.newID(), c.ctx.dev, 8*uint64(len(h.words)))
			a.host, a.refs = h.words, 1
			h.res, h.m = r, &mapping{start: r.start, size: size, alloc: a, all: true}
			n.insertMappingLocked(h.m)
		}
		n.hostAllocs[h.base()] = h
		return unsafe.Pointer(&h.words[0]), nil
	})
}

// hostAllocOfLocked is the allocation holding host address p, or nil.
func (n *Node) hostAllocOfLocked(p uintptr) *hostAlloc {
	for b, h := range n.hostAllocs {
		if p >= b && p < b+uintptr(h.size) {
			return h
		}
	}
	return nil
}

// hostOfMappingLocked is the allocation mapped by m, or nil when m maps
// device memory.
func (n *Node) hostOfMappingLocked(m *mapping) *hostAlloc {
	if m.alloc == nil || m.alloc.host == nil {
		return nil
	}
	for _, h := range n.hostAllocs {
		if h.m == m {
			return h
		}
	}
	return nil
}

// MemHostGetDevicePointer is cuMemHostGetDevicePointer: the device address
// of p, in an allocation made with CU_MEMHOSTALLOC_DEVICEMAP, for the
// current context (the allocating one unless it is portable).
func (n *Node) MemHostGetDevicePointer(p unsafe.Pointer, flags uint32) (cuda.DevicePtr, error) {
	return get(n.ctxCall("cuMemHostGetDevicePointer", uint64(flags), 0, 0), func(c *call) (cuda.DevicePtr, error) {
		if flags != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "flags %#x: must be 0", flags)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		h := n.hostAllocOfLocked(uintptr(p))
		switch {
		case h == nil:
			return 0, c.errf(cuda.ErrorInvalidValue, "%p is not in memory from cuMemHostAlloc", p)
		case h.m == nil:
			return 0, c.errf(cuda.ErrorInvalidValue, "%p was allocated without CU_MEMHOSTALLOC_DEVICEMAP", p)
		case h.flags&cuda.MemHostAllocPortable == 0 && h.ctx != c.ctx:
			return 0, c.errf(cuda.ErrorInvalidValue, "%p is pinned for device %d's context only (not CU_MEMHOSTALLOC_PORTABLE)", p, h.ctx.dev)
		}
		return cuda.DevicePtr(h.m.start + uint64(uintptr(p)-h.base())), nil
	})
}

// MemFreeHost is cuMemFreeHost. Kernels that still reach for the device
// address fault (the mapping is gone); the host address must not be used
// either, as with the driver.
func (n *Node) MemFreeHost(p unsafe.Pointer) error {
	return n.call("cuMemFreeHost", -1, 0, 0, 0).do(func(c *call) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		h := n.hostAllocs[uintptr(p)]
		if h == nil {
			return c.errf(cuda.ErrorInvalidValue, "%p is not the start of memory from cuMemHostAlloc", p)
		}
		c.device(h.ctx.dev)
		n.freeHostAllocLocked(h)
		return nil
	})
}

func (n *Node) freeHostAllocLocked(h *hostAlloc) {
	delete(n.hostAllocs, h.base())
	if h.m != nil {
		n.removeMappingLocked(h.m)
		n.dropReservationLocked(h.res)
	}
}

// freeHostAllocsLocked frees what ctx allocated: its host memory goes with
// the context, as the driver's does.
func (n *Node) freeHostAllocsLocked(ctx *context) {
	for _, h := range n.hostAllocs {
		if h.ctx == ctx {
			n.freeHostAllocLocked(h)
		}
	}
}

// hostRead copies the bytes at off of a host-backed allocation, each word
// read atomically.
func (a *physAlloc) hostRead(off uint64, dst []byte) {
	var b [8]byte
	for len(dst) > 0 {
		i, o := off/8, off%8
		if i >= uint64(len(a.host)) {
			clear(dst)
			return
		}
		binary.NativeEndian.PutUint64(b[:], atomic.LoadUint64(&a.host[i]))
		k := copy(dst, b[o:])
		dst = dst[k:]
		off += uint64(k)
	}
}

// hostWrite stores src at off of a host-backed allocation: whole aligned
// words with one atomic store (an aligned 8-byte store is single-copy
// atomic on the GPU too), partial words with a compare-and-swap loop.
func (a *physAlloc) hostWrite(off uint64, src []byte) {
	var b [8]byte
	for len(src) > 0 {
		i, o := off/8, off%8
		if i >= uint64(len(a.host)) {
			return
		}
		k := min(8-o, uint64(len(src)))
		w := &a.host[i]
		if k == 8 {
			atomic.StoreUint64(w, binary.NativeEndian.Uint64(src))
		} else {
			for {
				old := atomic.LoadUint64(w)
				binary.NativeEndian.PutUint64(b[:], old)
				copy(b[o:], src[:k])
				if atomic.CompareAndSwapUint64(w, old, binary.NativeEndian.Uint64(b[:])) {
					break
				}
			}
		}
		src = src[k:]
		off += k
	}
}
